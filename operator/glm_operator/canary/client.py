"""A small async client for the parts of the OpenAI-compatible API the canaries use."""

from __future__ import annotations

from typing import Any

import httpx


class EndpointError(Exception):
    """The endpoint could not be reached or answered with an error."""


class OpenAIClient:
    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        # The canaries bound their own concurrency (GSM8K up to 256 in flight); httpx's pool would cap it at 100.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport, limits=limits)

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise EndpointError(f"{self.base_url}{path}: {err.__class__.__name__}: {err}") from err
        if response.status_code >= 400:
            raise EndpointError(f"{self.base_url}{path}: HTTP {response.status_code}: {response.text[:300]}")
        return response

    async def model_name(self) -> str:
        if self.model is None:
            data = (await self._request("GET", "/v1/models")).json()
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
        data = (await self._request("POST", "/v1/chat/completions", json=body)).json()
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
        choice: dict[str, Any] = (await self._request("POST", "/v1/completions", json=body)).json()["choices"][0]
        return choice

    async def metrics(self) -> str:
        return (await self._request("GET", "/metrics")).text


def reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning text: vLLM sends `reasoning`; older servers and other stacks `reasoning_content`."""
    return str(message.get("reasoning") or message.get("reasoning_content") or "")
