"""Coalesce bursts of "look at this deployment again" into as few runs as keep it correct.

Each owned object's watch event asks for its GLMDeployment to be refreshed (read, plan, apply what drifted). A new
deployment's four owned objects and their controllers' status writes send a dozen events within a second; running a
full refresh for each costs a GET and five LISTs every time. Here each key has at most one run in flight and one
queued: a request while a run is in flight marks the key dirty and is served by one more run that starts after it
(so it sees every change made before the request), however many requests came meanwhile. This is the work queue
controller-runtime gives Go controllers. Pure asyncio: the run itself is passed in.

`submit` is the same request for a caller that does not wait for the run: a watch handler that waited would keep the
event's whole object (and kopf's machinery for it) alive until the run ends, and under a burst of thousands of
events behind a busy thread pool that, not the work itself, was most of the operator's memory (bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from typing import Any


class Coalescer:
    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Task[None]] = {}
        self._waiters: dict[Hashable, list[asyncio.Future[Any]]] = {}
        self.runs = 0

    async def request(
        self, key: Hashable, run: Callable[[], Awaitable[Any]], context: contextvars.Context | None = None
    ) -> Any:
        """Return the result of a run of `run` for `key` that started after this call (see `submit` for `context`)."""
        return await asyncio.shield(self.submit(key, run, context=context))

    def submit(
        self, key: Hashable, run: Callable[[], Awaitable[Any]], context: contextvars.Context | None = None
    ) -> asyncio.Future[Any]:
        """Ask for a run of `run` for `key` that starts after this call, without waiting: the future gets its
        result or error (cancelled if the run is). A run that starts here runs in `context` (default: a copy of
        the current one). Call from the event loop."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(future)
        if key not in self._running:
            self._running[key] = asyncio.create_task(self._drain(key, run), context=context)
        return future

    async def _drain(self, key: Hashable, run: Callable[[], Awaitable[Any]]) -> None:
        try:
            while waiters := self._waiters.pop(key, []):
                self.runs += 1
                try:
                    result = await run()
                except Exception as err:  # noqa: BLE001 - every waiter of this run gets its error
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(err)
                    continue
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(result)
        finally:
            self._running.pop(key, None)
            for waiter in self._waiters.pop(key, []):  # cancelled mid-run: nobody waits forever
                if not waiter.done():
                    waiter.cancel()
