"""Whether the author of a GLMDeployment may do themselves what its fields ask of the operator.

One SubjectAccessReview per object a field names (rules/access.py lists them), for the user of the
AdmissionReview's userInfo, as the API server authorizes that user: RBAC, webhooks and all. A right granted is
remembered for ALLOWED_TTL_S (a user applying again asks the API server once, not on every apply); a refusal is
never remembered, so a right just granted counts at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
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


ALLOWED_TTL_S = 10.0
"""How long a granted right is taken as still granted: a right revoked counts within this (the API server's own
webhook authorizer keeps an allowed answer 5 minutes by default, `--authorization-webhook-cache-authorized-ttl`)."""
ALLOWED_ENTRIES = 4096
"""At most this many granted rights remembered (the oldest are forgotten first): memory stays bounded."""


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


class GrantedRights:
    """Rights the API server granted a user in the last ALLOWED_TTL_S, at most ALLOWED_ENTRIES of them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._until: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(need: AccessNeed, namespace: str, userinfo: Mapping[str, Any]) -> tuple[str, ...]:
        """Who (every part of the userInfo a review carries), where, and what."""
        who = json.dumps([userinfo.get(k) for k in ("username", "uid", "groups", "extra")], sort_keys=True)
        return (who, namespace, need.verb, need.resource, need.name)

    def granted(self, key: tuple[str, ...]) -> bool:
        with self._lock:
            until = self._until.get(key)
            if until is None:
                return False
            if until <= self.clock():
                del self._until[key]
                return False
            return True

    def grant(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._until[key] = self.clock() + ALLOWED_TTL_S
            self._until.move_to_end(key)
            while len(self._until) > ALLOWED_ENTRIES:
                self._until.popitem(last=False)


GRANTED = GrantedRights()


def all_granted(
    needs: Sequence[AccessNeed], namespace: str, userinfo: Mapping[str, Any], granted: GrantedRights | None = None
) -> bool:
    """Whether the API server granted every need to this user within ALLOWED_TTL_S: then `denied` would ask it
    nothing, and the webhook answers without a hop to a thread."""
    granted = granted or GRANTED
    return all(granted.granted(granted.key(need, namespace, userinfo)) for need in needs)


def denied(
    needs: Sequence[AccessNeed], namespace: str, userinfo: Mapping[str, Any], granted: GrantedRights | None = None
) -> list[AccessNeed]:
    """The needs the user may not do; AccessCheckFailed when the API server cannot say."""
    granted = granted or GRANTED
    api = kubernetes.client.AuthorizationV1Api(api_client())
    deadline = time.monotonic() + REVIEWS_BUDGET_S
    answers: dict[tuple[str, str, str], bool] = {}  # the same object named twice is asked once
    out = []
    for need in needs:
        key = (need.verb, need.resource, need.name)
        if key not in answers:
            remembered = granted.key(need, namespace, userinfo)
            if granted.granted(remembered):
                answers[key] = True
            else:
                answers[key] = len(answers) < MAX_REVIEWS and _allowed(api, need, namespace, userinfo, deadline)
                if answers[key]:
                    granted.grant(remembered)
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
