"""A check that the validating webhook answers through its Service: the chart's `helm test` runs it.

`python -m glm_operator.k8s.webhook_check <url> <ca file>` sends the webhook an AdmissionReview of a GLMDeployment
the rules refuse (GLM-5.3 on one H200, expert parallelism over a single rank) over TLS verified with the chart's
CA, and passes only when the answer refuses it naming a rule: the certificate, the Service, the server and the
rules all work.
"""

from __future__ import annotations

import json
import ssl
import sys
import uuid
from typing import Any

import httpx

from glm_operator.api import GROUP, KIND, PLURAL, VERSION

REFUSED = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": KIND,
    "metadata": {"name": "glmops-webhook-check", "namespace": "default"},
    "spec": {"model": {"name": "zai-org/GLM-5.3"}, "accelerator": {"type": "H200"}, "parallelism": {"expert": True}},
}


def review(obj: dict[str, Any]) -> dict[str, Any]:
    """A CREATE AdmissionReview of `obj`, as the API server sends it (dry run: nothing is stored)."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": GROUP, "version": VERSION, "kind": KIND},
            "resource": {"group": GROUP, "version": VERSION, "resource": PLURAL},
            "requestKind": {"group": GROUP, "version": VERSION, "kind": KIND},
            "requestResource": {"group": GROUP, "version": VERSION, "resource": PLURAL},
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "glmops-webhook-check"},
            "object": obj,
            "oldObject": None,
            "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def check(url: str, ca_file: str, *, hostname: str | None = None, timeout: float = 10.0) -> str:
    """The refusal message; raises RuntimeError when the webhook admits the broken GLMDeployment or fails.

    `hostname`: the name the certificate must be valid for, when the URL's host is an address.
    """
    context = ssl.create_default_context(cafile=ca_file)
    extensions = {"sni_hostname": hostname} if hostname else None
    with httpx.Client(verify=context, timeout=timeout) as client:
        response = client.post(url, json=review(REFUSED), extensions=extensions)
    if response.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
    answer = response.json().get("response") or {}
    message = str((answer.get("status") or {}).get("message", ""))
    if answer.get("allowed") is not False or "(rule " not in message:
        raise RuntimeError(f"{url}: admitted a GLMDeployment the rules refuse: {json.dumps(answer)[:300]}")
    return message


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m glm_operator.k8s.webhook_check <https://service/glmops-validate> <ca.crt>")
        return 2
    try:
        message = check(argv[0], argv[1])
    except (RuntimeError, httpx.HTTPError, ssl.SSLError, OSError) as err:
        print(f"FAIL {err}")
        return 1
    print(f"OK the webhook refused the broken GLMDeployment: {message[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
