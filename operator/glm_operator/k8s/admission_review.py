"""What the webhook server accepts before kopf sees a request: one AdmissionReview, as JSON, for our resource.

Pure functions: each refusal is an HTTP status (4xx) and a short message naming the field, so a malformed,
truncated, oversized or hostile body gets a clean answer instead of an exception in kopf.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from glm_operator.rules.findings import clip

STORED_OBJECT_BYTES = 1536 * 1024
"""The largest object the API server can store: etcd's default request limit (`--max-request-bytes`, 1.5 MiB).

A GLMDeployment's schema cannot bound it (spec.pod.volumes and spec.pod.affinity keep Kubernetes' own pod fields,
metadata its labels and managedFields), so the store's limit is the bound: a write of a larger object fails at
etcd whatever admission says."""
REVIEW_ENVELOPE_BYTES = 64 * 1024
"""What an AdmissionReview carries besides its objects: uid, kind, resource, userInfo (groups, extra), options."""
MAX_BODY_BYTES = 2 * STORED_OBJECT_BYTES + REVIEW_ENVELOPE_BYTES
"""3,211,264 bytes: an UPDATE carries `object` and `oldObject`, each at most STORED_OBJECT_BYTES, and its envelope.

Any larger review is of an object that cannot be stored, so it is refused before a byte of it is parsed."""
MAX_DEPTH = 64
"""Kubernetes objects are a few levels deep; deeper JSON is refused before anything recurses into it."""
MAX_CONTAINERS = 50_000
"""JSON objects and arrays in one review. The rules engine's work grows with them (a 100,000-item volume list took
3.7 s); the largest sample's UPDATE review with managedFields holds a few hundred. A budget, not a schema bound."""
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


def too_large(size: int) -> Refusal:
    """The refusal of a body of `size` bytes (or more, while it streams) over MAX_BODY_BYTES."""
    return Refusal(
        413,
        f"AdmissionReview of {size:,} bytes or more: larger than {MAX_BODY_BYTES:,} bytes, two GLMDeployments at "
        f"the largest object the API server stores ({STORED_OBJECT_BYTES:,} bytes) and the review around them; "
        "no GLMDeployment that large can be stored. Shrink metadata (annotations, labels) or spec.pod "
        "(volumes, affinity)",
    )


def check_structure(body: bytes) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH or with more than MAX_CONTAINERS objects and arrays, unparsed.

    One pass of C-level byte operations (strings blanked, brackets kept, a running sum), about 0.1 s for
    MAX_BODY_BYTES of `{}`: the walk over parsed objects this replaces took 4.7 s on 4 MiB of them.
    """
    brackets = _STRING.sub(b'""', body).translate(None, _NOT_BRACKETS)
    containers = brackets.count(b"{") + brackets.count(b"[")
    if containers > MAX_CONTAINERS:
        raise Refusal(
            413,
            f"JSON with {containers:,} objects and arrays, more than {MAX_CONTAINERS:,}: no "
            "GLMDeployment has that many. Shrink spec.pod (volumes, affinity) or metadata",
        )
    if containers and max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets))) > MAX_DEPTH:
        raise Refusal(400, f"JSON nested more than {MAX_DEPTH} levels")


# A JSON string, written as runs of plain characters between escapes: the same match as `"(?:[^"\\]|\\.)*"` at less
# than half its time on a review (one step per run, not one alternation per character; bench/RESULTS.md).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEP = [0] * 256
_BRACKET_STEP[ord("{")] = _BRACKET_STEP[ord("[")] = 1
_BRACKET_STEP[ord("}")] = _BRACKET_STEP[ord("]")] = -1

_REVIEW_HEAD = re.compile(
    rb'\A\s*\{\s*(?:"kind"\s*:\s*"AdmissionReview"\s*,\s*"apiVersion"\s*:\s*"(?P<v>admission\.k8s\.io/v1(?:beta1)?)"'
    rb'|"apiVersion"\s*:\s*"(?P<v2>admission\.k8s\.io/v1(?:beta1)?)"\s*,\s*"kind"\s*:\s*"AdmissionReview")'
    rb'\s*,\s*"request"\s*:\s*\{\s*"uid"\s*:\s*"(?P<uid>[0-9A-Za-z-]{1,64})"'
)
"""How the API server starts every review it sends (Go writes struct fields in order: kind, apiVersion, request,
and uid first in it; apiVersion first is accepted too), so a refusal can be an AdmissionReview answer unparsed."""


def refusal_review(head: bytes, refusal: Refusal) -> dict[str, Any] | None:
    """An AdmissionReview denying the review that starts with `head`, when it starts as the API server's do; else None.

    The API server shows a denial's message to the user whatever the webhook's failurePolicy; a 413 it treats as a
    failed call, which `failurePolicy: Ignore` would admit unchecked and `Fail` reports without the reason.
    """
    match = _REVIEW_HEAD.match(head[:1024])
    if match is None:
        return None
    status = {
        "code": refusal.status,
        "reason": "RequestEntityTooLarge" if refusal.status == 413 else "BadRequest",
        "message": f"glmops refused this review unread: {refusal.message}",
    }
    return {
        "apiVersion": (match["v"] or match["v2"]).decode("ascii"),
        "kind": "AdmissionReview",
        "response": {"uid": match["uid"].decode("ascii"), "allowed": False, "status": status},
    }


def parse_review(body: bytes, resources: Collection[tuple[str, str, str]]) -> dict[str, Any]:
    """The AdmissionReview in `body`, or a Refusal saying what is wrong with it."""
    if len(body) > MAX_BODY_BYTES:
        raise too_large(len(body))
    check_structure(body)
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise Refusal(400, "body is not UTF-8") from err
    except RecursionError as err:
        raise Refusal(400, "not JSON this webhook reads: nested too deeply") from err
    except ValueError as err:  # JSONDecodeError, NaN/Infinity, an integer of more than 4,300 digits
        raise Refusal(400, f"not JSON this webhook reads: {clip(str(err), 120)}") from err
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
