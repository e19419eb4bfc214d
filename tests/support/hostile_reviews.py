"""AdmissionReview bodies a careless or hostile client sends straight to the webhook port, each with the status due.

Shared by the unit test of the request screen and the integration test against the running operator.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm_operator.k8s.admission_review import MAX_BODY_BYTES
from tests.support.builders import GLMDeploymentBuilder

JSON = "application/json"


def review(obj: Any, uid: str = "0df28fbd-5f5f-4a4f-8e4f-000000000001", **request: Any) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it for a GLMDeployment CREATE."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "glmops.dev", "version": "v1alpha1", "kind": "GLMDeployment"},
            "resource": {"group": "glmops.dev", "version": "v1alpha1", "resource": "glmdeployments"},
            "requestKind": {"group": "glmops.dev", "version": "v1alpha1", "kind": "GLMDeployment"},
            "requestResource": {"group": "glmops.dev", "version": "v1alpha1", "resource": "glmdeployments"},
            "name": "hostile",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "tester", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            **request,
        },
    }


def valid_object() -> dict[str, Any]:
    return GLMDeploymentBuilder("hostile").namespace("default").tensor(8).build()


def _with_request(**changes: Any) -> bytes:
    return json.dumps(review(valid_object(), **changes)).encode()


def _replace_request(value: Any) -> bytes:
    body = review(valid_object())
    body["request"] = value
    return json.dumps(body).encode()


def _metadata(value: Any) -> bytes:
    obj = valid_object()
    obj["metadata"] = value
    return json.dumps(review(obj)).encode()


def refusal_status(http_status: int, body: bytes) -> int:
    """The status an answer refuses with: its HTTP status, or the code of an AdmissionReview denial (HTTP 200).

    A refused body that starts as the API server's reviews do is answered with a denial carrying its uid, so the
    API server shows the reason to the user whatever the failurePolicy (`k8s/admission_review.py`).
    """
    if http_status != 200:
        return http_status
    response = json.loads(body).get("response", {})
    return 200 if response.get("allowed") else int(response.get("status", {}).get("code", 0))


@dataclass(frozen=True)
class Hostile:
    name: str
    body: bytes
    status: int
    content_type: str = JSON
    path: str = "/glmops-validate"


VALID = json.dumps(review(valid_object())).encode()


def _empty_objects(size: int) -> bytes:
    """A review as the API server sends one, of `size` bytes or so, its object's spec.pod.volumes all `{}`."""
    head, tail = VALID.split(b'"spec": {', 1)
    count = max(1, (size - len(VALID)) // 3)
    return head + b'"spec": {"pod": {"volumes": [' + b",".join([b"{}"] * count) + b"]}, " + tail


def post_valid(
    port: int, context: ssl.SSLContext, client: tuple[Path, Path] | None, timeout: float
) -> tuple[int, bytes]:
    """VALID straight to a webhook on 127.0.0.1:`port` over `context`, presenting `client`'s certificate if given."""
    if client is not None:
        context.load_cert_chain(*client)
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    try:
        connection.request("POST", "/glmops-validate", body=VALID, headers={"Content-Type": JSON})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


HOSTILE: list[Hostile] = [
    Hostile("not-an-admission-review", b'{"hello": "world"}', 400),
    Hostile("json-array", b"[]", 400),
    Hostile("json-string", b'"AdmissionReview"', 400),
    Hostile("empty-body", b"", 400),
    Hostile("truncated", VALID[: len(VALID) // 2], 400),
    Hostile("request-null", _replace_request(None), 400),
    Hostile("request-string", _replace_request("x"), 400),
    Hostile("string-object", _with_request(object="x"), 400),
    Hostile("no-object", _with_request(object=None), 400),
    Hostile("metadata-null", _metadata(None), 400),
    Hostile("metadata-list", _metadata([]), 400),
    Hostile("uid-missing", _with_request(uid=""), 400),
    Hostile("operation-unknown", _with_request(operation="PATCH"), 400),
    Hostile("user-info-null", _with_request(userInfo=None), 400),
    Hostile("other-resource", _with_request(resource={"group": "", "version": "v1", "resource": "pods"}), 400),
    Hostile("nan", VALID.replace(b'"tensor": 8', b'"tensor": NaN'), 400),
    Hostile("infinity", VALID.replace(b'"tensor": 8', b'"tensor": -Infinity'), 400),
    Hostile("5000-digit-integer", VALID.replace(b'"tensor": 8', b'"tensor": ' + b"9" * 5000), 400),
    Hostile("10000-levels", b'{"a": ' * 10_000 + b"1" + b"}" * 10_000, 400),
    Hostile("100-levels-in-spec", VALID.replace(b'"tensor": 8', b'"tensor": ' + b"[" * 100 + b"]" * 100), 400),
    Hostile("not-utf8", b'{"kind": "\xff\xfe"}', 400),
    Hostile("oversized", b'{"a": "' + b"x" * (5 * 1024 * 1024) + b'"}', 413),
    Hostile("4-mib-of-empty-objects", _empty_objects(4 * 1024 * 1024), 413),
    Hostile("over-the-bound", VALID.replace(b'"tensor": 8', b'"tensor": 8' + b" " * MAX_BODY_BYTES), 413),
    Hostile("60000-empty-objects-within-the-bound", _empty_objects(60_000 * 3), 413),
    Hostile("text-plain", VALID, 415, content_type="text/plain"),
    Hostile("form", VALID, 415, content_type="application/x-www-form-urlencoded"),
    Hostile("unknown-path", VALID, 404, path="/anything"),
    Hostile("root-path", VALID, 404, path="/"),
    Hostile("path-of-a-handler-prefix", VALID, 404, path="/glmops-validate/../x"),
]
