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


class VersionedStatusApi:
    """One stored GLMDeployment's status with its resourceVersion; `others` are other gates' reports landing before
    each of the first len(others) patches, as two pods finishing together do."""

    def __init__(self, pods: dict[str, Any], others: list[tuple[str, dict[str, Any]]]) -> None:
        self.version = 7
        self.pods = dict(pods)
        self.summary = summarize(self.pods)
        self.others = list(others)
        self.patches: list[dict[str, Any]] = []
        self.seen: list[dict[str, Any]] = []  # every state a reader could have read

    def stored(self) -> dict[str, Any]:
        canary = {"pods": dict(self.pods), "summary": self.summary}
        return {"metadata": {"resourceVersion": str(self.version)}, "status": {"canary": canary}}

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.stored()

    def _write(self, canary: dict[str, Any]) -> None:
        for pod, report in canary.get("pods", {}).items():
            if report is None:
                self.pods.pop(pod, None)
            else:
                self.pods[pod] = report
        if "summary" in canary:
            self.summary = canary["summary"]
        self.version += 1
        self.seen.append(self.stored())

    def patch_namespaced_custom_object_status(self, *args: Any) -> dict[str, Any]:
        patch = args[-1]
        if self.others:  # another gate's patch lands first, with a summary from what it read
            pod, report = self.others.pop(0)
            self._write({"pods": {pod: report}, "summary": summarize({**self.pods, pod: report}) + " (theirs)"})
        self.patches.append(patch)
        version = (patch.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != str(self.version):
            raise kubernetes.client.ApiException(status=409, reason="Conflict")
        self._write(patch["status"]["canary"])
        return self.stored()


def _wire(monkeypatch: pytest.MonkeyPatch, api: VersionedStatusApi) -> None:
    monkeypatch.setattr(objects, "get_glmdeployment", api.get)
    monkeypatch.setattr(kubernetes.client, "CustomObjectsApi", lambda *_: api)
    monkeypatch.setattr(objects, "api_client", lambda: None)


def test_a_report_lands_with_a_summary_over_every_stored_report(monkeypatch: pytest.MonkeyPatch) -> None:
    api = VersionedStatusApi({"a": FAILED}, [])
    _wire(monkeypatch, api)
    stored = objects.write_canary_report("ns", "glm", "b", FAILED, summarize, api.stored(), {"b": None})
    assert stored is not None
    assert stored["status"]["canary"]["summary"] == "0/2 pods passed; failing a: smoke 0 (+1 more)"
    assert [p["metadata"]["resourceVersion"] for p in api.patches] == ["7"]
    assert api.patches[0]["status"]["canary"]["running"] == {"b": None}


def test_another_gates_report_in_between_is_counted_and_no_reader_sees_a_summary_of_ours_that_disagrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = VersionedStatusApi({}, [("a", FAILED)])
    _wire(monkeypatch, api)
    stale = api.stored()  # what the gate of b read before a's report landed
    stored = objects.write_canary_report("ns", "glm", "b", FAILED, summarize, stale)
    assert stored is not None
    assert stored["status"]["canary"]["summary"] == "0/2 pods passed; failing a: smoke 0 (+1 more)"
    assert [p["metadata"]["resourceVersion"] for p in api.patches] == ["7", "8"]  # refused once, redone
    ours = [s for s in api.seen if not s["status"]["canary"]["summary"].endswith("(theirs)")]
    assert ours and all(s["status"]["canary"]["summary"] == summarize(s["status"]["canary"]["pods"]) for s in ours), (
        ours
    )


def test_when_every_versioned_attempt_is_refused_the_report_still_lands_and_the_summary_settles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    others = [(f"o{i}", FAILED) for i in range(objects.SUMMARY_ATTEMPTS + 1)]
    api = VersionedStatusApi({}, others)
    _wire(monkeypatch, api)
    stored = objects.write_canary_report("ns", "glm", "b", FAILED, summarize, api.stored())
    assert stored is not None
    assert "b" in api.pods and api.summary == summarize(api.pods)
    assert api.pods.keys() == {"b", *(name for name, _ in others)}


def test_dropping_a_report_drops_it_from_the_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    api = VersionedStatusApi({"a": FAILED, "b": {"passed": True, "message": "ok"}}, [])
    _wire(monkeypatch, api)
    objects.write_canary_report("ns", "glm", "a", None, summarize, api.stored(), {"a": None})
    assert api.pods == {"b": {"passed": True, "message": "ok"}}
    assert api.summary == "1/1 pods passed"


def test_a_deployment_gone_is_none_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Gone(VersionedStatusApi):
        def patch_namespaced_custom_object_status(self, *args: Any) -> dict[str, Any]:
            raise kubernetes.client.ApiException(status=404, reason="Not Found")

    api = Gone({}, [])
    _wire(monkeypatch, api)
    assert objects.write_canary_report("ns", "glm", "a", None, summarize, api.stored()) is None
