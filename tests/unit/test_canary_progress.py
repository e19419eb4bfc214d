"""A canary run's progress while it happens: what the checks report, what status holds and when it is written, the
running gauges, and the entry gone once the run ends."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from glm_operator.api.v1alpha1 import CanarySpec, GLMDeploymentStatus, PodCanaryProgress
from glm_operator.canary.client import OpenAIClient
from glm_operator.canary.progress import WRITE_INTERVAL_S, CheckProgress, RunningBoard, Throttle
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.control.canary_progress import GateRuns
from glm_operator.k8s import metrics
from glm_operator.sim.behaviour import Model
from glm_operator.sim.server import Simulator


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _gsm8k(asked: int, correct: int, done: bool = False) -> CheckProgress:
    return CheckProgress("gsm8k", asked, 200, correct, done)


# --- when status is written ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "after, due",
    [(0.0, False), (1.9, False), (WRITE_INTERVAL_S, True), (5.0, True)],
    ids=["at-once", "under-2s", "at-2s", "later"],
)
def test_nothing_is_written_in_a_runs_first_two_seconds(after: float, due: bool) -> None:
    clock = FakeClock()
    board = RunningBoard(clock=clock)
    board.start("glm-0")
    clock.now += after
    assert (board.update("glm-0", _gsm8k(3, 3)) is not None) is due


def test_a_deployment_is_written_at_most_once_per_two_seconds_whatever_its_pods_answer() -> None:
    clock = FakeClock()
    board = RunningBoard(clock=clock)
    board.start("glm-0")
    board.start("glm-1")
    written: list[tuple[float, list[str]]] = []
    for step in range(1, 81):  # each pod answers every 0.1 s for 8 s
        clock.now = 100.0 + step / 10
        for pod in ("glm-0", "glm-1"):
            fragment = board.update(pod, _gsm8k(step, step))
            if fragment is not None:
                written.append((round(clock.now - 100.0, 1), sorted(fragment)))
    assert [at for at, _ in written] == [2.0, 4.0, 6.0, 8.0]
    # the write that is due takes every pod whose figures changed, not only the one that answered last
    assert written[1][1] == ["glm-0", "glm-1"]


def test_a_pod_that_started_late_waits_its_own_two_seconds() -> None:
    clock = FakeClock()
    board = RunningBoard(clock=clock)
    board.start("glm-0")
    clock.now += 5
    board.start("glm-1")
    assert board.update("glm-1", _gsm8k(1, 1)) is None
    fragment = board.update("glm-0", _gsm8k(9, 9))
    assert fragment is not None and sorted(fragment) == ["glm-0"]


def test_the_throttle_says_yes_once_per_interval_after_the_first() -> None:
    clock = FakeClock()
    throttle = Throttle(2.0, clock)
    answers = []
    for tenth in range(0, 61):
        clock.now = 100.0 + tenth / 10
        answers.append(throttle.due())
    assert [i / 10 for i, yes in enumerate(answers) if yes] == [2.0, 4.0, 6.0]


# --- what status holds --------------------------------------------------------------------------------------------


def test_status_holds_each_started_check_with_asked_planned_and_correct() -> None:
    clock = FakeClock()
    board = RunningBoard(clock=clock)
    board.start("glm-0")
    board.update("glm-0", CheckProgress("smoke", 4, 4, 4, done=True))
    board.update("glm-0", CheckProgress("spec-decode", 0, 0))  # asks no scored questions: only named
    clock.now += 3
    fragment = board.update("glm-0", _gsm8k(40, 38))
    assert fragment is not None
    entry = PodCanaryProgress.model_validate(fragment["glm-0"])
    assert entry.current == "gsm8k"
    assert {name: (c.asked, c.planned, c.correct, c.done) for name, c in entry.checks.items()} == {
        "smoke": (4, 4, 4, True),
        "gsm8k": (40, 200, 38, False),
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry.updated_at)
    # it sits where the status model reads it, under its camelCase names
    status = GLMDeploymentStatus.model_validate({"canary": {"running": fragment}})
    assert status.canary is not None and status.canary.running["glm-0"].checks["gsm8k"].correct == 38
    assert set(fragment["glm-0"]) == {"startedAt", "updatedAt", "current", "checks"}


def test_the_entry_is_removed_at_the_end_only_when_one_was_written() -> None:
    clock = FakeClock()
    board = RunningBoard(clock=clock)
    board.start("quick")
    board.update("quick", _gsm8k(24, 24, done=True))
    assert board.finish("quick") is None  # decided within 2 s: nothing stored, nothing to remove
    board.start("slow")
    clock.now += 3
    assert board.update("slow", _gsm8k(30, 29)) is not None
    assert board.finish("slow") == {"slow": None}
    assert board.idle


# --- the gate's writes and gauges ----------------------------------------------------------------------------------


class Recorder:
    """Stands in for the status patch: records each fragment, optionally held until released."""

    def __init__(self) -> None:
        self.fragments: list[dict[str, Any]] = []
        self.hold: asyncio.Event | None = None

    async def __call__(self, namespace: str, deployment: str, fragment: dict[str, Any]) -> None:
        if self.hold is not None:
            await self.hold.wait()
        self.fragments.append(fragment)


def _gauge(name: str, pod: str, check: str) -> float | None:
    labels = {"namespace": "ns-prog", "glmdeployment": "glm", "pod": pod, "check": check}
    return REGISTRY.get_sample_value(name, labels)


async def test_gauges_follow_the_run_and_go_with_the_pod() -> None:
    clock = FakeClock()
    runs = GateRuns(Recorder(), clock=clock)
    report = runs.start("ns-prog", "glm", "glm-0")
    await report(_gsm8k(0, 0))
    assert _gauge("glmops_canary_questions_asked", "glm-0", "gsm8k") == 0
    assert _gauge("glmops_canary_running_correct_ratio", "glm-0", "gsm8k") is None  # no answer yet, no ratio
    await report(_gsm8k(40, 38))
    assert _gauge("glmops_canary_questions_asked", "glm-0", "gsm8k") == 40
    assert _gauge("glmops_canary_running_correct_ratio", "glm-0", "gsm8k") == pytest.approx(0.95)
    await runs.finish("ns-prog", "glm", "glm-0")
    assert _gauge("glmops_canary_questions_asked", "glm-0", "gsm8k") == 40  # the last run's figures stay
    # a new run starts from nothing: a check it does not run leaves no figure behind
    report = runs.start("ns-prog", "glm", "glm-0")
    assert _gauge("glmops_canary_questions_asked", "glm-0", "gsm8k") is None
    await report(CheckProgress("smoke", 2, 4, 1))
    metrics.forget_pod("ns-prog", "glm-0")
    assert _gauge("glmops_canary_questions_asked", "glm-0", "smoke") is None
    assert _gauge("glmops_canary_running_correct_ratio", "glm-0", "smoke") is None


async def test_gauges_go_with_their_deployment() -> None:
    report = GateRuns(Recorder()).start("ns-prog", "glm", "glm-9")
    await report(_gsm8k(3, 2))
    assert _gauge("glmops_canary_running_correct_ratio", "glm-9", "gsm8k") == pytest.approx(2 / 3)
    metrics.forget_deployment("ns-prog", "glm")
    assert _gauge("glmops_canary_running_correct_ratio", "glm-9", "gsm8k") is None
    assert _gauge("glmops_canary_questions_asked", "glm-9", "gsm8k") is None


async def test_a_runs_removal_waits_for_a_progress_write_in_flight_that_carries_it() -> None:
    clock = FakeClock()
    write = Recorder()
    runs = GateRuns(write, clock=clock)
    a = runs.start("ns-prog", "glm", "glm-a")
    b = runs.start("ns-prog", "glm", "glm-b")
    clock.now += 3
    write.hold = asyncio.Event()
    assert runs.boards[("ns-prog", "glm")].take() is None  # nothing changed yet: nothing due
    runs.boards[("ns-prog", "glm")].note("glm-a", _gsm8k(10, 10))
    b_write = asyncio.create_task(b(_gsm8k(5, 5)))  # B's write carries A's figures too, and hangs
    await asyncio.sleep(0)
    finished = asyncio.create_task(runs.finish("ns-prog", "glm", "glm-a"))
    await asyncio.sleep(0.05)
    assert not finished.done(), "A's removal must not be decided while a write carrying A is in flight"
    write.hold.set()
    assert await finished == {"glm-a": None}
    await b_write
    assert sorted(write.fragments[0]) == ["glm-a", "glm-b"]
    del a


async def test_a_run_that_ends_without_a_report_removes_its_entry_itself() -> None:
    clock = FakeClock()
    write = Recorder()
    runs = GateRuns(write, clock=clock)
    report = runs.start("ns-prog", "glm", "glm-0")
    clock.now += 3
    await report(_gsm8k(7, 7))
    await runs.abandon("ns-prog", "glm", "glm-0")
    assert write.fragments[-1] == {"glm-0": None}
    assert runs.boards == {}


# --- what the checks report, against the simulator -----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def simulator() -> AsyncIterator[OpenAIClient]:
    app = Simulator(Model("none", accuracy=0.93), "zai-org/GLM-5.3", latency_s=0.01).app()
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = OpenAIClient(f"http://127.0.0.1:{port}")
    yield client
    await client.close()
    await runner.cleanup()


async def test_each_check_reports_from_zero_to_its_decided_figures(simulator: OpenAIClient) -> None:
    heard: list[CheckProgress] = []
    config = CanarySpec()
    config.gsm8k.concurrency = 8
    result = await run_suite(simulator, SuiteInputs(config=config), heard.append)
    for check in result.checks:
        mine = [p for p in heard if p.check == check.name]
        assert mine[0].asked == 0 and not mine[0].done, check.name
        assert mine[-1].done and [p.done for p in mine].count(True) == 1, check.name
        asked = [p.asked for p in mine]
        assert asked == sorted(asked), f"{check.name}: figures went backwards: {asked}"
        # the last figures are the ones its result states (`38/40 correct`, `19/20 ...`, decided after ...)
        right, seen = re.search(r"(\d+)/(\d+)", check.detail).groups()  # type: ignore[union-attr]
        if check.name != "null-content":
            assert (mine[-1].correct, mine[-1].asked) == (int(right), int(seen)), check.detail
        assert check.value == pytest.approx(mine[-1].ratio if check.name != "null-content" else 0.0)
    assert [p.check for p in heard if p.asked == 0 and not p.done] == [c.name for c in result.checks]


async def test_the_gate_writes_a_slow_run_throttled_and_its_report_removes_it(simulator: OpenAIClient) -> None:
    """The whole gate path but the API server: figures from a real run, a clock that moves 0.5 s per answer."""
    ticks = FakeClock()
    write = Recorder()
    runs = GateRuns(write, clock=ticks)
    report = runs.start("ns-prog", "glm", "glm-real")

    async def slow(figures: CheckProgress) -> None:
        ticks.now += 0.5
        await report(figures)

    config = CanarySpec()
    config.gsm8k.concurrency = 1
    result = await run_suite(simulator, SuiteInputs(config=config, only=("gsm8k",)), slow)
    answers = int(re.search(r"/(\d+) correct", result.checks[0].detail)[1])  # type: ignore[index]
    # one report at the start, one per answer, one when decided: 0.5 s apart, one write per 2 s after the first 2 s
    assert len(write.fragments) == (answers + 2) // 4
    last = PodCanaryProgress.model_validate(write.fragments[-1]["glm-real"]).checks["gsm8k"]
    assert last.planned == 200 and 0 < last.asked <= answers
    assert await runs.finish("ns-prog", "glm", "glm-real") == {"glm-real": None}
    assert _gauge("glmops_canary_questions_asked", "glm-real", "gsm8k") == answers
    metrics.forget_pod("ns-prog", "glm-real")
