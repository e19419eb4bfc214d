"""Bursts of refresh requests: one run in flight and one queued per key, each request served by a later run."""

from __future__ import annotations

import asyncio

import pytest

from glm_operator.control.coalesce import Coalescer


def test_a_burst_of_requests_costs_two_runs_and_every_request_sees_a_run_that_started_after_it() -> None:
    async def scenario() -> tuple[int, list[int]]:
        coalescer = Coalescer()
        state = {"version": 0, "runs": 0}

        async def run() -> int:
            state["runs"] += 1
            seen = state["version"]
            await asyncio.sleep(0.05)
            return seen

        first = asyncio.create_task(coalescer.request("glmd", run))
        await asyncio.sleep(0.01)  # the first run is in flight
        state["version"] = 1  # a change lands; twelve events ask about it
        burst = [asyncio.create_task(coalescer.request("glmd", run)) for _ in range(12)]
        results = await asyncio.gather(first, *burst)
        return state["runs"], results

    runs, results = asyncio.run(scenario())
    assert runs == 2, "one run in flight, one queued for the whole burst"
    assert results[0] == 0 and set(results[1:]) == {1}, "requests made after the change see it"


def test_keys_run_independently() -> None:
    async def scenario() -> list[str]:
        coalescer = Coalescer()
        order: list[str] = []

        def run_for(key: str) -> object:
            async def run() -> str:
                order.append(f"start {key}")
                await asyncio.sleep(0.02)
                order.append(f"end {key}")
                return key

            return run

        await asyncio.gather(coalescer.request("a", run_for("a")), coalescer.request("b", run_for("b")))  # type: ignore[arg-type]
        return order

    assert asyncio.run(scenario())[:2] == ["start a", "start b"]


def test_a_failed_run_fails_its_waiters_and_the_next_request_runs_again() -> None:
    async def scenario() -> str:
        coalescer = Coalescer()
        calls = {"n": 0}

        async def run() -> str:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("API server away")
            return "ok"

        with pytest.raises(RuntimeError, match="API server away"):
            await coalescer.request("glmd", run)
        return str(await coalescer.request("glmd", run))

    assert asyncio.run(scenario()) == "ok"


def test_a_submitted_request_returns_at_once_and_its_future_gets_the_result_of_a_later_run() -> None:
    async def scenario() -> tuple[bool, list[object]]:
        coalescer = Coalescer()
        release = asyncio.Event()

        async def run() -> str:
            await release.wait()
            return "refreshed"

        futures = [coalescer.submit("glmd", run) for _ in range(3)]
        await asyncio.sleep(0.01)
        pending = not any(f.done() for f in futures)
        release.set()
        return pending, list(await asyncio.gather(*futures))

    pending, results = asyncio.run(scenario())
    assert pending, "nobody waits on submit: the run is still going"
    assert results == ["refreshed"] * 3
