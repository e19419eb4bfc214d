"""Faults of the endpoint itself, not of the model: what a canary meets when the server is up but broken.

`/health` and `/metrics` stay fine (the kubelet's probe passes and the pod's container is Ready); every OpenAI
endpoint fails one way. Test tooling for the canary gate's handling of pods it cannot ask.

The faults in `ANSWER_FAULTS` leave the model listing alone and break only the answers (POST), as a gateway or
proxy in front of a working server does: `error-200` answers HTTP 200 with an error object (LiteLLM-style
gateways and vLLM's own error shape, `{"object": "error", ...}`), `http-500-share` answers every third request
with vLLM's HTTP 500, and `reset-mid-body` sends the headers and half the real answer, then drops the connection.
`no-metrics` is an OpenAI-compatible gateway that serves the API but no `/metrics` (HTTP 404).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from aiohttp import typedefs, web

ANSWER_FAULTS = ("error-200", "http-500-share", "reset-mid-body")
ENDPOINT_FAULTS = ("http-500", "truncated-json", "reset", "hang", "slow", *ANSWER_FAULTS, "no-metrics")
ENGINE_ERROR = {"object": "error", "message": "EngineCore encountered an issue", "type": "InternalServerError"}
HANG_S = 3600.0
SLOW_BYTE_S = 1.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def endpoint_fault_middleware(kind: str) -> typedefs.Middleware:
    if kind not in ENDPOINT_FAULTS:
        raise ValueError(f"endpoint fault {kind!r}: expected one of {', '.join(ENDPOINT_FAULTS)}")

    answered = 0

    @web.middleware
    async def fault(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal answered
        if kind == "no-metrics":
            return (
                web.Response(status=404, text="404: Not Found")
                if request.path == "/metrics"
                else await handler(request)
            )
        if not request.path.startswith("/v1/") or (kind in ANSWER_FAULTS and request.method != "POST"):
            return await handler(request)
        if kind in ANSWER_FAULTS:
            answered += 1
            return await _broken_answer(kind, answered, request, handler)
        await request.read()
        if kind == "http-500":
            return web.json_response({"error": {**ENGINE_ERROR, "code": 500}}, status=500)
        if kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        answer = json.dumps({"object": "list", "data": [{"id": "x" * 200}]}).encode()
        if kind == "truncated-json":
            return web.Response(body=answer[: len(answer) // 2], content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if kind == "hang":  # the headers and a first byte, then nothing
            await response.write(answer[:1])
            await asyncio.sleep(HANG_S)
        for byte in answer:  # slow: one byte a second
            await response.write(bytes([byte]))
            await asyncio.sleep(SLOW_BYTE_S)
        return response

    return fault


async def _broken_answer(kind: str, nth: int, request: web.Request, handler: Handler) -> web.StreamResponse:
    if kind == "error-200":
        return web.json_response({**ENGINE_ERROR, "param": None, "code": 500})
    if kind == "http-500-share" and nth % 3 == 0:
        return web.json_response({"error": {**ENGINE_ERROR, "code": 500}}, status=500)
    real = await handler(request)
    if kind != "reset-mid-body" or not isinstance(real, web.Response) or not isinstance(real.body, bytes):
        return real
    body = real.body
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    if request.transport is not None:
        request.transport.abort()
    raise asyncio.CancelledError
