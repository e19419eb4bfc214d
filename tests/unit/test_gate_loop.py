"""The registry the canary gate start-up registration builds: each pod's task and its progress writes use the
runtime stored when they run, not the one there was at start-up (kopf runs start-up handlers in no set order)."""

from __future__ import annotations

import asyncio
import functools
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from glm_operator.canary.supervisor import PodTasks, WatchedPod
from glm_operator.control import gate_loop
from glm_operator.control.canary_progress import GateRuns
from glm_operator.control.runtime import Runtime, runtime
from glm_operator.handlers import canary
from glm_operator.k8s import objects

POD = {"metadata": {"name": "glm-0", "namespace": "ns", "uid": "u1", "labels": {}}, "status": {}}


async def test_a_pods_gate_task_and_its_progress_use_the_runtime_stored_after_the_registry_was_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memo = SimpleNamespace(runtime=Runtime.from_env({}))
    gates = gate_loop.gate_tasks(functools.partial(runtime, memo))
    stored_later = Runtime.from_env({})
    memo.runtime = stored_later  # the settings handler ran after the gates' start-up handler
    started: list[tuple[str, Runtime, GateRuns]] = []

    async def gate(pod: WatchedPod, context: Runtime, watched: gate_loop.PodView, runs: GateRuns) -> None:
        started.append((pod.name, context, runs))

    status = {"metadata": {"name": "glm", "namespace": "ns", "resourceVersion": "7"}, "status": {}}
    monkeypatch.setattr(gate_loop, "canary_gate", gate)
    monkeypatch.setattr(objects, "patch_glmdeployment_status", lambda namespace, name, patch: status)
    gates.observe("ADDED", POD)
    await gates.close()
    assert [name for name, _, _ in started] == ["glm-0"]
    assert started[0][1] is stored_later, "a task runs with the runtime stored when it starts, not the one at start-up"
    await started[0][2].write("ns", "glm", {"glm-0": None})  # a progress write's answer goes to the same copies
    assert stored_later.observed.get("ns", "GLMDeployment", "glm") == status


@pytest.mark.parametrize("standalone", [True, False])
async def test_the_start_up_registration_follows_kopfs_peering_unless_standalone(
    monkeypatch: pytest.MonkeyPatch, standalone: bool
) -> None:
    followed: list[PodTasks] = []

    async def follow(gates: PodTasks, settings: kopf.OperatorSettings, changed: Any) -> None:
        followed.append(gates)

    monkeypatch.setattr(canary, "follow_peering", follow)
    settings = kopf.OperatorSettings()
    settings.peering.standalone = standalone
    memo = SimpleNamespace(runtime=Runtime.from_env({}))
    await canary.start_gates(settings=settings, memo=memo)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert isinstance(memo.gates, PodTasks)
    assert followed == ([] if standalone else [memo.gates])
    await canary.stop_gates(memo=memo)  # type: ignore[arg-type]
