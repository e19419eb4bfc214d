"""A small async client for the parts of the OpenAI-compatible API the canaries use."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

KEEPALIVE_S = 2.0
"""Idle pooled connections are dropped after this, well before vLLM's own 5 s keep-alive timeout."""


class EndpointError(Exception):
    """The endpoint could not be reached or answered with an error."""


class OpenAIClient:
    """On aiohttp: a GSM8K wave of 64 requests costs a tenth of the client CPU it took on httpx."""

    def __init__(self, base_url: str, model: str | None = None, timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, path: str, **kwargs: Any) -> str:
        if self._session is None:
            # The canaries bound their own concurrency (GSM8K up to 256 in flight): no pool limit here.
            # vLLM closes a keep-alive connection after 5 idle seconds (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, vllm/envs.py);
            # aiohttp would keep it 15 s and send the next request into a socket the server has closed.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        url = f"{self.base_url}{path}"
        for attempt in (1, 2):
            try:
                async with self._session.request(method, url, **kwargs) as response:
                    text = await response.text()
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
                # A pooled connection the server closed as this request went out: nothing was answered, and
                # every canary request is free of side effects, so it goes once more on a fresh connection.
                if attempt == 2 or isinstance(err, aiohttp.ClientConnectorError):
                    raise EndpointError(f"{url}: {err.__class__.__name__}: {err}") from err
            except (TimeoutError, aiohttp.ClientError) as err:
                raise EndpointError(f"{url}: {err.__class__.__name__}: {err}") from err
        if response.status >= 400:
            raise EndpointError(f"{self.base_url}{path}: HTTP {response.status}: {text[:300]}")
        return text

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        text = await self._request(method, path, **kwargs)
        try:
            return json.loads(text)
        except ValueError as err:  # truncated or not JSON at all: not an answer of the OpenAI API
            raise EndpointError(f"{self.base_url}{path}: the answer is not JSON ({err}): {text[:120]!r}") from err

    async def model_name(self) -> str:
        if self.model is None:
            data = await self._json("GET", "/v1/models")
            self.model = data["data"][0]["id"]
        return self.model

    async def chat(self, prompt: str, max_tokens: int = 256) -> dict[str, Any]:
        """One chat turn at temperature 0; returns the message (content, reasoning)."""
        body = {
            "model": await self.model_name(),
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        data = await self._json("POST", "/v1/chat/completions", json=body)
        message: dict[str, Any] = data["choices"][0]["message"]
        return message

    async def complete(
        self,
        prompt: str,
        max_tokens: int = 256,
        stop: list[str] | None = None,
        echo: bool = False,
        logprobs: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": await self.model_name(),
            "prompt": prompt,
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        if stop:
            body["stop"] = stop
        if echo:
            body["echo"] = True
        if logprobs is not None:
            body["logprobs"] = logprobs
        choice: dict[str, Any] = (await self._json("POST", "/v1/completions", json=body))["choices"][0]
        return choice

    async def metrics(self) -> str:
        return await self._request("GET", "/metrics")


def reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning text: vLLM sends `reasoning`; older servers and other stacks `reasoning_content`."""
    return str(message.get("reasoning") or message.get("reasoning_content") or "")
