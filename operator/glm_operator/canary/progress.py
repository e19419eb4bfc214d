"""How far a canary run has got, while it runs: per check, questions answered of those planned and how many right.

The checks call a `Progress` callback after each answer they feed to their decision (and once when they start and
once when they decide); `glmctl canary` draws it, and the operator's gate writes it into the GLMDeployment's status
(`status.canary.running.<pod>`) and its gauges. Status is written through `RunningBoard`: at most one patch per
`interval` per GLMDeployment, none for a run younger than `interval` (a quick run writes nothing until its report),
and the entry removed with the run's final report, so stored status stays small.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.conditions import now_rfc3339
from glm_operator.api.v1alpha1 import CheckProgressStatus, PodCanaryProgress

WRITE_INTERVAL_S = 2.0


@dataclass(frozen=True)
class CheckProgress:
    """One check's figures so far: `asked` answers of at most `planned`, `correct` of them right."""

    check: str
    asked: int
    planned: int
    correct: int = 0
    done: bool = False

    @property
    def ratio(self) -> float | None:
        """Running accuracy, or None before the first answer."""
        return self.correct / self.asked if self.asked else None


Progress = Callable[[CheckProgress], Awaitable[None] | None]


async def emit(progress: Progress | None, update: CheckProgress) -> None:
    """Hand `update` to the callback, awaiting it when it is a coroutine function."""
    if progress is None:
        return
    maybe = progress(update)
    if maybe is not None:
        await maybe


Clock = Callable[[], float]


@dataclass
class Throttle:
    """Says yes at most once per `interval`, and never before `interval` has passed since it was made."""

    interval: float = WRITE_INTERVAL_S
    clock: Clock = time.monotonic
    started: float = field(init=False)
    last: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def due(self) -> bool:
        now = self.clock()
        if now - self.started < self.interval or (self.last is not None and now - self.last < self.interval):
            return False
        self.last = now
        return True


@dataclass
class PodRun:
    """One pod's run as the gate follows it: its checks' figures and when it started."""

    started: float
    started_at: str
    current: str = ""
    checks: dict[str, CheckProgress] = field(default_factory=dict)

    def entry(self, now: str) -> dict[str, Any]:
        """The run as `status.canary.running.<pod>` holds it (typed by the api model)."""
        return PodCanaryProgress(
            started_at=self.started_at,
            updated_at=now,
            current=self.current,
            checks={
                name: CheckProgressStatus(asked=c.asked, planned=c.planned, correct=c.correct, done=c.done)
                for name, c in self.checks.items()
            },
        ).model_dump(by_alias=True)


@dataclass
class RunningBoard:
    """The runs in progress on one GLMDeployment's pods, and the status patches that show them.

    `update` returns the `status.canary.running` fragment to merge when a write is due (else None): every pod whose
    figures changed and whose run has lasted `interval`, at most once per `interval` for the whole deployment.
    `finish` returns the fragment that removes the pod's entry, or None when none was written.
    """

    interval: float = WRITE_INTERVAL_S
    clock: Clock = time.monotonic
    runs: dict[str, PodRun] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    last_write: float | None = None

    def start(self, pod: str) -> None:
        self.runs[pod] = PodRun(self.clock(), now_rfc3339())
        self.changed.discard(pod)

    def update(self, pod: str, figures: CheckProgress) -> dict[str, Any] | None:
        """Note the figures; the fragment to write now, if a write is due."""
        self.note(pod, figures)
        return self.take()

    def note(self, pod: str, figures: CheckProgress) -> None:
        run = self.runs.get(pod)
        if run is None:
            return
        run.current = figures.check
        if figures.planned:  # a check that asks no scored questions (spec-decode, logprob) is only named as current
            run.checks[figures.check] = figures
        self.changed.add(pod)

    def take(self) -> dict[str, Any] | None:
        """Every changed run old enough, unless the deployment's last write was under `interval` ago."""
        now = self.clock()
        if self.last_write is not None and now - self.last_write < self.interval:
            return None
        ready = sorted(p for p in self.changed if now - self.runs[p].started >= self.interval)
        if not ready:
            return None
        self.last_write = now
        self.changed -= set(ready)
        self.written |= set(ready)
        stamp = now_rfc3339()
        return {p: self.runs[p].entry(stamp) for p in ready}

    def finish(self, pod: str) -> dict[str, Any] | None:
        self.runs.pop(pod, None)
        self.changed.discard(pod)
        if pod not in self.written:
            return None
        self.written.discard(pod)
        return {pod: None}

    @property
    def idle(self) -> bool:
        return not self.runs and not self.written
