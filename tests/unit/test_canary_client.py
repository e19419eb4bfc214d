"""The canary client's request bodies and event loop: encoded once per check, sent byte for byte as JSON would be."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import uvloop
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from glm_operator.canary.client import TEXT, BodyTemplate, OpenAIClient
from glm_operator.canary.gsm8k import CHAT_SUFFIX, STOP, asker, few_shot_prompt
from glm_operator.canary.gsm8k_data import generate
from glm_operator.cli import eventloop

MODEL = "zai-org/GLM-5.3"


def _filled(value: Any, text: str) -> Any:
    if isinstance(value, dict):
        return {k: _filled(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, text) for v in value]
    return text if value == TEXT else value


def _whole(body: dict[str, Any], text: str) -> bytes:
    """What json.dumps gives for the body with its open string filled in."""
    return json.dumps(_filled(body, text)).encode()


# Any text a GSM8K file or a prompt may hold: quotes, backslashes, control characters, non-ASCII, astral planes.
_ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]))


@given(head=_ANY_TEXT, text=_ANY_TEXT, stop=st.lists(_ANY_TEXT, max_size=3))
def test_a_filled_template_is_byte_for_byte_the_json_of_the_whole_body(head: str, text: str, stop: list[str]) -> None:
    body = {"model": MODEL, "prompt": TEXT, "temperature": 0, "max_tokens": 256, "stop": stop}
    filled = BodyTemplate(body, head).fill(text)
    assert filled == _whole(body, head + text)
    assert json.loads(filled)["prompt"] == head + text


@given(text=_ANY_TEXT)
def test_a_chat_template_fills_the_user_message(text: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": TEXT}], "temperature": 0, "max_tokens": 512}
    assert BodyTemplate(body).fill(text) == _whole(body, text)


@pytest.mark.parametrize(
    "body",
    [{"model": MODEL, "prompt": "no open string"}, {"model": TEXT, "prompt": TEXT}],
    ids=["none", "two"],
)
def test_a_template_needs_exactly_one_open_string(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="exactly once"):
        BodyTemplate(body)


async def _recorded(chat: bool) -> tuple[list[tuple[str, str, Any]], list[bool]]:
    """The requests a GSM8K asker sends to a server that records them, and how it scores the answers."""
    seen: list[tuple[str, str, Any]] = []

    async def answer(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.path, request.content_type, body))
        text = "The answer is 1,234."
        if chat:
            return web.json_response({"choices": [{"message": {"content": text}}]})
        return web.json_response({"choices": [{"text": text}]})

    app = web.Application()
    app.add_routes([web.post("/v1/completions", answer), web.post("/v1/chat/completions", answer)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = OpenAIClient(f"http://127.0.0.1:{port}", model=MODEL)
    items = generate(3, seed=4)
    try:
        ask = await asker(client, generate(5, seed=2), chat)
        scored = [await ask(item) for item in items]
    finally:
        await client.close()
        await runner.cleanup()
    return seen, scored


def test_gsm8k_asks_each_question_after_the_five_shots_with_vllms_parameters() -> None:
    seen, scored = asyncio.run(_recorded(chat=False))
    shots, items = generate(5, seed=2), generate(3, seed=4)
    assert [path for path, _, _ in seen] == ["/v1/completions"] * 3
    assert {kind for _, kind, _ in seen} == {"application/json"}
    assert [body for _, _, body in seen] == [
        {
            "model": MODEL,
            "prompt": few_shot_prompt(shots, item.question),
            "temperature": 0,
            "max_tokens": 256,
            "stop": STOP,
        }
        for item in items
    ]
    assert scored == [item.label == "1234" for item in items]


def test_gsm8k_chat_asks_each_question_alone_and_scores_the_content() -> None:
    seen, _ = asyncio.run(_recorded(chat=True))
    assert [body for _, _, body in seen] == [
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": item.question + CHAT_SUFFIX}],
            "temperature": 0,
            "max_tokens": 512,
        }
        for item in generate(3, seed=4)
    ]


async def _loop_kind() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_glmctl_runs_the_canaries_on_uvloop_and_on_asyncio_when_asked() -> None:
    assert eventloop.run(_loop_kind()) is uvloop.Loop
    assert not issubclass(eventloop.run(_loop_kind(), "asyncio"), uvloop.Loop)
    with pytest.raises(ValueError, match="unknown event loop"):
        eventloop.loop_factory("trio")


def test_kopf_run_picks_uvloop_from_the_operators_dependencies() -> None:
    """The image's entry point is `kopf run`: it runs the operator, canary gates included, on uvloop when installed."""
    from kopf._kits.loops import proper_loop

    with proper_loop() as loop:
        assert isinstance(loop, uvloop.Loop)
