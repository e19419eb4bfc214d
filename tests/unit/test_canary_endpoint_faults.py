"""A server that is up but broken: every fault reaches the canary as one clear error, in bounded time."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import pytest
from aiohttp import web

from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.control.gate_loop import err_detail
from glm_operator.sim.behaviour import Model
from glm_operator.sim.endpoint_faults import ANSWER_FAULTS, ENDPOINT_FAULTS, endpoint_fault_middleware
from glm_operator.sim.server import Simulator

EXPECTED = {
    "http-500": "HTTP 500",
    "truncated-json": "not JSON",
    "reset": "ServerDisconnectedError",
    "hang": "no complete answer within 1.5 s (TimeoutError)",
    "slow": "no complete answer within 1.5 s (TimeoutError)",
}
LISTING_FAULTS = [kind for kind in ENDPOINT_FAULTS if kind not in (*ANSWER_FAULTS, "no-metrics")]


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


def test_every_fault_of_the_model_listing_is_covered_here() -> None:
    assert set(LISTING_FAULTS) == set(EXPECTED)


@pytest.mark.parametrize("kind", LISTING_FAULTS)
def test_each_endpoint_fault_is_one_endpoint_error_within_the_request_timeout(kind: str) -> None:
    detail, elapsed, health = asyncio.run(_ask(kind))
    assert EXPECTED[kind] in detail, detail
    assert "http://127.0.0.1:" in detail and "/v1/models" in detail, "the message names the URL"
    assert "\n" not in detail and len(detail) <= 300
    assert elapsed < 5, f"{kind}: the canary waited {elapsed:.1f}s past its 1.5s timeout"
    assert health == 200, "the fault leaves /health green, as the upstream failures do"


def test_an_unknown_endpoint_fault_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="expected one of http-500"):
        endpoint_fault_middleware("flaky")


def test_a_keepalive_connection_the_server_drops_as_the_request_goes_out_is_retried_once() -> None:
    """vLLM closes idle keep-alive connections after 5 s; a request racing that close must not fail the canary."""
    answer = b'{"object": "list", "data": [{"id": "zai-org/GLM-5.3"}]}'

    async def scenario() -> tuple[list[str], int]:
        served: list[str] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first = True
            while request := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in request.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if not first:  # the second request on a kept-alive connection: closed unanswered
                    writer.close()
                    return
                first = False
                served.append(request.split(b" ")[1].decode())
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(answer)}\r\n\r\n"
                writer.write(head.encode() + answer)
                await writer.drain()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = OpenAIClient(f"http://127.0.0.1:{port}")
        try:
            # POST, as the canary's chat and completions are: aiohttp retries only idempotent methods itself.
            await client._json("POST", "/v1/completions", json={"prompt": "2+2="})
            data = await client._json("POST", "/v1/completions", json={"prompt": "2+2="})
        finally:
            await client.close()
            server.close()
        return served, len(data["data"])

    served, models = asyncio.run(scenario())
    assert served == ["/v1/completions", "/v1/completions"], "the dropped request went again, on a new connection"
    assert models == 1


def test_the_client_drops_idle_connections_before_every_supported_vllm_does() -> None:
    from glm_operator.canary.client import KEEPALIVE_S
    from glm_operator.catalog.images import load_images
    from glm_operator.catalog.versions import Version
    from glm_operator.catalog.vllm_facts import HTTP_KEEP_ALIVE_S

    for version in load_images().versions:
        assert HTTP_KEEP_ALIVE_S.at(Version.parse(version)) > KEEPALIVE_S, version
