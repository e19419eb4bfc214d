"""The simulator's HTTP server: the parts of vLLM's API the canaries and Prometheus use."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from glm_operator.sim.behaviour import Model

VERSION = "0.33.0"


class Metrics:
    """vLLM's metric names and types (labels model_name, engine), on a registry of our own."""

    def __init__(self, model_name: str, speculative: bool) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.labels = {"model_name": model_name, "engine": "0"}
        self.running = Gauge("vllm:num_requests_running", "Requests running.", labels, registry=self.registry)
        self.prompt = Counter("vllm:prompt_tokens", "Prompt tokens.", labels, registry=self.registry)
        self.generation = Counter("vllm:generation_tokens", "Generated tokens.", labels, registry=self.registry)
        self.success = Counter(
            "vllm:request_success", "Finished requests.", [*labels, "finished_reason"], registry=self.registry
        )
        # vLLM registers the spec-decode counters only with --speculative-config.
        spec = self.registry if speculative else CollectorRegistry()
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Drafts.", labels, registry=spec)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens.", labels, registry=spec)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Accepted tokens.", labels, registry=spec)
        self.accepted_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted per position.",
            [*labels, "position"],
            registry=spec,
        )


class Simulator:
    def __init__(self, model: Model, served_name: str, spec_tokens: int = 0, latency_s: float = 0.0) -> None:
        self.model = model
        self.served_name = served_name
        self.spec_tokens = spec_tokens
        self.latency_s = latency_s
        self.metrics = Metrics(served_name, speculative=spec_tokens > 0)

    def _account(self, prompt: str, output: str) -> dict[str, int]:
        m, labels = self.metrics, self.metrics.labels
        prompt_tokens, out_tokens = len(prompt.split()), max(1, len(output.split()))
        m.prompt.labels(**labels).inc(prompt_tokens)
        m.generation.labels(**labels).inc(out_tokens)
        m.success.labels(**labels, finished_reason="stop").inc()
        if self.spec_tokens:
            share = self.model.accepted_share(self.spec_tokens)
            steps = out_tokens
            accepted = 0
            for pos in range(self.spec_tokens):
                at_pos = round(steps * share * (0.8**pos))
                m.accepted_pos.labels(**labels, position=str(pos)).inc(at_pos)
                accepted += at_pos
            m.drafts.labels(**labels).inc(steps)
            m.draft_tokens.labels(**labels).inc(steps * self.spec_tokens)
            m.accepted.labels(**labels).inc(accepted)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": out_tokens,
            "total_tokens": prompt_tokens + out_tokens,
        }

    async def _delay(self) -> None:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.served_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "vllm",
                        "root": self.served_name,
                        "parent": None,
                        "max_model_len": 1048576,
                        "permission": [],
                    }
                ],
            }
        )

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def prometheus(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain", charset="utf-8")

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body.get("messages") or []
        prompt = str(messages[-1].get("content", "")) if messages else ""
        await self._delay()
        content, reasoning = self.model.chat(prompt)
        usage = self._account(prompt, f"{content or ''} {reasoning}")
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": reasoning,
        }
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.served_name,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop", "stop_reason": None}
                ],
                "usage": usage,
            }
        )

    async def completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = str(body.get("prompt", ""))
        await self._delay()
        text = self.model.completion(prompt)
        for stop in body.get("stop") or []:
            text = text.split(stop, 1)[0]
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
        if body.get("echo"):
            choice["text"] = prompt + text
            if body.get("logprobs") is not None:
                lps = self.model.prompt_logprobs(prompt)
                tokens = prompt.split()
                choice["logprobs"] = {
                    "tokens": tokens + ["."],
                    "token_logprobs": [*lps, -1.0],
                    "top_logprobs": [None] * (len(tokens) + 1),
                    "text_offset": [],
                }
        usage = self._account(prompt, text)
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.served_name,
                "choices": [choice],
                "usage": usage,
            }
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/ping", self.health),
                web.post("/ping", self.health),
                web.get("/v1/models", self.models),
                web.get("/version", self.version),
                web.get("/metrics", self.prometheus),
                web.post("/v1/chat/completions", self.chat),
                web.post("/v1/completions", self.completions),
            ]
        )
        return app


async def serve(sim: Simulator, host: str, port: int, load_seconds: float = 0.0) -> None:
    """Listen after `load_seconds` (vLLM refuses connections while it loads weights), until cancelled."""
    await asyncio.sleep(load_seconds)
    runner = web.AppRunner(sim.app(), access_log=None)
    await runner.setup()
    # A canary wave opens up to 256 connections at once; aiohttp's default backlog of 128 would drop some.
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
    await site.start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
