"""The benchmark's count of the operator's own API requests names verbs and resources as the API server does."""

from __future__ import annotations

import pytest
from bench.request_count import classify


@pytest.mark.parametrize(
    ("method", "url", "content_type", "expected"),
    [
        (
            "GET",
            "https://h/apis/apps/v1/namespaces/ns/deployments?labelSelector=a%3Db",
            None,
            ("LIST", "apps/deployments"),
        ),
        ("GET", "https://h/apis/apps/v1/namespaces/ns/deployments/glm", None, ("GET", "apps/deployments")),
        ("GET", "https://h/api/v1/pods?watch=true&labelSelector=x", None, ("WATCH", "pods")),
        ("GET", "https://h/api/v1/namespaces/ns/pods/p/status", None, ("GET", "pods/status")),
        (
            "PATCH",
            "https://h/api/v1/namespaces/ns/services/glm?fieldManager=glmops",
            "application/apply-patch+yaml",
            ("APPLY", "services"),
        ),
        (
            "PATCH",
            "https://h/apis/glmops.dev/v1alpha1/namespaces/ns/glmdeployments/glm/status",
            "application/merge-patch+json",
            ("PATCH", "glmops.dev/glmdeployments/status"),
        ),
        ("POST", "https://h/api/v1/namespaces/ns/events", "application/json", ("POST", "events")),
        ("GET", "https://h/api/v1/namespaces/ns", None, ("GET", "namespaces")),
        ("GET", "https://h/apis/glmops.dev/v1alpha1/glmdeployments", None, ("LIST", "glmops.dev/glmdeployments")),
        ("GET", "https://h/version", None, ("GET", "-")),
        ("GET", "https://h/apis", None, ("GET", "-")),
    ],
)
def test_each_request_is_named_by_verb_and_resource(
    method: str, url: str, content_type: str | None, expected: tuple[str, str]
) -> None:
    assert classify(method, url, content_type) == expected
