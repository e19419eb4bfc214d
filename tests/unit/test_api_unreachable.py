"""An API server that does not answer (restarting) is retried soon and quietly, never blamed on a pod."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
import urllib3

from glm_operator.api.constants import CANARY_CONDITION, Reason
from glm_operator.control import gate_loop, refreshes
from glm_operator.k8s.client import API_UNREACHABLE
from glm_operator.sim.fleet import sim_argv

REFUSED = urllib3.exceptions.MaxRetryError(None, "/api", reason=ConnectionRefusedError(111, "refused"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "error",
    [REFUSED, urllib3.exceptions.ProtocolError("Connection aborted."), ConnectionResetError(), TimeoutError()],
)
def test_errors_without_an_answer_count_as_the_api_server_unreachable(error: Exception) -> None:
    assert isinstance(error, API_UNREACHABLE)


async def test_a_gate_write_is_retried_until_the_api_server_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gate_loop, "API_RETRY_S", 0.01)

    def set_gate(*args: Any) -> bool:
        calls.append(args)
        if len(calls) < 3:
            raise REFUSED
        return True

    assert await asyncio.wait_for(gate_loop._api(set_gate, "ns", "pod", "True"), timeout=5) is True
    assert calls == [("ns", "pod", "True")] * 3


async def test_a_group_workers_mirror_of_its_leader_waits_out_an_api_server_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A headless worker of a multi-node group copies its leader's gate: a refused write is retried, never raised."""
    monkeypatch.setattr(gate_loop, "API_RETRY_S", 0.01)
    attempts: list[tuple[Any, ...]] = []
    written: list[tuple[Any, ...]] = []
    leader = {
        "status": {
            "conditions": [
                {
                    "type": CANARY_CONDITION,
                    "status": "True",
                    "reason": Reason.CANARY_PASSED,
                    "message": "3/3 checks passed",
                }
            ]
        }
    }
    looked_up: list[tuple[str, str]] = []

    class Worker:
        namespace, name = "ns", "group-0-1"
        body: dict[str, Any] = {"metadata": {"name": "group-0-1"}}

        @property
        def stopped(self) -> bool:
            return bool(written)

        async def wait(self, seconds: float, *, or_change: bool = False) -> None:
            await asyncio.sleep(0)

        def update(self, body: dict[str, Any]) -> None:
            self.body = body

    def set_gate(*args: Any) -> dict[str, Any]:
        attempts.append(args)
        if len(attempts) < 3:
            raise REFUSED
        written.append(args[:5])
        return {"metadata": {"name": "group-0-1", "resourceVersion": "9"}}

    def watched(namespace: str, name: str) -> dict[str, Any]:
        looked_up.append((namespace, name))
        return leader

    monkeypatch.setattr(gate_loop.pods, "set_gate", set_gate)
    await asyncio.wait_for(gate_loop._mirror_leader(Worker(), watched), timeout=5)  # type: ignore[arg-type]
    assert looked_up == [("ns", "group-0-0")], "the leader's gate is read from its watched view, once"
    assert len(attempts) == 3
    assert written == [("ns", "group-0-1", "True", Reason.CANARY_PASSED, "group leader group-0-0: 3/3 checks passed")]


async def test_an_answer_with_an_error_status_is_not_retried_as_unreachable() -> None:
    import kubernetes

    def forbidden() -> None:
        raise kubernetes.client.ApiException(status=403)

    with pytest.raises(kubernetes.client.ApiException):
        await gate_loop._api(forbidden)


def test_a_reconcile_the_api_server_did_not_answer_is_retried_in_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_: Any, **__: Any) -> Any:
        raise REFUSED

    monkeypatch.setattr(refreshes, "_reconcile_body", refused)
    with pytest.raises(kopf.TemporaryError) as caught:
        refreshes.reconcile_body({}, None, None)  # type: ignore[arg-type]
    assert caught.value.delay == refreshes.API_RETRY_S <= 5
    assert "the API server did not answer: MaxRetryError" in str(caught.value)


class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


@pytest.mark.parametrize(("latency", "expected"), [(None, None), ("400", ["--latency-ms", "400"])])
def test_the_fleet_passes_a_deployments_latency_annotation_to_its_simulators(
    latency: str | None, expected: list[str] | None
) -> None:
    container = _Obj(image="vllm/vllm-openai:v0.32.0", command=["vllm", "serve", "zai-org/GLM-5.3"], args=[])
    pod = _Obj(spec=_Obj(containers=[container]), status=_Obj(pod_ip="127.21.0.9"))
    argv = sim_argv(pod, "H200", None, None, None, latency)
    head = argv[: argv.index("--")]
    if expected is None:
        assert "--latency-ms" not in head
    else:
        assert head[-2:] == expected


async def test_a_worker_whose_leader_has_no_watched_view_reads_the_leaders_gate_from_the_api_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[tuple[Any, ...]] = []

    class Worker:
        namespace, name = "ns", "group-0-1"
        body: dict[str, Any] = {"metadata": {"name": "group-0-1"}}

        @property
        def stopped(self) -> bool:
            return bool(written)

        async def wait(self, seconds: float, *, or_change: bool = False) -> None:
            await asyncio.sleep(0)

        def update(self, body: dict[str, Any]) -> None:
            self.body = body

    monkeypatch.setattr(
        gate_loop.pods, "get_gate", lambda namespace, leader: ("False", Reason.CANARY_FAILED, "smoke 0")
    )
    monkeypatch.setattr(gate_loop.pods, "set_gate", lambda *args: written.append(args[:5]) or {"metadata": {}})
    await asyncio.wait_for(gate_loop._mirror_leader(Worker(), lambda ns, name: None), timeout=5)  # type: ignore[arg-type]
    assert written == [("ns", "group-0-1", "False", Reason.CANARY_FAILED, "group leader group-0-0: smoke 0")]


async def test_a_refused_read_of_the_leaders_gate_is_tried_again_not_the_end_of_the_workers_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kubernetes

    written: list[tuple[Any, ...]] = []
    answers = iter([kubernetes.client.ApiException(status=403), ("True", Reason.CANARY_PASSED, "ok")])

    class Worker:
        namespace, name = "ns", "group-0-1"
        body: dict[str, Any] = {"metadata": {"name": "group-0-1"}}

        @property
        def stopped(self) -> bool:
            return bool(written)

        async def wait(self, seconds: float, *, or_change: bool = False) -> None:
            await asyncio.sleep(0)

        def update(self, body: dict[str, Any]) -> None:
            self.body = body

    def get_gate(namespace: str, leader: str) -> tuple[str, str, str]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(gate_loop.pods, "get_gate", get_gate)
    monkeypatch.setattr(gate_loop.pods, "set_gate", lambda *args: written.append(args[:5]) or {"metadata": {}})
    await asyncio.wait_for(gate_loop._mirror_leader(Worker(), lambda ns, name: None), timeout=5)  # type: ignore[arg-type]
    assert written == [("ns", "group-0-1", "True", Reason.CANARY_PASSED, "group leader group-0-0: ok")]
