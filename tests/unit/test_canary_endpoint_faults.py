"""A server that is up but broken: every fault reaches the canary as one clear error, in bounded time."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import pytest
from aiohttp import web

from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.handlers.canary import err_detail
from glm_operator.sim.behaviour import Model
from glm_operator.sim.endpoint_faults import ENDPOINT_FAULTS, endpoint_fault_middleware
from glm_operator.sim.server import Simulator

EXPECTED = {
    "http-500": "HTTP 500",
    "truncated-json": "not JSON",
    "reset": "ServerDisconnectedError",
    "hang": "TimeoutError",
    "slow": "TimeoutError",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _ask(kind: str) -> tuple[str, float, int]:
    sim = Simulator(Model("none", None, 1.0), "zai-org/GLM-5.3", endpoint_fault=kind)
    runner = web.AppRunner(sim.app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = OpenAIClient(f"http://127.0.0.1:{port}", timeout=1.5)
    started = time.monotonic()
    try:
        with pytest.raises(EndpointError) as caught:
            await client.model_name()
        elapsed = time.monotonic() - started
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/health") as health:
            status = health.status
    finally:
        await client.close()
        await runner.cleanup()
    return err_detail(caught.value), elapsed, status


@pytest.mark.parametrize("kind", ENDPOINT_FAULTS)
def test_each_endpoint_fault_is_one_endpoint_error_within_the_request_timeout(kind: str) -> None:
    detail, elapsed, health = asyncio.run(_ask(kind))
    assert EXPECTED[kind] in detail, detail
    assert "\n" not in detail and len(detail) <= 300
    assert elapsed < 5, f"{kind}: the canary waited {elapsed:.1f}s past its 1.5s timeout"
    assert health == 200, "the fault leaves /health green, as the upstream failures do"


def test_an_unknown_endpoint_fault_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="expected one of http-500"):
        endpoint_fault_middleware("flaky")
