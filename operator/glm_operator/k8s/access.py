"""Whether the author of a GLMDeployment may do themselves what its fields ask of the operator.

One SubjectAccessReview per object a field names (rules/access.py lists them), for the user of the
AdmissionReview's userInfo, as the API server authorizes that user: RBAC, webhooks and all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes

from glm_operator.k8s.client import API_UNREACHABLE, api_client, refusal
from glm_operator.rules.access import AccessNeed

REVIEWS_BUDGET_S = 6.0
"""All reviews of one admission together: the API server gives this webhook 10 s by default, and the rules and the
answer need some of it. Past it, admission refuses (the user retries) rather than let the operator's rights decide."""
MAX_REVIEWS = 64
"""At most this many distinct reviews per admission (16 volumes with a few projected sources, 16 pull secrets, the
token, the ServiceAccount, the canary ConfigMap fit); objects beyond them are refused unasked."""


class AccessCheckFailed(Exception):
    """The API server could not answer a review; admission must refuse rather than let the operator's rights decide."""


def subject_access_review(need: AccessNeed, namespace: str, userinfo: Mapping[str, Any]) -> dict[str, Any]:
    """The SubjectAccessReview asking whether this user may do what `need` says, in `namespace`."""
    spec: dict[str, Any] = {
        "user": userinfo.get("username") or "",
        "groups": list(userinfo.get("groups") or []),
        "resourceAttributes": {
            "namespace": namespace,
            "verb": need.verb,
            "group": "",
            "resource": need.resource,
            "name": need.name,
        },
    }
    if userinfo.get("uid"):
        spec["uid"] = userinfo["uid"]
    if userinfo.get("extra"):
        spec["extra"] = {k: list(v) for k, v in dict(userinfo["extra"]).items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def denied(needs: Sequence[AccessNeed], namespace: str, userinfo: Mapping[str, Any]) -> list[AccessNeed]:
    """The needs the user may not do; AccessCheckFailed when the API server cannot say."""
    api = kubernetes.client.AuthorizationV1Api(api_client())
    deadline = time.monotonic() + REVIEWS_BUDGET_S
    answers: dict[tuple[str, str, str], bool] = {}  # the same object named twice is asked once
    out = []
    for need in needs:
        key = (need.verb, need.resource, need.name)
        if key not in answers:
            answers[key] = len(answers) < MAX_REVIEWS and _allowed(api, need, namespace, userinfo, deadline)
        if not answers[key]:
            out.append(need)
    return out


def _allowed(api: Any, need: AccessNeed, namespace: str, userinfo: Mapping[str, Any], deadline: float) -> bool:
    left = deadline - time.monotonic()
    if left <= 0:
        raise AccessCheckFailed(f"the SubjectAccessReviews took longer than {REVIEWS_BUDGET_S:g} s")
    body = kubernetes.client.V1SubjectAccessReview.from_dict(subject_access_review(need, namespace, userinfo))
    if body is None:
        raise AccessCheckFailed("could not build a SubjectAccessReview")
    try:
        review = api.create_subject_access_review(body, _request_timeout=left)
    except kubernetes.client.ApiException as err:
        raise AccessCheckFailed(f"SubjectAccessReview refused: {refusal(err)}") from err
    except API_UNREACHABLE as err:
        raise AccessCheckFailed(f"the API server did not answer a SubjectAccessReview: {err}") from err
    return bool(review.status is not None and review.status.allowed)
