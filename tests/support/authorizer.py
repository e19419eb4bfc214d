"""A stand-in for the API server's SubjectAccessReview answers, for tests of glmops' author-rights checks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from glm_operator.k8s import access as k8s_access


def fake_authorizer(monkeypatch: pytest.MonkeyPatch, allowed: set[str]) -> list[Any]:
    """The reviews asked, in order; a review is allowed when it names an object in `allowed`. Nothing is remembered
    from other tests (a fresh GRANTED)."""
    asked: list[Any] = []

    class Api:
        def __init__(self, _client: Any) -> None:
            pass

        def create_subject_access_review(self, body: Any, _request_timeout: float) -> Any:
            assert 0 < _request_timeout <= k8s_access.REVIEWS_BUDGET_S
            asked.append(body)
            name = body.spec.resource_attributes.name
            return SimpleNamespace(status=SimpleNamespace(allowed=name in allowed))

    monkeypatch.setattr(k8s_access.kubernetes.client, "AuthorizationV1Api", Api)
    monkeypatch.setattr(k8s_access, "api_client", lambda: None)
    monkeypatch.setattr(k8s_access, "GRANTED", k8s_access.GrantedRights())
    return asked
