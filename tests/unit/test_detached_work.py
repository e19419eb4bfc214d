"""Work that outlives a kopf handler keeps none of the handler's objects.

An owned object's watch event asks for its GLMDeployment's refresh and returns without waiting for it, and neither
the refresh nor a pod's canary task carries the handler's cause (the whole object it was called for). Either kept
every event's object in memory: at 1,000 deployments, thousands of them (bench/RESULTS.md, reconcile scale).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import types
from typing import Any

import kopf
import pytest
from kopf._core.actions import execution
from kopf._core.engines import posting

from glm_operator.api.v1alpha1 import GLMDeploymentStatus
from glm_operator.canary.supervisor import PodTasks, WatchedPod
from glm_operator.control import refreshes
from glm_operator.control.detached import HANDLER_CAUSE, detached_context
from glm_operator.control.runtime import Runtime
from glm_operator.handlers import glmdeployment
from glm_operator.planner.deployment import Outcome

META = {"name": "glm", "namespace": "ns", "labels": {"glmops.dev/deployment": "glm"}}
OWNED = kopf.Body({"apiVersion": "v1", "kind": "Service", "metadata": {**META, "resourceVersion": "5"}})  # type: ignore[typeddict-item]
SERVICES = kopf.Resource("", "v1", "services", kind="Service")


def _refreshed(namespace: str, name: str) -> refreshes.Refreshed:
    return refreshes.Refreshed(
        {"metadata": {"name": name, "namespace": namespace}}, Outcome(status=GLMDeploymentStatus()), wrote_status=False
    )


@pytest.fixture
def memo() -> types.SimpleNamespace:
    return types.SimpleNamespace(runtime=Runtime.from_env({}))


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []

    def info(body: kopf.Body, *, reason: str, message: str) -> None:
        events.append((body["metadata"]["name"], reason, message))

    monkeypatch.setattr(kopf, "info", info)
    return events


CAUSE = object()  # stands for kopf's cause of the running handler: the event's whole object


def test_kopf_keeps_the_running_handlers_cause_in_the_variable_left_out() -> None:
    assert execution.cause_var.name == HANDLER_CAUSE


def test_a_detached_context_drops_the_handlers_cause_and_keeps_what_kopf_posts_events_through() -> None:
    def inside_a_handler() -> contextvars.Context:
        execution.cause_var.set(CAUSE)  # type: ignore[arg-type]
        posting.settings_var.set(kopf.OperatorSettings())
        return detached_context()

    detached = contextvars.copy_context().run(inside_a_handler)
    assert detached.get(execution.cause_var) is None
    assert isinstance(detached.get(posting.settings_var), kopf.OperatorSettings)


async def test_the_event_handler_returns_before_the_refresh_ends_and_restored_is_told_after_it(
    monkeypatch: pytest.MonkeyPatch, memo: types.SimpleNamespace, posted: list[tuple[str, str, str]]
) -> None:
    release = threading.Event()
    calls: list[tuple[str, str, object]] = []

    def refresh(namespace: str, name: str, *_: Any) -> refreshes.Refreshed:
        calls.append((namespace, name, execution.cause_var.get(None)))
        release.wait(5)
        return _refreshed(namespace, name)

    monkeypatch.setattr(refreshes, "refresh", refresh)
    logger = logging.getLogger("test")
    execution.cause_var.set(CAUSE)  # type: ignore[arg-type]
    memo.runtime.observed.record(OWNED)
    await asyncio.wait_for(glmdeployment._owned_event("DELETED", OWNED, SERVICES, logger, memo), timeout=1)
    assert memo.runtime.observed.get("ns", "Service", "glm") is None, "the deleted object's copy is gone at once"
    assert posted == [], "the handler returned while the refresh still runs"
    release.set()
    for _ in range(100):
        if posted:
            break
        await asyncio.sleep(0.02)
    assert calls == [("ns", "glm", None)], "the refresh runs without the handler's cause"
    assert posted == [("glm", "Restored", "re-created glm after it was deleted")]


async def test_a_failed_refresh_is_logged_with_its_retry_and_tells_nothing_restored(
    monkeypatch: pytest.MonkeyPatch,
    memo: types.SimpleNamespace,
    posted: list[tuple[str, str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refresh(*_: Any) -> dict[str, Any]:
        raise kopf.TemporaryError("the API server did not answer: MaxRetryError", delay=5)

    monkeypatch.setattr(refreshes, "refresh", refresh)
    with caplog.at_level(logging.ERROR, logger="test"):
        await glmdeployment._owned_event("DELETED", OWNED, SERVICES, logging.getLogger("test"), memo)
        for _ in range(100):
            if caplog.records:
                break
            await asyncio.sleep(0.02)
    assert posted == []
    assert "refreshing GLMDeployment ns/glm failed (TemporaryError: the API server did not answer" in caplog.text
    assert "retrying in 5s" in caplog.text
    memo.runtime.retries.pause()


async def test_a_pods_canary_task_runs_without_the_cause_of_the_event_that_started_it() -> None:
    seen: list[object] = []

    async def gate(pod: WatchedPod) -> None:
        seen.append(execution.cause_var.get(None))

    tasks = PodTasks(gate, context=detached_context)
    execution.cause_var.set(CAUSE)  # type: ignore[arg-type]
    tasks.observe("ADDED", {"metadata": {"name": "p-0", "namespace": "ns", "uid": "u"}})
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == [None]
