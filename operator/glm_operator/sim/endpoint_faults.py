"""Faults of the endpoint itself, not of the model: what a canary meets when the server is up but broken.

`/health` and `/metrics` stay fine (the kubelet's probe passes and the pod's container is Ready); every OpenAI
endpoint fails one way. Test tooling for the canary gate's handling of pods it cannot ask.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from aiohttp import typedefs, web

ENDPOINT_FAULTS = ("http-500", "truncated-json", "reset", "hang", "slow")
HANG_S = 3600.0
SLOW_BYTE_S = 1.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def endpoint_fault_middleware(kind: str) -> typedefs.Middleware:
    if kind not in ENDPOINT_FAULTS:
        raise ValueError(f"endpoint fault {kind!r}: expected one of {', '.join(ENDPOINT_FAULTS)}")

    @web.middleware
    async def fault(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/v1/"):
            return await handler(request)
        await request.read()
        if kind == "http-500":
            error = {"object": "error", "message": "EngineCore encountered an issue", "type": "InternalServerError"}
            return web.json_response({"error": {**error, "code": 500}}, status=500)
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
