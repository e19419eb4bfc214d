"""A refresh nobody waits for that fails is tried again later, with backoff, until it succeeds.

An owned object's event (or the re-list) asks for its deployment's refresh without waiting. When that refresh fails,
no further event may come: a Deployment deleted by hand whose re-creation was refused would stay missing. These tests
run the real handler path (`request_refresh`, the coalescer, the retry timers) with the refresh itself replaced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest

from glm_operator.api.v1alpha1 import GLMDeploymentStatus
from glm_operator.control import refreshes
from glm_operator.control.retry import Retries
from glm_operator.control.runtime import Runtime
from glm_operator.planner.deployment import Outcome

LOG = logging.getLogger("test")
KEY = ("ns", "glm")
BODY = {
    "apiVersion": "glmops.dev/v1alpha1",
    "kind": "GLMDeployment",
    "metadata": {"name": "glm", "namespace": "ns", "resourceVersion": "1"},
}


@pytest.mark.parametrize(
    ("attempt", "at_least", "seconds"),
    [
        (1, None, 5.0),
        (2, None, 10.0),
        (3, None, 20.0),
        (7, None, 300.0),
        (30, None, 300.0),
        (5000, None, 300.0),
        (1, 15.0, 15.0),
        (3, 15.0, 20.0),
        (1, 900.0, 300.0),
    ],
)
def test_retries_back_off_doubling_to_a_cap_and_honour_a_longer_delay_the_error_names(
    attempt: int, at_least: float | None, seconds: float
) -> None:
    assert Retries(base=5, cap=300).delay(attempt, at_least) == seconds


class Flaky:
    """A refresh that fails `failures` times, then succeeds; counts its runs."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.runs = 0

    def __call__(self, namespace: str, name: str, *_: Any) -> refreshes.Refreshed:
        self.runs += 1
        if self.runs <= self.failures:
            raise self.error
        return refreshes.Refreshed(BODY, Outcome(status=GLMDeploymentStatus()), wrote_status=False)


@pytest.fixture
def warned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(kopf, "warn", lambda body, reason, message: posted.append((reason, message)))
    monkeypatch.setattr(kopf, "info", lambda body, reason, message: posted.append((reason, message)))
    return posted


def refreshing(monkeypatch: pytest.MonkeyPatch, flaky: Flaky, base: float = 0.01) -> Runtime:
    """A runtime that knows the deployment, whose refreshes run `flaky`, retried `base` seconds after a failure."""
    monkeypatch.setattr(refreshes, "refresh", flaky)
    context = Runtime.from_env({})
    context.retries.base = base
    context.observed.record(BODY, "GLMDeployment")
    return context


async def until(check: Any, seconds: float = 3.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in time")


async def test_a_failed_refresh_is_retried_until_it_succeeds_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]]
) -> None:
    flaky = Flaky(3, RuntimeError("quota exceeded"))
    context = refreshing(monkeypatch, flaky)
    refreshes.request_refresh(context, KEY, LOG, deleted=("glm-svc",))
    await until(lambda: flaky.runs == 4 and context.retries.attempts(KEY) == 0)
    assert context.retries.pending() == 0
    reasons = [reason for reason, _ in warned]
    assert reasons == ["RefreshFailed", "Restored"], "one Warning for the streak; the re-creation told once done"
    assert "quota exceeded" in warned[0][1]


async def test_waiters_of_one_failed_run_schedule_one_retry(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]]
) -> None:
    flaky = Flaky(1, RuntimeError("boom"))
    context = refreshing(monkeypatch, flaky, base=0.2)
    for _ in range(5):  # a burst of events: one run, five waiters
        refreshes.request_refresh(context, KEY, LOG)
    await until(lambda: context.retries.pending() == 1)
    assert context.retries.attempts(KEY) == 1
    await until(lambda: flaky.runs == 2 and context.retries.attempts(KEY) == 0)
    await asyncio.sleep(0.3)
    assert flaky.runs == 2, "one retry, not one per waiter"


async def test_an_api_outage_waits_the_delay_the_error_names(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]]
) -> None:
    flaky = Flaky(1, kopf.TemporaryError("the API server did not answer", delay=0.3))
    context = refreshing(monkeypatch, flaky)
    loop = asyncio.get_running_loop()
    started = loop.time()
    refreshes.request_refresh(context, KEY, LOG)
    await until(lambda: flaky.runs == 2)
    assert loop.time() - started >= 0.3


async def test_a_paused_replica_schedules_no_retry(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]]
) -> None:
    flaky = Flaky(1, RuntimeError("boom"))
    context = refreshing(monkeypatch, flaky)
    context.retries.pause()
    refreshes.request_refresh(context, KEY, LOG)
    await until(lambda: flaky.runs == 1)
    await asyncio.sleep(0.1)
    assert flaky.runs == 1 and context.retries.pending() == 0


async def test_a_success_from_another_request_drops_the_pending_retry(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]]
) -> None:
    flaky = Flaky(1, RuntimeError("boom"))
    context = refreshing(monkeypatch, flaky, base=0.5)
    refreshes.request_refresh(context, KEY, LOG, deleted=("glm",))
    await until(lambda: context.retries.pending() == 1)
    refreshes.request_refresh(context, KEY, LOG)  # the next owned-object event, before the retry is due
    await until(lambda: flaky.runs == 2 and context.retries.pending() == 0)
    assert context.retries.attempts(KEY) == 0
    await asyncio.sleep(0.7)
    assert flaky.runs == 2, "the dropped retry did not run as well"
    assert [r for r, _ in warned] == ["RefreshFailed", "Restored"], "the failed request's re-creation still told"


async def test_every_deletion_a_failed_run_served_is_told_once_a_retry_restores_it(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]]
) -> None:
    flaky = Flaky(2, RuntimeError("boom"))
    context = refreshing(monkeypatch, flaky, base=0.05)
    refreshes.request_refresh(context, KEY, LOG)  # a status change
    refreshes.request_refresh(context, KEY, LOG, deleted=("glm",))  # and the Service's deletion, one run
    await until(lambda: context.retries.pending() == 1)
    refreshes.request_refresh(context, KEY, LOG, deleted=("glm-canary",))  # fails again, a retry pending
    await until(lambda: flaky.runs == 3 and context.retries.attempts(KEY) == 0)
    restored = sorted(m for r, m in warned if r == "Restored")
    assert restored == ["re-created glm after it was deleted", "re-created glm-canary after it was deleted"]


async def test_a_long_api_error_is_one_bounded_line_with_the_servers_reason(
    monkeypatch: pytest.MonkeyPatch, warned: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    import kubernetes

    error = kubernetes.client.ApiException(status=409, reason="Conflict")
    error.body = '{"message": "the object has been modified' + "x" * 5000 + '"}'
    error.headers = {"Audit-Id": "y" * 2000}
    flaky = Flaky(1, error)
    context = refreshing(monkeypatch, flaky, base=60.0)
    with caplog.at_level(logging.ERROR, logger="test"):
        refreshes.request_refresh(context, KEY, LOG)
        await until(lambda: context.retries.pending() == 1)
    context.retries.pause()
    (line,) = [r.getMessage() for r in caplog.records]
    assert "409 Conflict: the object has been modified" in line and "Audit-Id" not in line and len(line) < 600
    assert len(warned[0][1]) < 600


def test_a_runtime_built_later_shares_the_live_state_of_the_first() -> None:
    first, later = Runtime.from_env({}), Runtime.from_env({})
    shared = later.sharing_state_of(first)
    settings = {"catalogs", "image_build", "downloads", "settings"}
    for name in Runtime.__dataclass_fields__:
        if name not in settings:
            assert getattr(shared, name) is getattr(first, name), name


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '{"kind":"Status","message":"services \\"x\\" is forbidden: exceeded quota"}',
            '403 Forbidden: services "x" is forbidden: exceeded quota',
        ),
        ("not json", "403 Forbidden"),
        ("[1, 2]", "403 Forbidden"),
        (None, "403 Forbidden"),
        ('{"message": "' + "m" * 5000 + '"}', "403 Forbidden: " + "m" * 300),
    ],
)
def test_an_api_refusal_names_the_servers_reason_bounded(body: str | None, expected: str) -> None:
    import kubernetes

    from glm_operator.k8s.client import refusal

    err = kubernetes.client.ApiException(status=403, reason="Forbidden")
    err.body = body
    assert refusal(err) == expected
