"""The gate's side of a canary run in progress: its figures into status.canary.running and the running gauges.

`canary.progress.RunningBoard` decides what to write and when (pure); this holds one board per GLMDeployment, does
the writing, and orders it: a pod's entry is removed by its run's final report, which waits for a progress patch
still in flight (one that carried the pod's figures would otherwise land after the removal and bring it back).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from glm_operator.canary.progress import WRITE_INTERVAL_S, CheckProgress, Clock, RunningBoard
from glm_operator.k8s.metrics import record_progress, start_run

log = logging.getLogger(__name__)
DeploymentKey = tuple[str, str]  # namespace, GLMDeployment
# Merges a `status.canary.running` fragment into the GLMDeployment's status.
WriteRunning = Callable[[str, str, dict[str, Any]], Awaitable[None]]


@dataclass
class GateRuns:
    """The canary runs in progress on every gated pod, by GLMDeployment."""

    write: WriteRunning
    interval: float = WRITE_INTERVAL_S
    clock: Clock = time.monotonic
    boards: dict[DeploymentKey, RunningBoard] = field(default_factory=dict)
    writing: dict[DeploymentKey, asyncio.Task[None]] = field(default_factory=dict)

    def start(self, namespace: str, deployment: str, pod: str) -> Callable[[CheckProgress], Awaitable[None]]:
        """A run begins on the pod: the callback its suite reports each check's figures to."""
        key = (namespace, deployment)
        board = self.boards.setdefault(key, RunningBoard(self.interval, self.clock))
        board.start(pod)
        start_run(namespace, deployment, pod)

        async def report(figures: CheckProgress) -> None:
            record_progress(namespace, deployment, pod, figures)
            in_flight = self.writing.get(key)
            if in_flight is not None and not in_flight.done():
                board.note(pod, figures)  # the API server is slow: the figures wait for a later answer
                return
            fragment = board.update(pod, figures)
            if fragment is None:
                return
            task = asyncio.ensure_future(self._write(namespace, deployment, fragment))
            self.writing[key] = task
            await asyncio.wait([task])  # the run waits for its write: progress never races its own removal

        return report

    async def finish(self, namespace: str, deployment: str, pod: str) -> dict[str, Any] | None:
        """The run ended: the `running` fragment that removes its entry (None when none was written), once every
        progress patch in flight has landed."""
        key = (namespace, deployment)
        board = self.boards.get(key)
        if board is None:
            return None
        in_flight = self.writing.get(key)
        if in_flight is not None:
            await asyncio.wait([in_flight])
        removal = board.finish(pod)
        if board.idle:
            self.boards.pop(key, None)
            self.writing.pop(key, None)
        return removal

    async def abandon(self, namespace: str, deployment: str, pod: str) -> None:
        """The run ended without a report (it raised or was stopped): remove its entry on its own."""
        if await self.finish(namespace, deployment, pod) is not None:
            await self.remove(namespace, deployment, pod)

    async def remove(self, namespace: str, deployment: str, pod: str) -> None:
        """Remove the pod's entry as stored (one a run left behind, as when an operator stopped during it)."""
        await self._write(namespace, deployment, {pod: None})

    async def _write(self, namespace: str, deployment: str, fragment: dict[str, Any]) -> None:
        try:
            await self.write(namespace, deployment, fragment)
        except Exception as err:  # noqa: BLE001 - progress is shown best effort; the verdict is written apart
            log.debug("could not write canary progress of %s/%s: %s", namespace, deployment, err)
