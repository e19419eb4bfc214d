"""The event loop glmctl runs the canaries on: the operator's own, uvloop, so that both spend the same client CPU.

`kopf run` (the operator image's entry point) runs on uvloop whenever it is installed (`kopf._kits.loops.proper_loop`),
and uvloop is one of glmops' dependencies. On it, aiohttp opens a connection for about two thirds of the CPU it
takes on asyncio's own loop, and a canary check opens one per request in flight (bench/RESULTS.md,
canary_time_to_ready.py). Where uvloop cannot be installed (Windows), asyncio's own loop runs instead, as kopf does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(name: str = "uvloop") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop if asked for and installed; None for asyncio's own."""
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            return None
        return uvloop.new_event_loop
    if name == "asyncio":
        return None
    raise ValueError(f"unknown event loop {name!r}: expected uvloop or asyncio")


def run(main: Coroutine[Any, Any, T], loop: str = "uvloop") -> T:
    """Run `main` to its end on a fresh loop, as `asyncio.run` does."""
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(main)
