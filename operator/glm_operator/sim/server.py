"""The simulator's HTTP server: the parts of vLLM's API the canaries and Prometheus use."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from glm_operator.catalog.images import load_images
from glm_operator.sim.behaviour import Model
from glm_operator.sim.endpoint_faults import endpoint_fault_middleware

VERSION = load_images().default_version  # what /version reports: the catalog's default vLLM


class Metrics:
    """vLLM's metric names and types (labels model_name, engine), on a registry of our own."""

    def __init__(self, model_name: str, speculative: bool, null_counter: bool = False) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.labels = {"model_name": model_name, "engine": "0"}
        self.running = Gauge("vllm:num_requests_running", "Requests running.", labels, registry=self.registry)
        self.running.labels(**self.labels).set(0)  # vLLM exports it from the start, labelled
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
        # The glmops plugin's null-content-metrics patch (label model_name only), in patched images.
        plugin = self.registry if null_counter else CollectorRegistry()
        self.chats = Counter(
            "glmops_chat_completions", "Finished chat completion choices.", ["model_name"], registry=plugin
        )
        self.nulls = Counter(
            "glmops_chat_null_content",
            "Chat choices with empty content and reasoning.",
            ["model_name"],
            registry=plugin,
        )
        self.chats.labels(model_name)
        self.nulls.labels(model_name)


# vLLM lists one permission object per model (its fields and types; the values are vLLM's defaults).
_PERMISSION = {
    "id": "modelperm-glmops-sim",
    "object": "model_permission",
    "created": 0,
    "allow_create_engine": False,
    "allow_sampling": True,
    "allow_logprobs": True,
    "allow_search_indices": False,
    "allow_view": True,
    "allow_fine_tuning": False,
    "organization": "*",
    "group": None,
    "is_blocking": False,
}


# Fields vLLM 0.32.0 sends that glmops never reads, with their types (tests/realvllm holds the simulator to them).
_CHOICE_EXTRAS: dict[str, Any] = {"token_ids": None, "routed_experts": None}
_RESPONSE_EXTRAS: dict[str, Any] = {
    "service_tier": None,
    "system_fingerprint": f"vllm-{VERSION}-glmops-sim",
    "kv_transfer_params": None,
    "ec_transfer_params": None,
    "metrics": None,
}


def _echo_logprobs(prompt: str, logprobs: list[float | None]) -> dict[str, Any]:
    """echo with logprobs=0: the prompt's tokens, each with its logprob (the first has none), and one generated."""
    tokens, offsets, at = prompt.split(), [], 0
    for token in tokens:
        at = prompt.index(token, at)
        offsets.append(at)
        at += len(token)
    values = [*logprobs, -1.0]
    return {
        "logprobs": {
            "text_offset": [*offsets, len(prompt)],
            "token_logprobs": values,
            "tokens": [*tokens, "."],
            "top_logprobs": [None] + [{t: v} for t, v in zip([*tokens, "."][1:], values[1:], strict=True)],
        },
        "prompt_logprobs": [None]
        + [
            {str(i): {"logprob": v, "rank": 1, "decoded_token": t}}
            for i, (t, v) in enumerate(zip(tokens[1:], logprobs[1:], strict=True))
        ],
    }


def cut_at_max_tokens(text: str, max_tokens: object) -> tuple[str, int | None]:
    """The text cut at `max_tokens` (a word stands for a token), and the tokens left: 0 or less when it was cut.

    As vLLM does, reasoning and content share one budget: what the reasoning used is gone for the content."""
    if not isinstance(max_tokens, int):
        return text, None
    words = re.findall(r"\S+\s*", text)
    if len(words) < max_tokens:
        return text, max_tokens - len(words)
    return "".join(words[:max_tokens]).rstrip(), 0


class BadRequest(Exception):
    """A request vLLM refuses: the status and the fields of vLLM's error body."""

    def __init__(self, status: int, message: str, kind: str, param: str | None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param

    def response(self) -> web.Response:
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}
        return web.json_response({"error": error}, status=self.status)


class Simulator:
    def __init__(
        self,
        model: Model,
        served_name: str,
        spec_tokens: int = 0,
        latency_s: float = 0.0,
        null_counter: bool = False,
        endpoint_fault: str | None = None,
    ) -> None:
        self.model = model
        self.endpoint_fault = endpoint_fault
        self.served_name = served_name
        self.spec_tokens = spec_tokens
        self.latency_s = latency_s
        self.metrics = Metrics(served_name, speculative=spec_tokens > 0, null_counter=null_counter)

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
                        "permission": [_PERMISSION],
                    }
                ],
            }
        )

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def prometheus(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain", charset="utf-8")

    async def _body(self, request: web.Request, required: str) -> dict[str, Any]:
        """The request body, refused as vLLM refuses it (checked against vLLM 0.32.0 by tests/realvllm)."""
        try:
            body = await request.json()
        except ValueError:
            raise BadRequest(400, "1 validation error: JSON decode error", "Bad Request", "body.0") from None
        if not isinstance(body, dict) or required not in body:
            raise BadRequest(
                400, f"1 validation error: body.{required}: Field required", "Bad Request", f"body.{required}"
            )
        model = body.get("model")
        if model is not None and model != self.served_name:
            message = f"The model `{model}` does not exist. Valid aliases: {self.served_name}."
            raise BadRequest(404, message, "NotFoundError", "model")
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens < 1:
            message = f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, value={max_tokens})"
            raise BadRequest(400, message, "BadRequestError", "max_tokens")
        return dict(body)

    async def chat(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request, "messages")
        except BadRequest as err:
            return err.response()
        messages = body.get("messages") or []
        prompt = str(messages[-1].get("content", "")) if messages else ""
        await self._delay()
        content, reasoning = self.model.chat(prompt)
        reasoning, budget = cut_at_max_tokens(reasoning, body.get("max_tokens"))
        if content is not None:
            content, budget = cut_at_max_tokens(content, budget)
        finish = "length" if budget is not None and budget <= 0 else "stop"
        counts = self._account(prompt, f"{content or ''} {reasoning}")
        self.metrics.chats.labels(self.served_name).inc()
        if not (content or "").strip() and reasoning.strip():
            self.metrics.nulls.labels(self.served_name).inc()
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": reasoning,
        }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        usage: dict[str, Any] = {
            **counts,
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": len(reasoning.split())},
        }
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.served_name,
                "choices": [choice | _CHOICE_EXTRAS],
                "usage": usage,
                **_RESPONSE_EXTRAS,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "prompt_text": None,
            }
        )

    async def completions(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request, "prompt")
        except BadRequest as err:
            return err.response()
        prompt = str(body.get("prompt", ""))
        await self._delay()
        text = self.model.completion(prompt)
        for stop in body.get("stop") or []:
            text = text.split(stop, 1)[0]
        text, left = cut_at_max_tokens(text, body.get("max_tokens"))
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "length" if left is not None and left <= 0 else "stop",
            "stop_reason": None,
            **_CHOICE_EXTRAS,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
        }
        if body.get("echo"):
            choice["text"] = prompt + text
            if body.get("logprobs") is not None:
                choice |= _echo_logprobs(prompt, self.model.prompt_logprobs(prompt))
        usage: dict[str, Any] = {
            **self._account(prompt, text),
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        }
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.served_name,
                "choices": [choice],
                "usage": usage,
                **_RESPONSE_EXTRAS,
            }
        )

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[endpoint_fault_middleware(self.endpoint_fault)] if self.endpoint_fault else []
        )
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
