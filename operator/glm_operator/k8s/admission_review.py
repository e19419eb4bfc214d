"""What the webhook server accepts before kopf sees a request: one AdmissionReview, as JSON, for our resource.

Pure functions: each refusal is an HTTP status (4xx) and a short message naming the field, so a malformed,
truncated, oversized or hostile body gets a clean answer instead of an exception in kopf.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from glm_operator.rules.findings import clip

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The API server stores objects of at most 1.5 MiB (etcd's default); an UPDATE review carries two of them."""
MAX_DEPTH = 64
"""Kubernetes objects are a few levels deep; deeper JSON is refused before anything recurses into it."""
REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
JSON_CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class Refusal(Exception):
    """A request the webhook answers with `status` and `message` instead of a review."""

    status: int
    message: str

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


def check_request_line(path_id: str, content_type: str, webhook_ids: Collection[str]) -> None:
    """Refuse unknown paths (404) and bodies that are not declared JSON (415)."""
    if path_id not in webhook_ids:
        known = ", ".join(f"/{i}" for i in sorted(webhook_ids))
        raise Refusal(404, f"no webhook at /{clip(path_id, 80)}; glmops serves {known}")
    if content_type != JSON_CONTENT_TYPE:
        raise Refusal(415, f"content type {clip(content_type or 'none', 80)!s} is not {JSON_CONTENT_TYPE}")


def parse_review(body: bytes, resources: Collection[tuple[str, str, str]]) -> dict[str, Any]:
    """The AdmissionReview in `body`, or a Refusal saying what is wrong with it."""
    if len(body) > MAX_BODY_BYTES:
        raise Refusal(413, f"body larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise Refusal(400, "body is not UTF-8") from err
    except RecursionError as err:
        raise Refusal(400, "not JSON this webhook reads: nested too deeply") from err
    except ValueError as err:  # JSONDecodeError, NaN/Infinity, an integer of more than 4,300 digits
        raise Refusal(400, f"not JSON this webhook reads: {clip(str(err), 120)}") from err
    if _depth_exceeds(data, MAX_DEPTH):
        raise Refusal(400, f"JSON nested more than {MAX_DEPTH} levels")
    problem = review_problem(data, resources)
    if problem:
        raise Refusal(400, f"not an AdmissionReview: {problem}")
    return dict(data)


def review_problem(data: Any, resources: Collection[tuple[str, str, str]]) -> str | None:
    """The first field of an AdmissionReview the API server would never send as it is, or None."""
    if not isinstance(data, dict):
        return f"the body is a JSON {type(data).__name__}, not an object"
    if data.get("kind") != "AdmissionReview" or data.get("apiVersion") not in REVIEW_VERSIONS:
        return f"kind/apiVersion must be AdmissionReview/{' or '.join(REVIEW_VERSIONS)}"
    request = data.get("request")
    if not isinstance(request, dict):
        return "request: must be an object"
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        return "request.uid: must be a non-empty string"
    if request.get("operation") not in OPERATIONS:
        return f"request.operation: must be one of {', '.join(OPERATIONS)}"
    resource = request.get("resource")
    if not isinstance(resource, dict) or not all(isinstance(resource.get(k), str) for k in _RESOURCE_KEYS):
        return "request.resource: must be an object with group, version and resource strings"
    if tuple(resource[k] for k in _RESOURCE_KEYS) not in resources:
        return f"request.resource: glmops has no webhook for {clip(json.dumps(resource), 120)}"
    if not isinstance(request.get("userInfo"), dict):
        return "request.userInfo: must be an object"
    if not isinstance(request.get("dryRun", False), bool):
        return "request.dryRun: must be a boolean"
    return _objects_problem(request)


_RESOURCE_KEYS = ("group", "version", "resource")


def _objects_problem(request: dict[str, Any]) -> str | None:
    present = 0
    for key in ("object", "oldObject"):
        obj = request.get(key)
        if obj is None:
            continue
        if not isinstance(obj, dict):
            return f"request.{key}: must be an object or null"
        if not isinstance(obj.get("metadata"), dict):
            return f"request.{key}.metadata: must be an object"
        present += 1
    return None if present else "request.object: an object or an oldObject is needed"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth_exceeds(data: Any, limit: int) -> bool:
    """Whether `data` nests deeper than `limit` (iteratively: a hostile depth must not recurse here either)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
