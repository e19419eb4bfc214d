"""A refresh reads what it plans from the watched copies: nothing changed costs no API request, a change costs one.

The API is replaced by a recorder of the calls the handler makes through `k8s/objects.py`; every read the handler
could make (a GET of the GLMDeployment, a LIST of an owned kind) fails the test if made.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from glm_operator.canary.supervisor import PodTasks
from glm_operator.control import peering, refreshes
from glm_operator.control.runtime import Runtime, resync_seconds
from glm_operator.handlers import resync
from glm_operator.k8s import objects
from tests.support.builders import GLMDeploymentBuilder as B
from tests.unit.test_planner_deployment import stored

LOG = logging.getLogger("test")


class RecordingApi:
    """The writes `k8s/objects.py` would send, answered as the API server does (a new resourceVersion each)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.versions = itertools.count(100)
        self.status: dict[str, Any] = {}
        self.body: dict[str, Any] = {}

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))
        out = copy.deepcopy(obj)
        out["metadata"]["resourceVersion"] = str(next(self.versions))
        out["metadata"]["managedFields"] = [{"manager": "glmops"}]
        return out

    def delete(self, namespace: str, items: Any) -> None:
        for _api, kind, name in items:
            self.calls.append(("delete", kind, name))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch status", "GLMDeployment", name))
        self.status = {**self.status, **copy.deepcopy(status)}
        body = copy.deepcopy(self.body)
        body["status"] = copy.deepcopy(self.status)
        body["metadata"]["resourceVersion"] = str(next(self.versions))
        return body


def no_read(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a refresh read the API server: {args}")


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> RecordingApi:
    recorder = RecordingApi()
    monkeypatch.setattr(objects, "apply", recorder.apply)
    monkeypatch.setattr(objects, "delete", recorder.delete)
    monkeypatch.setattr(objects, "patch_glmdeployment_status", recorder.patch_status)
    monkeypatch.setattr(objects, "lws_available", lambda *_: False)
    for read in ("get_glmdeployment", "owned", "list_labelled"):
        monkeypatch.setattr(objects, read, no_read)
    return recorder


def deployment(api: RecordingApi, context: Runtime) -> dict[str, Any]:
    body = stored(B("glm").model("zai-org/GLM-5.3").accelerator("H200").tensor(8).vllm("0.33.0"))
    body["metadata"]["resourceVersion"] = "1"
    api.body = body
    context.observed.record(body, "GLMDeployment")
    return body


def test_a_refresh_with_nothing_changed_since_the_last_costs_no_request(api: RecordingApi) -> None:
    context = Runtime.from_env({})
    deployment(api, context)
    first = refreshes.refresh("ns", "glm", context, LOG)
    assert first is not None and first.wrote_status
    assert [c[0] for c in api.calls] == ["apply"] * 4 + ["patch status"]
    assert {c[1] for c in api.calls[:4]} == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}
    api.calls.clear()
    # The next events (each applied object's own, before any of them reached the watch) find everything in place.
    for _ in range(3):
        again = refreshes.refresh("ns", "glm", context, LOG)
        assert again is not None and not again.wrote_status
    assert api.calls == [], "the writes were read back from their answers, not from the API server"


def test_a_deleted_owned_object_is_restored_with_one_apply_and_nothing_else(api: RecordingApi) -> None:
    context = Runtime.from_env({})
    deployment(api, context)
    refreshes.refresh("ns", "glm", context, LOG)
    api.calls.clear()
    service = context.observed.get("ns", "Service", "glm")
    assert service is not None
    context.observed.forget_object(service)  # its DELETED event
    refreshes.refresh("ns", "glm", context, LOG)
    assert api.calls == [("apply", "Service", "glm")]


def test_a_late_watch_event_of_an_older_copy_does_not_make_the_next_refresh_apply_again(api: RecordingApi) -> None:
    context = Runtime.from_env({})
    deployment(api, context)
    refreshes.refresh("ns", "glm", context, LOG)
    api.calls.clear()
    workload = context.observed.get("ns", "Deployment", "glm")
    assert workload is not None
    older = copy.deepcopy(workload)
    older["metadata"]["resourceVersion"] = "2"
    older["spec"]["replicas"] = 0  # as it was before the operator's apply
    assert context.observed.record(older) is False
    refreshes.refresh("ns", "glm", context, LOG)
    assert api.calls == []


def test_an_edit_seen_by_the_watch_is_put_back_with_one_apply(api: RecordingApi) -> None:
    context = Runtime.from_env({})
    deployment(api, context)
    refreshes.refresh("ns", "glm", context, LOG)
    api.calls.clear()
    workload = context.observed.get("ns", "Deployment", "glm")
    assert workload is not None
    workload["metadata"]["resourceVersion"] = "500"
    workload["spec"]["replicas"] = 7  # someone scaled it by hand
    assert context.observed.record(workload)
    refreshes.refresh("ns", "glm", context, LOG)
    assert api.calls == [("apply", "Deployment", "glm")]


def test_a_deployment_no_longer_observed_is_not_reconciled(api: RecordingApi) -> None:
    context = Runtime.from_env({})
    assert refreshes.refresh("ns", "gone", context, LOG) is None
    assert api.calls == []


def test_the_relist_forgets_what_was_deleted_unseen_and_names_its_deployment(
    api: RecordingApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = Runtime.from_env({})
    deployment(api, context)
    refreshes.refresh("ns", "glm", context, LOG)
    lists: list[tuple[str, str]] = []

    def list_labelled(api_version: str, kind: str, namespace: str, labels: dict[str, str]) -> Any:
        lists.append((kind, namespace))
        present = [o for o in context.observed.owned_by(namespace, "glm") if o["kind"] == kind and kind != "Service"]
        if kind == "GLMDeployment":
            present = [context.observed.get(namespace, kind, "glm")]
        return present, "10000"

    monkeypatch.setattr(objects, "list_labelled", list_labelled)
    assert resync.resync_once(context) == {("ns", "glm")}
    assert context.observed.get("ns", "Service", "glm") is None
    assert sorted(lists) == sorted(
        [
            ("GLMDeployment", "ns"),
            ("Deployment", "ns"),
            ("Service", "ns"),
            ("PodDisruptionBudget", "ns"),
            ("ConfigMap", "ns"),
        ]
    ), "one list per kind with copies in the namespace, none for kinds with nothing to lose"
    api.calls.clear()
    refreshes.refresh("ns", "glm", context, LOG)
    assert api.calls == [("apply", "Service", "glm")]


@pytest.mark.parametrize(("raw", "seconds"), [("", 600.0), ("30", 30.0), ("0", 0.0)])
def test_the_relist_interval_is_a_setting(raw: str, seconds: float) -> None:
    assert resync_seconds({"GLMOPS_RESYNC_SECONDS": raw}) == seconds


@pytest.mark.parametrize("raw", ["soon", "-5"])
def test_a_malformed_relist_interval_names_the_setting_and_the_fix(raw: str) -> None:
    with pytest.raises(ValueError, match=r"GLMOPS_RESYNC_SECONDS: .* use e\.g\. 600, or 0 for off"):
        resync_seconds({"GLMOPS_RESYNC_SECONDS": raw})


async def test_a_replica_active_again_after_a_pause_relists_soon_not_at_the_next_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resync, "RELIST_AFTER_RESUME_S", 0.01)
    context = Runtime.from_env({})
    waiting = asyncio.create_task(resync._next_sweep(context, every=3600))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    context.relist_requested.set()
    await asyncio.wait_for(waiting, timeout=2)
    assert not context.relist_requested.is_set(), "one request, one re-list"
    await asyncio.wait_for(resync._next_sweep(context, every=0.01), timeout=2)  # and the interval still runs


async def test_the_peering_follower_holds_retries_while_paused_and_asks_for_a_relist_once_active_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verdicts = iter([True, True, False, False])
    monkeypatch.setattr(peering, "read_peers", lambda *_: [])
    monkeypatch.setattr(peering, "paused_by_peers", lambda *_: next(verdicts))
    monkeypatch.setattr(peering, "PEERING_CHECK_S", 0.0)
    gates = PodTasks(lambda pod: asyncio.sleep(0))
    settings = kopf.OperatorSettings()
    settings.peering.clusterwide = True
    memo = SimpleNamespace(runtime=Runtime.from_env({}))
    context: Runtime = memo.runtime
    retried: list[str] = []
    context.retries.failed(("ns", "glm"), lambda notes: retried.append("early"), at_least=None)
    seen: list[tuple[bool, bool, bool, bool]] = []

    def changed(active: bool) -> None:
        peering.peering_changed(memo, active)  # type: ignore[arg-type]
        seen.append((active, gates.paused, context.retries.paused, context.relist_requested.is_set()))

    follower = asyncio.create_task(peering.follow_peering(gates, settings, changed))
    for _ in range(200):
        await asyncio.sleep(0.005)
        if len(seen) == 2:
            break
    follower.cancel()
    assert seen == [(False, False, True, False), (True, False, False, True)], "told once each way, retries held first"
    assert context.retries.pending() == 0, "the retry scheduled before the pause was dropped"
    assert context.retries.failed(("ns", "glm"), lambda notes: None) is not None, "and retries run again once active"
    context.retries.pause()


@pytest.mark.parametrize("owner_exists", [True, False])
def test_after_an_owned_objects_deletion_the_owner_is_asked_for_once_before_anything_is_recreated(
    api: RecordingApi, monkeypatch: pytest.MonkeyPatch, owner_exists: bool
) -> None:
    """Deleting a GLMDeployment deletes what it owns; those deletions' events may come before its own."""
    context = Runtime.from_env({})
    deployment(api, context)
    refreshes.refresh("ns", "glm", context, LOG)
    api.calls.clear()
    gets: list[tuple[str, str]] = []

    def get_glmdeployment(namespace: str, name: str) -> dict[str, Any] | None:
        gets.append((namespace, name))
        return context.observed.get(namespace, "GLMDeployment", name) if owner_exists else None

    monkeypatch.setattr(objects, "get_glmdeployment", get_glmdeployment)
    service = context.observed.get("ns", "Service", "glm")
    assert service is not None
    context.observed.forget_object(service)
    context.confirm_owner.add(("ns", "glm"))  # as the owned object's DELETED event does
    done = refreshes.refresh("ns", "glm", context, LOG)
    assert gets == [("ns", "glm")]
    if owner_exists:
        assert done is not None and api.calls == [("apply", "Service", "glm")]
    else:
        assert done is None and api.calls == [], "nothing re-created for an owner that is gone"
        assert context.observed.get("ns", "GLMDeployment", "glm") is None
    refreshes.refresh("ns", "glm", context, LOG)
    assert gets == [("ns", "glm")], "asked once per deletion, not on every refresh"


async def test_a_paused_replica_does_not_relist_or_refresh_from_its_frozen_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    swept: list[object] = []
    monkeypatch.setattr(resync, "resync_once", lambda context: swept.append(context) or set())
    gates = PodTasks(lambda pod: asyncio.sleep(0))
    await gates.pause()
    memo = SimpleNamespace(runtime=Runtime.from_env({}), gates=gates)
    sweep = asyncio.create_task(resync._sweep(memo, 0.01, LOG))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert swept == []
    gates.resume()
    await asyncio.sleep(0.1)
    sweep.cancel()
    assert swept, "active again: it re-lists"


def test_warnings_a_run_already_posted_are_not_posted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from glm_operator.api.v1alpha1 import GLMDeploymentStatus
    from glm_operator.planner.deployment import Event, Outcome

    posted: list[str] = []
    monkeypatch.setattr(kopf, "warn", lambda body, reason, message: posted.append(reason))
    done = refreshes.Refreshed(
        {"metadata": {"name": "glm", "namespace": "ns"}},
        Outcome(status=GLMDeploymentStatus(), events=(Event("Warning", "ModelDownloadFailed", "x"),)),
        wrote_status=True,
    )
    for _ in range(2):  # two waiters of the same run
        future: asyncio.Future[Any] = asyncio.new_event_loop().create_future()
        future.set_result(done)
        refreshes._refreshed(Runtime.from_env({}), ("ns", "glm"), (), LOG, future)
    assert posted == ["ModelDownloadFailed"]


def test_an_owner_check_that_fails_is_asked_again_by_the_next_refresh(
    api: RecordingApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib3

    context = Runtime.from_env({})
    deployment(api, context)
    refused = urllib3.exceptions.MaxRetryError(None, "/apis", reason=ConnectionRefusedError(111, "refused"))  # type: ignore[arg-type]

    def get_glmdeployment(namespace: str, name: str) -> Any:
        raise refused

    monkeypatch.setattr(objects, "get_glmdeployment", get_glmdeployment)
    context.confirm_owner.add(("ns", "glm"))
    with pytest.raises(kopf.TemporaryError):
        refreshes.refresh("ns", "glm", context, LOG)
    assert ("ns", "glm") in context.confirm_owner, "still to be asked"


def test_a_glmimage_change_refreshes_its_users_through_their_work_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GLMImage's change asks each waiting deployment for a refresh the way an owned object's event does: through
    the per-deployment work queue, never by running one beside a run already in flight."""
    from glm_operator.handlers.glmimage import wake_users

    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(refreshes, "request_refresh", lambda context, key, logger, deleted=(): asked.append(key))
    monkeypatch.setattr(refreshes, "refresh", lambda *_: pytest.fail("refreshed outside the work queue"))
    memo = SimpleNamespace(runtime=Runtime.from_env({}))
    image = {"metadata": {"name": "img"}, "spec": {"image": "registry.test/vllm:x"}, "status": {}}
    users = {"registry.test/vllm:x": [("ns", "a"), ("ns", "b")]}
    asyncio.run(wake_users(image, logger=LOG, memo=memo, image_users=users, type="MODIFIED"))  # type: ignore[arg-type]
    assert asked == [("ns", "a"), ("ns", "b")]
