"""The gate's per-pod tasks: started and fed from the pod watch, stopped on deletion or pause; peering; resume."""

from __future__ import annotations

import asyncio
import copy
import datetime
import sys
from typing import Any

import pytest
import yaml

from glm_operator.api.constants import CANARY_CONDITION, Reason
from glm_operator.canary.peering import paused_by_peers
from glm_operator.canary.supervisor import PodTasks, WatchedPod
from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.deployment import Observed, plan
from glm_operator.planner.stored import parse_stored
from glm_operator.render.canary_state import (
    NEVER_S,
    GateState,
    gate_condition,
    pod_is_serving_ready,
    server_restarts,
    server_started_at,
)
from glm_operator.rules.engine import admit
from tests.support.cluster import REPO

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)


def _pod(name: str = "p-0", uid: str = "u1", phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid, "labels": {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


class Recorder:
    """A gate body that records the phases it saw and how it ended."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}
        self.ended: dict[str, bool] = {}

    async def __call__(self, pod: WatchedPod) -> None:
        while not pod.stopped:
            self.seen.setdefault(pod.name, []).append(pod.status.get("phase", ""))
            await pod.wait(10, or_change=True)
        self.ended[pod.name] = pod.gone


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_one_task_per_pod_sees_every_new_body_and_ends_when_the_pod_is_deleted() -> None:
    async def scenario() -> Recorder:
        rec = Recorder()
        tasks = PodTasks(rec)
        tasks.observe(None, _pod(phase="Pending"))
        await _settle()
        tasks.observe("MODIFIED", _pod(phase="Running"))
        await _settle()
        assert tasks.running() == [("ns", "p-0")]
        tasks.observe("DELETED", _pod())
        await _settle()
        assert tasks.running() == []
        return rec

    rec = asyncio.run(scenario())
    assert rec.seen == {"p-0": ["Pending", "Running"]}
    assert rec.ended == {"p-0": True}, "a deleted pod's task knows the pod is gone (its report is dropped)"


def test_a_terminating_pod_stops_its_gate_at_once() -> None:
    async def scenario() -> Recorder:
        rec = Recorder()
        tasks = PodTasks(rec)
        tasks.observe(None, _pod())
        await _settle()
        tasks.observe("MODIFIED", _pod(deleting=True))
        await _settle()
        assert tasks.running() == []
        tasks.observe("MODIFIED", _pod(deleting=True))  # later events of a terminating pod start nothing
        await _settle()
        assert tasks.running() == []
        return rec

    assert asyncio.run(scenario()).ended == {"p-0": True}


def test_a_replacement_pod_with_the_same_name_gets_a_fresh_gate() -> None:
    async def scenario() -> Recorder:
        rec = Recorder()
        tasks = PodTasks(rec)
        tasks.observe(None, _pod(uid="old"))
        await _settle()
        tasks.observe("ADDED", _pod(uid="new", phase="Pending"))
        await _settle()
        assert tasks.running() == [("ns", "p-0")]
        await tasks.close()
        return rec

    rec = asyncio.run(scenario())
    assert rec.seen["p-0"] == ["Running", "Pending"], "the new pod's task starts from its own body"


def test_pausing_stops_every_gate_without_calling_the_pods_gone_and_resuming_restarts_them_without_new_events() -> None:
    async def scenario() -> Recorder:
        rec = Recorder()
        tasks = PodTasks(rec)
        tasks.observe(None, _pod("a"))
        tasks.observe(None, _pod("b"))
        await _settle()
        await tasks.pause()
        assert tasks.running() == []
        tasks.observe("MODIFIED", _pod("b"))  # before kopf's watches paused; b is deleted later, unseen
        tasks.observe(None, _pod("a"))  # the watches' fresh list, before this replica knows it is active
        tasks.observe(None, _pod("c"))
        tasks.observe("MODIFIED", _pod("c", phase="Pending"))
        tasks.observe(None, _pod("d"))
        tasks.observe("DELETED", _pod("d"))
        await _settle()
        assert tasks.running() == [], "a paused replica runs no canaries"
        tasks.resume()
        await _settle()
        assert tasks.running() == [("ns", "a"), ("ns", "c")], (
            "what the fresh list showed starts on resume; a pod seen only before the pause may be gone"
        )
        assert rec.seen["c"] == ["Pending"], "from its newest view"
        await tasks.close()
        return rec

    rec = asyncio.run(scenario())
    assert rec.ended == {"a": False, "b": False, "c": False}


def test_a_gate_that_raises_ends_alone_and_its_pod_can_start_again() -> None:
    async def scenario() -> list[str]:
        calls: list[str] = []

        async def flaky(pod: WatchedPod) -> None:
            calls.append(pod.name)
            if pod.name == "bad":
                raise RuntimeError("boom")
            await pod.wait(10)

        tasks = PodTasks(flaky)
        tasks.observe(None, _pod("bad"))
        tasks.observe(None, _pod("good"))
        await _settle()
        assert tasks.running() == [("ns", "good")]
        tasks.observe("MODIFIED", _pod("bad"))
        await _settle()
        await tasks.close()
        return calls

    assert asyncio.run(scenario()) == ["bad", "good", "bad"]


def test_close_cancels_a_gate_stuck_in_io_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("glm_operator.canary.supervisor.STOP_TIMEOUT_S", 0.05)

    async def scenario() -> bool:
        async def stuck(pod: WatchedPod) -> None:
            await asyncio.sleep(3600)  # never looks at pod.stopped

        tasks = PodTasks(stuck)
        tasks.observe(None, _pod())
        await _settle()
        await asyncio.wait_for(tasks.close(), timeout=2)
        return tasks.running() == []

    assert asyncio.run(scenario())


def _peer(priority: int, seconds_ago: float = 1, lifetime: int = 60) -> dict[str, Any]:
    seen = (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()
    return {"priority": priority, "lastseen": seen, "lifetime": lifetime}


@pytest.mark.parametrize(
    "peers, paused",
    [
        ({}, False),
        ({"me": _peer(100)}, False),
        ({"me": _peer(100), "old": _peer(50)}, False),
        ({"me": _peer(100), "new": _peer(200)}, True),
        ({"me": _peer(100), "new-but-dead": _peer(200, seconds_ago=120)}, False),
        ({"me": _peer(100), "twin": _peer(100)}, True),
        ({"me": _peer(100), "twin-dead": _peer(100, seconds_ago=61)}, False),
        ({"me": _peer(100), "junk": "not a peer", "bad": {"priority": "x"}}, False),
        ({"me": _peer(100), "no-lastseen": {"priority": 300}}, True),
    ],
)
def test_the_gates_pause_exactly_when_kopf_peering_pauses_this_replica(peers: dict[str, Any], paused: bool) -> None:
    assert paused_by_peers(peers, 100, NOW) is paused


def _report(passed: bool, minutes_ago: float) -> dict[str, Any]:
    at = (NOW - datetime.timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"passed": passed, "checkedAt": at}


@pytest.mark.parametrize(
    "condition, report, recheck, delay, gate",
    [
        ("True", _report(True, 2), 600, 480.0, "True"),  # trusted until the re-check is due
        ("True", _report(True, 20), 600, 0.0, "True"),  # overdue: check now
        ("True", _report(True, 2), 0, NEVER_S, "True"),  # re-checks off: never again
        ("True", _report(False, 1), 600, 0.0, "True"),  # the last run failed (counting to unready): run now
        ("True", None, 600, 0.0, "True"),
        ("True", {"passed": True, "checkedAt": "garbage"}, 600, 0.0, "True"),
        ("False", _report(False, 1), 600, 0.0, "False"),  # held out: retried at once
        (None, _report(True, 1), 600, 0.0, None),  # never decided on this pod: run now
    ],
)
def test_a_restarted_operator_trusts_a_recent_passing_verdict(
    condition: str | None, report: Any, recheck: int, delay: float, gate: str | None
) -> None:
    state = GateState()
    assert state.resume(condition, report, recheck, now=NOW) == pytest.approx(delay)
    assert state.gate == gate


def _deep_size(obj: Any) -> int:
    """Bytes of a JSON-like value with everything it holds (each object counted once)."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def _pod_as_the_watch_delivers_it() -> dict[str, Any]:
    """A serving pod of the baseline sample: its rendered template, managedFields and a kubelet-like status."""
    doc = yaml.safe_load((REPO / "samples" / "baseline-h200-glm53-fp8.yaml").read_text())
    doc["metadata"] |= {"namespace": "ns", "uid": "glmd-uid", "generation": 1}
    catalogs = Catalogs.packaged()
    body = admit(doc, catalogs).patched
    workload = next(o for o in plan(parse_stored(body), Observed(), catalogs).apply if o["kind"] == "Deployment")
    template = copy.deepcopy(workload["spec"]["template"])
    fields = {"f:metadata": {"f:labels": {f"f:{k}": {} for k in template["metadata"]["labels"]}}, "f:spec": {}}
    managed = [{"manager": m, "operation": "Update", "fieldsV1": copy.deepcopy(fields)} for m in ("kcm", "kwok")]
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-11-30T12:00:00Z"}
        for t in ("Initialized", "ContainersReady", "PodScheduled", "Ready")
    ]
    conditions.append(
        {"type": CANARY_CONDITION, "status": "True", "reason": Reason.CANARY_PASSED, "message": "ok " * 40}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "name": "glm-abc-0",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": "12345",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "glm-abc", "uid": "rs"}],
            "managedFields": managed,
        },
        "spec": template["spec"],
        "status": {
            "phase": "Running",
            "podIP": "127.22.0.9",
            "hostIP": "10.0.0.1",
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": True,
                    "image": c["image"],
                    "imageID": "sha256:" + "0" * 64,
                    "containerID": "containerd://" + "1" * 64,
                    "restartCount": 2,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-11-30T12:00:00Z"}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "x " * 200}},
                }
                for c in template["spec"]["containers"]
            ],
        },
    }


def test_a_watched_pod_keeps_only_what_the_gate_reads_never_the_spec_or_managed_fields() -> None:
    full = _pod_as_the_watch_delivers_it()
    seen: list[WatchedPod] = []

    async def scenario() -> None:
        async def gate(pod: WatchedPod) -> None:
            seen.append(pod)
            await pod.wait(10)

        tasks = PodTasks(gate)
        tasks.observe("ADDED", copy.deepcopy(full))
        await _settle()
        tasks.observe("MODIFIED", copy.deepcopy(full))  # the update path keeps the same view
        await _settle()
        await tasks.close()

    asyncio.run(scenario())
    kept = seen[0].body
    assert set(kept) == {"metadata", "status"}, "no spec: a thousand pods' containers, env and volumes add up"
    assert set(kept["metadata"]) == {"namespace", "name", "uid", "resourceVersion", "labels"}, (
        "no managedFields, annotations, owners"
    )
    assert set(kept["status"]) == {"phase", "podIP", "conditions", "containerStatuses"}
    # The server container's restart count and start time only: a restart is a new server to judge.
    assert kept["status"]["containerStatuses"] == [
        {"name": "vllm", "restartCount": 2, "state": {"running": {"startedAt": "2026-11-30T12:00:00Z"}}}
    ]
    assert server_restarts(kept["status"]) == server_restarts(full["status"]) == 2
    assert server_started_at(kept["status"]) == server_started_at(full["status"]) == NOW
    others = [c for c in kept["status"]["conditions"] if c["type"] != CANARY_CONDITION]
    assert others and all(set(c) <= {"type", "status"} for c in others)
    # The gate's own condition whole: whether a verdict changes it is decided from the view, without a GET.
    own = next(c for c in kept["status"]["conditions"] if c["type"] == CANARY_CONDITION)
    assert own == next(c for c in full["status"]["conditions"] if c["type"] == CANARY_CONDITION)
    # What the gate decides on reads the same from the view as from the whole pod.
    assert seen[0].labels == full["metadata"]["labels"]
    assert pod_is_serving_ready(seen[0].status) and seen[0].status["podIP"] == "127.22.0.9"
    assert gate_condition(kept) == gate_condition(full) == "True"
    # About 4 KiB whatever the pod's spec, against 20 KiB for this one (45 KiB for the benchmark's, as watched).
    assert _deep_size(kept) < 6 * 1024 and _deep_size(kept) * 4 < _deep_size(full), (_deep_size(kept), _deep_size(full))


def test_a_late_deletion_of_the_pod_a_name_had_before_leaves_its_replacements_gate_running() -> None:
    async def scenario() -> list[tuple[str, str]]:
        rec = Recorder()
        tasks = PodTasks(rec)
        tasks.observe(None, _pod(uid="old"))
        await _settle()
        tasks.observe("ADDED", _pod(uid="new"))  # a StatefulSet's replacement, same name
        await _settle()
        tasks.observe("DELETED", _pod(uid="old"))  # the old pod's own DELETED, late
        await _settle()
        running = tasks.running()
        tasks.observe("DELETED", _pod(uid="new"))
        await _settle()
        assert tasks.running() == []
        return running

    assert asyncio.run(scenario()) == [("ns", "p-0")]
