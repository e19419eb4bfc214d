"""Smoke, null-content and copy ask concurrently, within the GSM8K concurrency setting, and stop once certain."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from glm_operator.api.v1alpha1 import CanarySpec
from glm_operator.canary import checks
from glm_operator.canary.checks import Tally
from glm_operator.canary.client import OpenAIClient
from glm_operator.canary.results import CheckResult
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.sim.behaviour import Model
from glm_operator.sim.server import Simulator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Counting:
    """The simulator behind a middleware that counts chat requests received and the most in flight at once."""

    def __init__(self, fault: str = "none", latency_s: float = 0.05) -> None:
        self.sim = Simulator(Model(fault), "zai-org/GLM-5.3", latency_s=latency_s)
        self.received = self.in_flight = self.most = 0

    def app(self) -> web.Application:
        @web.middleware
        async def count(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
            if request.path != "/v1/chat/completions":
                return await handler(request)  # type: ignore[no-any-return]
            self.received += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            try:
                return await handler(request)  # type: ignore[no-any-return]
            finally:
                self.in_flight -= 1

        app = self.sim.app()
        app.middlewares.insert(0, count)
        return app


async def _against(server: Counting, check: Callable[[OpenAIClient], Any]) -> CheckResult:
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = OpenAIClient(f"http://127.0.0.1:{port}")
    try:
        result: CheckResult = await check(client)
        return result
    finally:
        await client.close()
        await runner.cleanup()


SUITES: dict[str, Callable[[OpenAIClient, int], Any]] = {
    "smoke": lambda client, concurrency: checks.smoke(client, 6, concurrency),
    "null-content": lambda client, concurrency: checks.null_content(client, 20, 0.05, concurrency),
    "copy": lambda client, concurrency: checks.copy_fidelity(client, 3, concurrency),
}
ASKED = {"smoke": 6, "null-content": 20, "copy": 3}


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("concurrency", [1, 4, 64])
def test_a_short_suite_keeps_as_many_requests_in_flight_as_the_concurrency_allows(suite: str, concurrency: int) -> None:
    server = Counting()
    result = asyncio.run(_against(server, lambda client: SUITES[suite](client, concurrency)))
    assert result.passed, result
    # Null-content passes once a fault more could not fail it: one at a time, the 20th question is never sent.
    assert server.received == ASKED[suite] - (suite == "null-content" and concurrency == 1)
    assert server.most == min(concurrency, ASKED[suite]), f"{server.most} in flight at most"


@pytest.mark.parametrize(
    "suite, detail",
    [
        (
            "smoke",
            "0/1 correct; e.g. 'What is 2+2?' -> '4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 ' "
            "(did not end by itself (finish_reason 'length')); decided after 1 of 6 (4 sent, the rest cancelled)",
        ),
        (
            "null-content",
            "0/2 answers had empty content and non-empty reasoning; 2/2 degenerate, e.g. "
            "'Name a primary colour.': did not end by itself (finish_reason 'length'); decided after 2 of 20 "
            "(4 sent, the rest cancelled)",
        ),
        (
            "copy",
            "0/1 exact copies of 50 items; item 21: expected 'umber-81', got 'onyx-55' (1018 lines); did not "
            "end by itself (finish_reason 'length'); decided after 1 of 3 (3 sent, the rest cancelled)",
        ),
    ],
)
def test_a_short_suite_stops_once_its_verdict_is_certain_and_says_so(suite: str, detail: str) -> None:
    server = Counting("repeat")
    result = asyncio.run(_against(server, lambda client: SUITES[suite](client, 4)))
    assert not result.passed
    assert result.detail == detail
    assert server.received <= 4, "no wave after the verdict"


@pytest.mark.parametrize(
    "outcomes, total, allowed, verdict, asked",
    [
        ([None] * 6, 6, 0, True, 6),
        ([None, ("wrong", "x"), None], 6, 0, False, 2),
        ([None] * 19 + [("null", "q")], 20, 1, True, 19),  # passed at the 19th: one fault more is allowed
        ([("null", "a"), ("degenerate", "b"), None], 20, 1, None, 3),  # each kind within its allowance
        ([("null", "a"), ("null", "b")], 20, 1, False, 2),
    ],
)
def test_a_tally_decides_at_the_first_answer_that_makes_its_verdict_certain(
    outcomes: list[tuple[str, str] | None], total: int, allowed: int, verdict: bool | None, asked: int
) -> None:
    tally = Tally(total, allowed)
    used = tally.feed(outcomes)
    assert (tally.verdict, tally.asked, used) == (verdict, asked, asked)


def test_the_suite_runs_the_short_suites_at_the_gsm8k_concurrency_setting() -> None:
    server = Counting()
    config = CanarySpec()
    config.gsm8k.enabled = False
    config.gsm8k.concurrency = 2
    result = asyncio.run(_against(server, lambda client: run_suite(client, SuiteInputs(config=config))))
    assert result.passed, result
    assert server.most == 2
