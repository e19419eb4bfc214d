"""A server container the kubelet restarts is a new server: its gate goes False at once and it is judged again.

The gate's view keeps the server container's restart count; the loop's sleep between checks wakes on it, and a
restarted operator does not trust a verdict older than the container it would vouch for."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from glm_operator.api.constants import CANARY_CONDITION, LABEL_DEPLOYMENT, Reason
from glm_operator.canary.results import CheckResult, SuiteResult
from glm_operator.canary.supervisor import WatchedPod, gate_view
from glm_operator.control import gate_loop
from glm_operator.render.canary_state import GateState, parse_rfc3339, server_restarts

FAIL = SuiteResult([CheckResult("gsm8k", False, 0.0, 0.82, "0/3 correct")])
PASS = SuiteResult([CheckResult("smoke", True, 1.0, 1.0, "4/4")])


def _pod(restarts: int | None, version: int = 1, gate: str = "True") -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Running",
        "podIP": "127.0.0.9",
        "conditions": [{"type": "ContainersReady", "status": "True"}, {"type": CANARY_CONDITION, "status": gate}],
    }
    if restarts is not None:
        status["containerStatuses"] = [
            {"name": "sidecar", "restartCount": 9},  # another container restarting is not the server restarting
            {"name": "vllm", "restartCount": restarts, "state": {"running": {"startedAt": "2026-12-04T10:00:00Z"}}},
        ]
    meta = {"namespace": "ns", "name": "glm-0", "uid": "u", "resourceVersion": str(version), "labels": {}}
    return {"metadata": meta, "status": status}


def test_the_restart_count_is_the_server_containers_only() -> None:
    assert server_restarts(gate_view(_pod(3))["status"]) == 3
    assert server_restarts(gate_view(_pod(None))["status"]) is None  # the kubelet has not reported it yet


def test_a_restart_holds_the_pod_out_and_forgets_the_counts_the_old_server_earned() -> None:
    state = GateState()
    state.observe(PASS, failures_to_unready=3)
    state.observe(FAIL, failures_to_unready=3)  # one failure counted towards failuresToUnready
    assert state.restarted(4) == (
        "False",
        Reason.SERVER_RESTARTED,
        "the server container restarted (restart 4); the canaries judge it again",
    )
    assert (state.gate, state.failures, state.unreachable) == ("False", 0, 0)
    # The new server's first failure is retried on the first step of the backoff, not the old server's step.
    assert state.observe(FAIL, failures_to_unready=3) is not None
    assert state.next_delay(FAIL, recheck_seconds=600) == 15.0


@pytest.mark.parametrize(
    ("checked", "started", "restarted"),
    [
        ("2026-12-04T10:00:00Z", "2026-12-04T10:05:00Z", True),  # the container started after the verdict
        ("2026-12-04T10:05:00Z", "2026-12-04T10:00:00Z", False),  # the verdict judged this container
        ("2026-12-04T10:00:00Z", None, False),  # not running now: the loop waits for it anyway
        ("garbage", "2026-12-04T10:05:00Z", False),  # no verdict time: resume runs the suite at once anyway
    ],
)
def test_a_restarted_operator_does_not_trust_a_verdict_older_than_the_server(
    checked: str, started: str | None, restarted: bool
) -> None:
    when = parse_rfc3339(started)
    assert GateState.restarted_since({"passed": True, "checkedAt": checked}, when) is restarted
    assert GateState.restarted_since(None, when) is False


def _watched(restarts: int | None) -> WatchedPod:
    return WatchedPod("ns", "glm-0", gate_view(_pod(restarts)))


async def test_the_sleep_between_checks_wakes_when_the_server_restarts() -> None:
    pod = _watched(0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    waiting = asyncio.ensure_future(gate_loop._wait_unless_restarted(pod, 60, server_restarts(pod.status)))
    await asyncio.sleep(0.05)
    pod.update(_pod(0, version=2))  # a new body, same server: keeps sleeping
    await asyncio.sleep(0.1)
    assert not waiting.done()
    pod.update(_pod(1, version=3))  # the kubelet started the container again
    await asyncio.wait_for(waiting, timeout=1)
    assert loop.time() - start < 1


async def test_the_sleep_between_checks_lasts_its_time_when_nothing_restarts() -> None:
    pod = _watched(0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    waiting = asyncio.ensure_future(gate_loop._wait_unless_restarted(pod, 0.3, 0))
    await asyncio.sleep(0.1)
    pod.update(_pod(0, version=2))
    await asyncio.wait_for(waiting, timeout=2)
    assert loop.time() - start >= 0.3


@pytest.mark.parametrize(
    ("gate", "view", "warned"),
    [
        ("True", "True", True),
        ("False", "False", False),
        (None, "False", False),
        (None, None, False),
        ("False", "True", True),  # the pod is in service on a pass the task's state has not recorded yet
    ],
)
async def test_a_restart_writes_the_gate_false_and_warns_only_when_it_takes_the_pod_out(
    monkeypatch: pytest.MonkeyPatch, gate: str | None, view: str | None, warned: bool
) -> None:
    written: list[tuple[Any, ...]] = []
    events: list[tuple[str, str]] = []

    def set_gate(namespace: str, name: str, status: str, reason: str, message: str, view: Any) -> dict[str, Any]:
        written.append((namespace, name, status, reason))
        return _pod(1, version=5, gate=status)

    monkeypatch.setattr(gate_loop.pods, "set_gate", set_gate)
    monkeypatch.setattr(gate_loop.kopf, "warn", lambda body, reason, message: events.append((reason, message)))
    observed = SimpleNamespace(get=lambda namespace, kind, name: {"metadata": {"name": name, "namespace": namespace}})
    context: Any = SimpleNamespace(observed=observed)
    state = GateState(gate=gate)
    pod = WatchedPod("ns", "glm-0", gate_view(_pod(1, gate=view)))  # type: ignore[arg-type]
    await gate_loop._server_restarted(pod, "glm", state, 1, context)
    assert written == [("ns", "glm-0", "False", Reason.SERVER_RESTARTED)]
    assert state.gate == "False"
    assert pod.body["metadata"]["resourceVersion"] == "5", "the write's answer becomes the pod's view"
    assert [r for r, _ in events] == ([Reason.SERVER_RESTARTED] if warned else [])
    if warned:
        assert events[0][1] == "pod glm-0: the server container restarted (restart 1); the canaries judge it again"


async def test_a_refused_gate_write_on_restart_does_not_end_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: Any) -> None:
        raise RuntimeError("403 Forbidden")

    monkeypatch.setattr(gate_loop.pods, "set_gate", forbidden)
    context: Any = SimpleNamespace(observed=SimpleNamespace(get=lambda *a: None))
    state = GateState(gate="True")
    await gate_loop._server_restarted(_watched(1), "glm", state, 1, context)
    assert state.gate == "False", "the next verdict is written from a gate that is out, whatever this write did"


async def test_a_deleted_pods_report_is_dropped_once_the_api_server_answers_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in CI: the API server restarted while a deleted pod's gate dropped its report; the write's
    RemoteDisconnected ended the gate task with a traceback. It is retried like every other gate write."""
    import urllib3

    calls: list[str] = []

    def write(namespace: str, parent: str, pod: str, *_: Any) -> None:
        calls.append(pod)
        if len(calls) == 1:
            raise urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionError("Remote end closed"))

    monkeypatch.setattr(gate_loop.objects, "write_canary_report", write)
    monkeypatch.setattr(gate_loop, "API_RETRY_S", 0.01)
    context: Any = SimpleNamespace(observed=SimpleNamespace(get=lambda *_: None))
    view = _pod(0)
    view["metadata"]["labels"] = {LABEL_DEPLOYMENT: "glm"}
    pod = WatchedPod("ns", "glm-0", gate_view(view))
    pod.stop(gone=True)  # deleted before its gate ran: the gate only drops its report
    await gate_loop.canary_gate(pod, context, lambda *_: None, SimpleNamespace())  # type: ignore[arg-type]
    assert calls == ["glm-0", "glm-0"]
