"""A small async client for the parts of the OpenAI-compatible API the canaries use."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

KEEPALIVE_S = 2.0
"""Idle pooled connections are dropped after this, well before vLLM's own 5 s keep-alive timeout."""

TEXT = "\x00glmops:text\x00"
"""Stands in a request body for the one string a `BodyTemplate` fills in per request."""
_JSON_HEADERS = {"Content-Type": "application/json"}


class BodyTemplate:
    """A JSON request body encoded once, whose one open string (`TEXT`) is `head` followed by each request's text.

    A GSM8K wave sends the same model, parameters and five worked examples with each of its questions: they are
    encoded once per check, and each request encodes only its question. JSON escapes a string character by
    character, so the encoding of head + text is that of head followed by that of text, and `fill` gives the very
    bytes `json.dumps` gives for the whole body.
    """

    def __init__(self, body: dict[str, Any], head: str = "") -> None:
        encoded, marker = json.dumps(body), json.dumps(TEXT)
        if encoded.count(marker) != 1:
            raise ValueError(f"a body template holds TEXT exactly once, not {encoded.count(marker)} times")
        before, after = encoded.split(marker)
        self._before = (before + json.dumps(head)[:-1]).encode()
        self._after = after.encode()

    def fill(self, text: str) -> bytes:
        return b"".join((self._before, json.dumps(text)[1:].encode(), self._after))


MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest answer read: a canary answer is a few KiB; a server streaming without end must not fill memory."""
EXCERPT_CHARS = 200


class EndpointError(Exception):
    """The endpoint could not be reached, answered with an error, or answered something that is not the API's."""


def excerpt(raw: bytes) -> str:
    """A bounded one-line excerpt of a body, for an error message: its first characters and its length."""
    text = " ".join(raw[: EXCERPT_CHARS * 4].decode("utf-8", "replace").split())
    cut = text[:EXCERPT_CHARS] + ("..." if len(text) > EXCERPT_CHARS or len(raw) > EXCERPT_CHARS * 4 else "")
    return f"{cut!r} ({len(raw)} bytes)"


def describe(err: BaseException, timeout_s: float) -> str:
    """What went wrong in words, never an empty string (TimeoutError and some aiohttp errors carry no message)."""
    if isinstance(err, TimeoutError):
        return (
            f"no complete answer within {timeout_s:g} s (TimeoutError): the server is hung or slower than the timeout"
        )
    text = " ".join(str(err).split())
    return f"{err.__class__.__name__}: {text}" if text else f"{err.__class__.__name__} (no detail given)"


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

    async def _request(self, method: str, path: str, **kwargs: Any) -> tuple[int, bytes]:
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
                    raw = await _read_bounded(response)
                    if len(raw) > MAX_BODY_BYTES:
                        raise EndpointError(
                            f"{url}: HTTP {response.status}: the answer is larger than {MAX_BODY_BYTES} bytes, "
                            f"no canary answer is: {excerpt(raw)}"
                        )
                    status = response.status
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
                # A pooled connection the server closed as this request went out: nothing was answered, and
                # every canary request is free of side effects, so it goes once more on a fresh connection.
                if attempt == 2 or isinstance(err, aiohttp.ClientConnectorError):
                    raise EndpointError(f"{url}: {describe(err, self._timeout.total or 0)}") from err
            except (TimeoutError, aiohttp.ClientError) as err:
                raise EndpointError(f"{url}: {describe(err, self._timeout.total or 0)}") from err
        if status >= 400:
            raise EndpointError(f"{url}: HTTP {status}: {excerpt(raw)}")
        return status, raw

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._answer(method, path, **kwargs))[1]

    async def _answer(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        """The status and the decoded JSON body of a successful answer."""
        status, raw = await self._request(method, path, **kwargs)
        try:
            return status, json.loads(raw)  # the bytes as they came: JSON is UTF-8, no text decoding first
        except ValueError as err:  # truncated or not JSON at all: not an answer of the OpenAI API
            raise EndpointError(
                f"{self.base_url}{path}: HTTP {status}: the answer is not JSON ({err}): {excerpt(raw)}"
            ) from err

    async def _choice(self, path: str, template: BodyTemplate, text: str, needs: str) -> dict[str, Any]:
        """The first choice of a completion answer, refused by name when the body is not the API's shape."""
        status, data = await self._answer("POST", path, data=template.fill(text), headers=_JSON_HEADERS)
        choices = data.get("choices") if isinstance(data, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(choice, dict) and (needs == "text" or isinstance(choice.get(needs), dict)):
            return choice
        wanted = "a chat completion (choices[0].message)" if needs == "message" else "a completion (choices[0])"
        raise EndpointError(f"{self.base_url}{path}: HTTP {status}: {_not_an_answer(data, wanted)}")

    async def model_name(self) -> str:
        if self.model is None:
            status, data = await self._answer("GET", "/v1/models")
            listed = data.get("data") if isinstance(data, dict) else None
            first = listed[0] if isinstance(listed, list) and listed else None
            if not isinstance(first, dict) or not isinstance(first.get("id"), str):
                wanted = "a model list (data[0].id)"
                raise EndpointError(f"{self.base_url}/v1/models: HTTP {status}: {_not_an_answer(data, wanted)}")
            self.model = first["id"]
        return self.model

    async def chat_template(self, max_tokens: int = 256) -> BodyTemplate:
        """A chat turn at temperature 0 whose user message is filled in per request."""
        body = {
            "model": await self.model_name(),
            "messages": [{"role": "user", "content": TEXT}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        return BodyTemplate(body)

    async def chat_with(self, template: BodyTemplate, prompt: str) -> dict[str, Any]:
        """One chat turn; returns its choice (`message` with content and reasoning, `finish_reason`)."""
        return await self._choice("/v1/chat/completions", template, prompt, "message")

    async def chat(self, prompt: str, max_tokens: int = 256) -> dict[str, Any]:
        """One chat turn at temperature 0; returns its choice (message, finish_reason)."""
        return await self.chat_with(await self.chat_template(max_tokens), prompt)

    async def completion_template(
        self,
        head: str = "",
        max_tokens: int = 256,
        stop: list[str] | None = None,
        echo: bool = False,
        logprobs: int | None = None,
    ) -> BodyTemplate:
        """A completion at temperature 0 whose prompt is `head` followed by each request's text."""
        body: dict[str, Any] = {
            "model": await self.model_name(),
            "prompt": TEXT,
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        if stop:
            body["stop"] = stop
        if echo:
            body["echo"] = True
        if logprobs is not None:
            body["logprobs"] = logprobs
        return BodyTemplate(body, head)

    async def complete_with(self, template: BodyTemplate, text: str) -> dict[str, Any]:
        """One completion; returns its choice (text, logprobs, finish_reason)."""
        return await self._choice("/v1/completions", template, text, "text")

    async def complete(
        self,
        prompt: str,
        max_tokens: int = 256,
        stop: list[str] | None = None,
        echo: bool = False,
        logprobs: int | None = None,
    ) -> dict[str, Any]:
        template = await self.completion_template("", max_tokens, stop, echo, logprobs)
        return await self.complete_with(template, prompt)

    async def metrics(self) -> str:
        return (await self._request("GET", "/metrics"))[1].decode("utf-8", "replace")


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    """The body, or its first MAX_BODY_BYTES and one more byte when it is longer (the caller refuses it)."""
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            break
    return b"".join(chunks)[: MAX_BODY_BYTES + 1]


def _not_an_answer(data: Any, wanted: str) -> str:
    """Why a JSON body is not the answer asked for, with a bounded excerpt of it."""
    body = excerpt(json.dumps(data).encode())
    if isinstance(data, dict) and (data.get("object") == "error" or "error" in data):
        nested = data.get("error")
        error: dict[str, Any] = nested if isinstance(nested, dict) else data
        message = " ".join(str(error.get("message") or "no message").split())[:EXCERPT_CHARS]
        return f"the server answered an error object, not a result: {message!r}; body {body}"
    return f"the answer is JSON but not {wanted} of the OpenAI API: {body}"


def reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning text: vLLM sends `reasoning`; older servers and other stacks `reasoning_content`."""
    return str(message.get("reasoning") or message.get("reasoning_content") or "")
