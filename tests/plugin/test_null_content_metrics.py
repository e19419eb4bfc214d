"""null-content-metrics: chat completions with empty content and non-empty reasoning are counted on /metrics.

Static: every target exists in every proven version. Logic: the classification and the stream tally, in this
process. Runtime: the real OpenAIServingChat.create_chat_completion of each version, wrapped, driven with real
protocol objects (streamed frames serialized as vLLM does), in prometheus multiprocess mode, read back through
vLLM's own /metrics registry.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from glmops_vllm_patches import patch_null_content_metrics as nc
from glmops_vllm_patches.base import Context
from glmops_vllm_patches.static import find_problem
from glmops_vllm_patches.version import PROVEN_VERSIONS, Version

from tests.plugin import shared_vllm_runs
from tests.plugin.conftest import vllm_source


def test_every_target_exists_in_every_proven_version(vllm_version: str) -> None:
    root = vllm_source(vllm_version)
    needed = nc.targets(Context(Version.parse(vllm_version), "cuda", {}))
    assert [find_problem(root, t) for t in needed] == [None] * len(needed)


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
@pytest.mark.parametrize(
    ("platform", "env", "applies"),
    [("cuda", {}, True), ("rocm", {}, True), ("cpu", {}, True), ("cuda", {nc.INFO.env_switch: "off"}, False)],
)
def test_guard_applies_on_every_platform_in_every_version_unless_switched_off(
    version: str, platform: str, env: dict[str, str], applies: bool
) -> None:
    assert nc.PATCH.decide(Context(Version.parse(version), platform, env)).apply is applies


# --- the logic, in this process -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reasoning", "tool_calls", "null"),
    [
        (None, "2+2 is 4", False, True),
        ("", "2+2 is 4", False, True),
        (" \n", "2+2 is 4", False, True),  # whitespace is empty, as in the canary
        ("4", "2+2 is 4", False, False),
        ("4", None, False, False),
        (None, None, False, False),
        (None, "  ", False, False),
        (None, "I call the tool", True, False),  # a tool call turn has no text by design
    ],
)
def test_null_content_is_empty_content_with_reasoning(
    content: str | None, reasoning: str | None, tool_calls: bool, null: bool
) -> None:
    assert nc.is_null_content(content, reasoning, tool_calls) is null


def _frame(index: int, finish: str | None = None, model: str = "tally", **delta: Any) -> str:
    chunk = {"object": "chat.completion.chunk", "model": model, "choices": [{"index": index, "delta": delta}]}
    if finish:
        chunk["choices"][0]["finish_reason"] = finish
    return f"data: {json.dumps(chunk)}\n\n"


def test_stream_tally_counts_each_choice_once_at_its_finish_reason() -> None:
    tally = nc.StreamTally()
    frames = [
        _frame(0, role="assistant"),
        _frame(1, role="assistant"),
        _frame(0, reasoning="thinking"),
        _frame(1, reasoning_content="thinking"),  # the older field name
        _frame(1, content="42"),
        _frame(0, content=""),
        _frame(1, finish="stop"),
        _frame(0, finish="length"),
        'data: {"object": "chat.completion.chunk", "model": "tally", "choices": [], "usage": {}}\n\n',
        "data: [DONE]\n\n",
    ]
    for frame in frames:
        tally.feed(frame)
    assert tally.finished == [("tally", False), ("tally", True)]
    assert tally.choices == {}


def test_an_unfinished_stream_is_not_counted_and_is_closed() -> None:
    closed: list[bool] = []

    async def frames() -> AsyncIterator[str]:
        try:
            yield _frame(0, reasoning="thinking")
            yield _frame(0, finish="stop")
        finally:
            closed.append(True)

    async def client_goes_away() -> list[str]:
        stream = nc.count_stream(frames())
        first = [await stream.__anext__()]
        await stream.aclose()  # type: ignore[attr-defined]
        return first

    before = _sample(nc.NULL_CONTENT, "tally")
    assert len(asyncio.run(client_goes_away())) == 1
    assert closed == [True]
    assert _sample(nc.NULL_CONTENT, "tally") == before


def test_a_frame_the_tally_cannot_read_passes_through_unchanged() -> None:
    async def frames() -> AsyncIterator[str]:
        yield "data: {not json\n\n"
        yield _frame(0, finish="stop")

    async def read() -> list[str]:
        return [f async for f in nc.count_stream(frames())]

    assert asyncio.run(read()) == ["data: {not json\n\n", _frame(0, finish="stop")]


def _sample(name: str, model: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name + "_total", {"model_name": model}) or 0.0


def test_counters_are_registered_once_and_exposed() -> None:
    from prometheus_client import REGISTRY, generate_latest

    assert nc.counters() is nc.counters()
    nc.record("expo", True)
    nc.record("expo", False)
    text = generate_latest(REGISTRY).decode()
    assert 'glmops_chat_completions_total{model_name="expo"} 2.0' in text
    assert 'glmops_chat_null_content_total{model_name="expo"} 1.0' in text
    # the deprecated names count alike for one release
    assert 'glmops:chat_completions_total{model_name="expo"} 2.0' in text
    assert 'glmops:chat_null_content_total{model_name="expo"} 1.0' in text


# --- runtime: the real vLLM of every proven version ---------------------------------------------------------------

RUNTIME = r"""
import asyncio, importlib, os
from glmops_vllm_patches import plugin, patch_null_content_metrics as P
from glmops_vllm_patches.base import Context, PatchTargetMissing, resolve
from glmops_vllm_patches.version import Version
import vllm
from vllm.entrypoints.openai.chat_completion import serving as S, protocol as CP
from vllm.entrypoints.openai.models.protocol import BaseModelPath
from vllm.v1.metrics.prometheus import get_prometheus_registry
from prometheus_client import REGISTRY, generate_latest
from prometheus_client import values

ver = Version.parse(vllm.__version__)
D = importlib.import_module(P.delta_message(ver).module)
result["multiprocess_values"] = values.ValueClass.__name__ != "MutexValue"
def ctx(platform, **env):
    return Context(ver, platform, env)

result["xpu"] = plugin.apply_patches(ctx("xpu"), (P.PATCH,))[P.INFO.name].message
plugin._outcomes.clear()
off = ctx("cuda", GLMOPS_PATCH_NULL_CONTENT_METRICS="off")
result["off"] = plugin.apply_patches(off, (P.PATCH,))[P.INFO.name].message
plugin._outcomes.clear()
original = S.OpenAIServingChat.__dict__["create_chat_completion"]
del S.OpenAIServingChat.create_chat_completion
try:
    plugin.apply_patches(ctx("cuda"), (P.PATCH,))
    result["missing"] = None
except PatchTargetMissing as exc:
    result["missing"] = str(exc)
S.OpenAIServingChat.create_chat_completion = original
plugin._outcomes.clear()
os.environ["GLMOPS_PATCH_PLATFORM"] = "cuda"
outcome = plugin.apply_patches(None, (P.PATCH,))[P.INFO.name]  # the real version and the platform override
result["outcome"] = [outcome.applied, outcome.message]
wrapped = S.OpenAIServingChat.__dict__["create_chat_completion"]
result["wrapped"] = [getattr(wrapped, "__glmops_patch__", None),
                     getattr(S.OpenAIServingChat.__dict__["__init__"], "__glmops_patch__", None)]
result["again"] = P.apply(ctx("cuda"), {t: resolve(t) for t in P.targets(ctx("cuda"))})
result["same_wrapper"] = S.OpenAIServingChat.__dict__["create_chat_completion"] is wrapped

MODEL = "glm-5"
def response(*messages):
    return CP.ChatCompletionResponse(
        model=MODEL,
        choices=[
            CP.ChatCompletionResponseChoice(index=i, message=CP.ChatMessage(role="assistant", **m))
            for i, m in enumerate(messages)
        ],
        usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})

def frame(index, finish=None, **delta):  # serialized as vLLM's stream generator does
    chunk = CP.ChatCompletionStreamResponse(model=MODEL, object="chat.completion.chunk", choices=[
        CP.ChatCompletionResponseStreamChoice(index=index, delta=D.DeltaMessage(**delta), finish_reason=finish)])
    return f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n"

async def frames(items):
    for item in items:
        yield item

def serving_of(cls):
    serving = cls.__new__(cls)
    serving.has_kv_connector = False
    return serving

request = CP.ChatCompletionRequest(model=MODEL, messages=[{"role": "user", "content": "2+2?"}])
async def call(value, cls=S.OpenAIServingChat):
    serving = serving_of(cls)
    async def engine_side(req, raw_request=None):  # stands in for the engine; the real handler wraps it
        return value
    serving._create_chat_completion = engine_side
    out = await serving.create_chat_completion(request, None)
    return [f async for f in out] if hasattr(out, "__aiter__") else out

def counts():
    names = (P.COMPLETIONS, P.NULL_CONTENT)
    return [REGISTRY.get_sample_value(n + "_total", {"model_name": MODEL}) or 0.0 for n in names]

start = serving_of(S.OpenAIServingChat)
start.models = type("Models", (), {"base_model_paths": [BaseModelPath(name=MODEL, model_path="/models/glm")]})()
result["started"] = P.start_series(start)
result["at_start"] = counts()

steps = {}
async def main():
    out = await call(response({"content": "4", "reasoning": "2+2=4"}, {"content": None, "reasoning": "2+2=4"}))
    steps["full"] = [type(out).__name__, counts()]
    streamed = [frame(0, role="assistant"), frame(0, reasoning="2+2"), frame(0, content=""), frame(0, finish="stop"),
                "data: [DONE]\n\n"]
    got = await call(frames(streamed))
    steps["stream_null"] = [got == streamed, counts()]
    await call(frames([frame(0, reasoning="2+2"), frame(0, content="4"), frame(0, finish="stop"), "data: [DONE]\n\n"]))
    steps["stream_answer"] = counts()
    error = S.ErrorResponse(error={"message": "bad", "type": "BadRequestError", "code": 400})
    steps["error"] = [type(await call(error)).__name__, counts()]
    Adapter = type("Adapter", (S.OpenAIServingChat,), {"__module__": "vllm.entrypoints.anthropic.serving"})
    await call(response({"content": None, "reasoning": "x"}), cls=Adapter)
    steps["adapter"] = counts()
asyncio.run(main())
result["steps"] = steps
result["exposition"] = sorted(l for l in generate_latest(get_prometheus_registry()).decode().splitlines()
                              if l.startswith("glmops") and MODEL in l)
"""

shared_vllm_runs.register("null-content-metrics", RUNTIME)


def _runtime(run_in_vllm: Any, version: str) -> dict[str, Any]:
    """Runs with PROMETHEUS_MULTIPROC_DIR set before prometheus_client is imported (vLLM's multi-process mode)."""
    return shared_vllm_runs.result(run_in_vllm, "null-content-metrics", version)


def test_patch_applies_skips_and_fails_as_its_guard_says(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    assert out["xpu"] == "platform xpu is not affected (only cuda, rocm, cpu)"
    assert out["off"] == "turned off by GLMOPS_PATCH_NULL_CONTENT_METRICS"
    assert "OpenAIServingChat.create_chat_completion" in out["missing"]
    assert out["outcome"][0] is True
    assert out["wrapped"] == ["null-content-metrics", "null-content-metrics"]
    assert out["again"] == "OpenAIServingChat already wrapped"
    assert out["same_wrapper"] is True


def test_real_chat_responses_increment_the_counters_exactly_for_null_content(
    run_in_vllm: Any, vllm_version: str
) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    assert out["started"] == ["glm-5"]
    assert out["at_start"] == [0.0, 0.0]  # both series exist from start-up
    steps = out["steps"]
    assert steps["full"] == ["ChatCompletionResponse", [2.0, 1.0]]
    assert steps["stream_null"] == [True, [3.0, 2.0]]  # frames pass through unchanged
    assert steps["stream_answer"] == [4.0, 2.0]
    assert steps["error"] == ["ErrorResponse", [4.0, 2.0]]
    assert steps["adapter"] == [4.0, 2.0]  # non-OpenAI front ends are not counted


def test_counters_show_on_vllms_metrics_in_multiprocess_mode(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    assert out["multiprocess_values"] is True
    assert out["exposition"] == [
        'glmops:chat_completions_total{model_name="glm-5"} 4.0',
        'glmops:chat_null_content_total{model_name="glm-5"} 2.0',
        'glmops_chat_completions_total{model_name="glm-5"} 4.0',
        'glmops_chat_null_content_total{model_name="glm-5"} 2.0',
    ]
