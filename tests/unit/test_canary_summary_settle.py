"""status.canary.summary settles on what status.canary.pods holds, even when two pods' gates write at once."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from glm_operator.k8s import objects
from glm_operator.render.canary_state import summarize

FAILED = {"passed": False, "message": "smoke 0"}


class FakeStatusApi:
    """Stored GLMDeployments' status; a patch carrying a stale resourceVersion is refused as the API server does."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies  # what each successive read returns
        self.reads = 0
        self.patches: list[dict[str, Any]] = []

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        body = self.bodies[min(self.reads, len(self.bodies) - 1)]
        self.reads += 1
        return body

    def patch_namespaced_custom_object_status(self, *args: Any) -> None:
        patch = args[-1]
        current = self.bodies[min(self.reads, len(self.bodies) - 1)]["metadata"]["resourceVersion"]
        if patch["metadata"]["resourceVersion"] != current:
            raise kubernetes.client.ApiException(status=409, reason="Conflict")
        self.patches.append(patch)


def _body(version: str, pods: dict[str, Any], summary: str) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": version}, "status": {"canary": {"pods": pods, "summary": summary}}}


@pytest.mark.parametrize(
    ("bodies", "patched"),
    [
        # The last writer computed its summary before the other pod's report landed: corrected.
        ([_body("7", {"a": FAILED, "b": FAILED}, "0/1 pods passed; failing a: smoke 0")], ["7"]),
        # Already in agreement: nothing written.
        ([_body("7", {"a": FAILED}, "0/1 pods passed; failing a: smoke 0")], []),
        # Another report lands between the read and the patch: refused, read again, patched under the new version.
        (
            [
                _body("7", {"a": FAILED}, "stale"),
                _body("8", {"a": FAILED, "b": FAILED}, "stale"),
                _body("8", {"a": FAILED, "b": FAILED}, "stale"),
            ],
            ["8"],
        ),
    ],
)
def test_the_summary_is_written_under_the_version_it_was_computed_from(
    monkeypatch: pytest.MonkeyPatch, bodies: list[dict[str, Any]], patched: list[str]
) -> None:
    api = FakeStatusApi(bodies)
    monkeypatch.setattr(objects, "get_glmdeployment", api.get)
    monkeypatch.setattr(kubernetes.client, "CustomObjectsApi", lambda *_: api)
    monkeypatch.setattr(objects, "api_client", lambda: None)
    objects.settle_canary_summary("ns", "glm", summarize)
    assert [p["metadata"]["resourceVersion"] for p in api.patches] == patched
    for patch, body in zip(api.patches, bodies[-len(api.patches) :] if api.patches else [], strict=True):
        assert patch["status"]["canary"]["summary"] == summarize(body["status"]["canary"]["pods"])


@pytest.mark.parametrize(
    ("stored", "patched", "reads"),
    [
        # The gate's own patch answered with reports and summary in agreement: nothing more to send or read.
        (_body("7", {"a": FAILED}, "0/1 pods passed; failing a: smoke 0"), [], 0),
        # Its answer shows another pod's report it did not know of: corrected under that answer's version, unread.
        (_body("7", {"a": FAILED, "b": FAILED}, "0/1 pods passed; failing a: smoke 0"), ["7"], 0),
    ],
)
def test_the_answer_of_the_gates_own_patch_is_settled_without_reading_it_again(
    monkeypatch: pytest.MonkeyPatch, stored: dict[str, Any], patched: list[str], reads: int
) -> None:
    api = FakeStatusApi([stored])
    monkeypatch.setattr(objects, "get_glmdeployment", api.get)
    monkeypatch.setattr(kubernetes.client, "CustomObjectsApi", lambda *_: api)
    monkeypatch.setattr(objects, "api_client", lambda: None)
    objects.settle_canary_summary("ns", "glm", summarize, stored)
    assert [p["metadata"]["resourceVersion"] for p in api.patches] == patched
    assert api.reads == reads
