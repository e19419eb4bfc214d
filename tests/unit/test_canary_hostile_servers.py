"""`glmctl canary` against hostile and broken servers: each gets the verdict a user needs, never a traceback.

A server that answers something other than the OpenAI API's shape, errors, or drops the connection cannot be
judged: exit 2 with the URL, the status and a bounded excerpt of what it sent. A gateway without `/metrics` is still
an OpenAI-compatible endpoint: the suites that need only the API run, and the one that reads `/metrics` is named as
skipped with the reason. Answers in another legitimate format (markdown, LaTeX, CRLF) are right answers.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from glm_operator.cli.canary_cmd import EXIT_FAIL, EXIT_PASS, EXIT_UNREACHABLE, _canary
from glm_operator.sim.behaviour import Model
from glm_operator.sim.server import Simulator

MODEL = "zai-org/GLM-5.3"
QUICK = ("smoke", "null-content", "copy", "spec-decode")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run_canary(app: web.Application, suites: tuple[str, ...], asked: tuple[str, ...], timeout: float) -> int:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        return await _canary(f"http://127.0.0.1:{port}", suites, asked, None, "json", None, 20, 8, None, timeout)
    finally:
        await runner.cleanup()


def glmctl_canary(
    app: web.Application, suites: tuple[str, ...] = QUICK, asked: tuple[str, ...] = (), timeout: float = 5.0
) -> int:
    return asyncio.run(_run_canary(app, suites, asked, timeout))


def faulty(kind: str) -> web.Application:
    return Simulator(Model("none"), MODEL, spec_tokens=0, endpoint_fault=kind).app()


@pytest.mark.parametrize(
    "kind, cause",
    [
        # A gateway's or vLLM's error object sent with HTTP 200 once crashed glmctl with KeyError 'choices'.
        ("error-200", "HTTP 200: the server answered an error object, not a result: 'EngineCore encountered an issue'"),
        # A server failing a third of its requests cannot be judged; the failing status is what to fix.
        ("http-500-share", 'HTTP 500: \'{"error": {"object": "error", "message": "EngineCore encountered'),
        # Headers and half an answer, then the connection drops: the answer never arrived.
        ("reset-mid-body", "ClientPayloadError"),
        # Truncated JSON on the listing: not an answer of the API.
        ("truncated-json", "HTTP 200: the answer is not JSON"),
        ("hang", "no complete answer within 1 s (TimeoutError): the server is hung or slower than the timeout"),
    ],
)
def test_a_broken_server_is_exit_2_naming_the_cause_and_the_url_never_a_traceback(
    kind: str, cause: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = glmctl_canary(faulty(kind), timeout=1.0)
    out = capsys.readouterr()
    assert code == EXIT_UNREACHABLE, out
    assert cause in out.err, out.err
    assert "http://127.0.0.1:" in out.err and "/v1/" in out.err, "the message names the URL"
    assert "Traceback" not in out.err and "KeyError" not in out.err
    assert max(len(line) for line in out.err.splitlines()) < 700, "the excerpt of the body is bounded"


def test_a_huge_answer_is_refused_without_reading_it_all(capsys: pytest.CaptureFixture[str]) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"object": "list", "data": [{"id": "')
        for _ in range(10_000):  # 640 MB if it were all read
            await response.write(b"x" * 65536)
        return response

    app = web.Application()
    app.add_routes([web.get("/v1/models", endless)])
    code = glmctl_canary(app, timeout=30.0)
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE
    assert "the answer is larger than 4194304 bytes" in err, err


def test_a_gateway_without_metrics_runs_every_suite_that_needs_only_the_api_and_names_the_skipped_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = glmctl_canary(faulty("no-metrics"))
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_PASS, report
    assert [c["name"] for c in report["checks"]] == ["smoke", "null-content", "copy"]
    assert "/metrics" in report["skipped"]["spec-decode"] and "HTTP 404" in report["skipped"]["spec-decode"]


def test_a_metrics_suite_asked_for_by_name_on_a_gateway_without_metrics_fails_saying_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = glmctl_canary(faulty("no-metrics"), suites=("spec-decode",), asked=("spec-decode",))
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_FAIL
    (check,) = report["checks"]
    assert check["name"] == "spec-decode" and not check["passed"]
    assert "could not be read" in check["detail"] and "/metrics: HTTP 404" in check["detail"], check


def answering(content: Callable[[str], str], finish_reason: str = "stop") -> web.Application:
    """A server in front of a model that answers in its own format: `content` of each user message."""

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def chat(request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        message = {"role": "assistant", "content": content(body["messages"][-1]["content"]), "reasoning": "ok"}
        return web.json_response({"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]})

    app = web.Application()
    app.add_routes([web.get("/v1/models", models), web.post("/v1/chat/completions", chat)])
    return app


def _smoke_in(template: str) -> Callable[[str], str]:
    answers = {"What is 2+2?": "4", "What is 3+5?": "8", "What is 10-7?": "3", "What is 6*7?": "42"}
    answers |= {"What is 9+9?": "18", "What is 12-4?": "8"}
    return lambda prompt: template.format(answers.get(prompt, "Paris"))


@pytest.mark.parametrize(
    "template",
    ["**{}**", "The answer is $\\boxed{{{}}}$.", "{}\r\n", "Sum: 1,000 - 1,000 + {}"],
    ids=["markdown-bold", "latex-boxed", "crlf", "thousands-separator-earlier"],
)
def test_smoke_answers_in_another_legitimate_format_pass(template: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = glmctl_canary(answering(_smoke_in(template)), suites=("smoke",))
    assert code == EXIT_PASS, capsys.readouterr()


def test_a_boxed_number_with_a_thousands_separator_is_read_whole() -> None:
    from glm_operator.canary.gsm8k import last_integer

    assert last_integer("so the total is \\boxed{1,234}") == "1234"
    assert last_integer("**1,234**.") == "1234"


def test_a_copy_with_crlf_line_ends_is_an_exact_copy(capsys: pytest.CaptureFixture[str]) -> None:
    def copy_crlf(prompt: str) -> str:
        return "\r\n".join(prompt.split("\n")[1:]) + "\r\n"

    code = glmctl_canary(answering(copy_crlf), suites=("copy",))
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_PASS, report


@pytest.mark.parametrize(
    "listing, cause",
    [
        (
            {"data": []},
            "HTTP 200: the answer is JSON but not a model list (data[0].id) of the OpenAI API: '{\"data\": []}'",
        ),
        (
            {"object": "error", "message": "no such route"},
            "HTTP 200: the server answered an error object, not a result",
        ),
        ([1, 2], "HTTP 200: the answer is JSON but not a model list"),
    ],
)
def test_a_model_listing_that_is_not_one_is_exit_2_saying_so(
    listing: object, cause: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def models(_: web.Request) -> web.Response:
        return web.json_response(listing)

    app = web.Application()
    app.add_routes([web.get("/v1/models", models)])
    code = glmctl_canary(app)
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE
    assert "/v1/models: " + cause in err, err
    assert "Traceback" not in err
