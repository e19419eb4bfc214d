"""A check that the validating webhook answers through its Service: the chart's `helm test` runs it.

`python -m glm_operator.k8s.webhook_check <url> <ca file>` sends the webhook an AdmissionReview of a GLMDeployment
the rules refuse (GLM-5.3 on one H200, expert parallelism over a single rank) over TLS verified with the chart's
CA, and passes only when the answer refuses it naming a rule: the certificate, the Service, the server and the
rules all work.

With `--client-auth` (the chart's webhook.clientAuth: the server answers only the API server, whose client
certificate the check has not), it passes when the server's certificate verifies for the Service and a request
without a client certificate gets no answer: the certificate, the Service, the server and its client authentication
work. Admission itself is then checked through the API server (`kubectl apply --dry-run=server`).
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import urllib.parse
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


def check_client_auth(url: str, ca_file: str, *, hostname: str | None = None, timeout: float = 10.0) -> str:
    """What passed; raises when the server's certificate does not verify or it answers a client without one."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    context = ssl.create_default_context(cafile=ca_file)
    # In TLS 1.3 the client's side of the handshake (the server's certificate verified) ends before the server
    # checks the client's; in TLS 1.2 the server's refusal would hide whether its own certificate verified.
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    body = json.dumps(review(REFUSED)).encode()
    request = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {hostname or host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with (
        socket.create_connection((host, port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=hostname or host) as tls,
    ):
        try:
            tls.sendall(request + body)
            answer = tls.recv(64)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            answer = b""  # the server closed the connection: no client certificate, no answer
    if answer:
        raise RuntimeError(
            f"{url}: answered a client without a client certificate ({answer.splitlines()[0][:60]!r}): "
            "client authentication is off"
        )
    return "the webhook's certificate verified, and a client without a client certificate got no answer"


def main(argv: list[str]) -> int:
    client_auth = argv[:1] == ["--client-auth"]
    args = argv[1:] if client_auth else argv
    if len(args) != 2:
        print(
            "usage: python -m glm_operator.k8s.webhook_check [--client-auth] <https://service/glmops-validate> <ca.crt>"
        )
        return 2
    try:
        if client_auth:
            print(f"OK {check_client_auth(args[0], args[1])}")
            return 0
        message = check(args[0], args[1])
    except (RuntimeError, httpx.HTTPError, ssl.SSLError, OSError) as err:
        print(f"FAIL {err}")
        return 1
    print(f"OK the webhook refused the broken GLMDeployment: {message[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
