"""Retry a failed refresh later, with backoff: what no watch event would ask for again.

A refresh an owned object's event asks for runs with nobody waiting on it (`Coalescer.submit`). When it fails (an
apply refused for a quota, the API server restarting) nothing else asks again until the next event or spec change:
a Deployment deleted by hand and refused on re-creation would stay missing. Here each key that failed gets one timer:
the first retry after `base` seconds (or the error's own delay, where it names a longer one), doubling up to `cap`; a
success resets the count and drops a pending timer (that run started after the failure, so it saw everything). This
is the rate-limited requeue controller-runtime gives Go controllers. Pure asyncio: what to run is passed in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Hashable

BASE_S = 5.0
CAP_S = 300.0


class Retries:
    def __init__(self, base: float = BASE_S, cap: float = CAP_S) -> None:
        self.base = base
        self.cap = cap
        self._attempts: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._notes: dict[Hashable, set[str]] = {}  # what the failed requests had to tell once one succeeds
        self.paused = False

    def delay(self, attempt: int, at_least: float | None = None) -> float:
        """Seconds before retry number `attempt` (1 for the first): base doubling to the cap, never below at_least."""
        backoff: float = min(self.base * 2.0 ** min(attempt - 1, 64), self.cap)  # no overflow after days of failing
        return max(backoff, min(at_least or 0.0, self.cap))

    def failed(
        self,
        key: Hashable,
        retry: Callable[[tuple[str, ...]], object],
        at_least: float | None = None,
        notes: Collection[str] = (),
    ) -> float | None:
        """After a failed run for `key`: schedule `retry` once, to be called with every note the failed requests
        carried (merged into a retry already pending); its delay, or None if one is already pending (the waiters of
        one failed run each report it) or retries are paused. Call from the event loop."""
        self._notes.setdefault(key, set()).update(notes)
        if key in self._timers or self.paused:
            return None
        attempt = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempt
        seconds = self.delay(attempt, at_least)
        self._timers[key] = asyncio.get_running_loop().call_later(seconds, self._fire, key, retry)
        return seconds

    def _fire(self, key: Hashable, retry: Callable[[tuple[str, ...]], object]) -> None:
        self._timers.pop(key, None)
        retry(tuple(sorted(self._notes.pop(key, ()))))

    def succeeded(self, key: Hashable) -> tuple[bool, tuple[str, ...]]:
        """After a run for `key` that succeeded: forget its failures; whether it had any, and the notes of the
        failed requests it served (that run started after them, so it did their work)."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        notes = tuple(sorted(self._notes.pop(key, ())))
        return self._attempts.pop(key, None) is not None, notes

    def attempts(self, key: Hashable) -> int:
        """Failures in a row for `key` (0 after a success)."""
        return self._attempts.get(key, 0)

    def pending(self) -> int:
        return len(self._timers)

    def pause(self) -> None:
        """Drop every pending retry and schedule none until `resume` (another replica is the active one, or this one
        is stopping: a retry would act on copies its watches no longer update). The counts stay."""
        self.paused = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def resume(self) -> None:
        self.paused = False
