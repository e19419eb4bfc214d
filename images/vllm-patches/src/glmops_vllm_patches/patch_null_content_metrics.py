"""Patch null-content-metrics: count, on vLLM's own /metrics, chat completions whose answer is only reasoning.

`OpenAIServingChat.create_chat_completion` (the /v1/chat/completions handler, every supported version) is wrapped:
- non-streaming: each choice of the returned ChatCompletionResponse is counted once;
- streaming: the SSE chunks pass through unchanged; per choice index the wrapper notes whether content, reasoning
  or tool calls appeared, and counts the choice once, at the chunk carrying its finish_reason.
A choice is null-content when its content is empty (None or whitespace) while its reasoning is not, and it made no
tool call (a tool call with reasoning and no text is a normal GLM turn). This is the canary's definition
(operator/glm_operator/canary/checks.py::null_content), applied to production traffic.

Counters (prometheus_client, label model_name = the response's `model`):
  glmops_chat_completions_total     finished chat completion choices
  glmops_chat_null_content_total    those with empty content and non-empty reasoning
Deprecated, removed in the next release: the same counts under the earlier names glmops:chat_completions_total
and glmops:chat_null_content_total (a colon is for recording rules; `promtool check metrics` refuses them).
They are created in the process that registers the plugin and go through prometheus_client like vLLM's own
metrics, so /metrics shows them in single-process mode (global REGISTRY) and with PROMETHEUS_MULTIPROC_DIR
(API server processes write the multiprocess files that vLLM's MultiProcessCollector reads).

Alert (PromQL): the null-content share over a window, per model,
  sum by (model_name) (rate(glmops_chat_null_content_total[10m]))
    / sum by (model_name) (rate(glmops_chat_completions_total[10m])) > 0.05
(0.05 is the canary's default max_rate; guard low traffic with `and sum by (model_name)
(rate(glmops_chat_completions_total[10m])) > 0.1` or similar).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from glmops_vllm_patches.base import Context, Patch, PatchInfo, PatchTargetMissing, Target, mark, marked
from glmops_vllm_patches.version import Version, VersionRange

log = logging.getLogger("vllm.glmops_patches.null_content_metrics")

INFO = PatchInfo(
    name="null-content-metrics",
    issue="vllm-58729",
    issue_url="https://github.com/vllm-project/vllm/issues/58729",
    prs=(),
    why=(
        "Not an upstream fix (there is no upstream PR): a glmops metric for the symptom vllm-58729 reported. "
        "The silent GLM-5.x failures (vllm-58729: 1,178 of 1,319 chat answers had content null with the text only "
        "in the reasoning) leave /health green and vLLM has no metric for it; the canary samples only a few "
        "prompts, production traffic must feed the null-content alert too."
    ),
    how=(
        "OpenAIServingChat.create_chat_completion is wrapped: every finished chat completion choice (non-streaming "
        "response, or a streamed choice at its finish_reason) increments glmops_chat_completions_total{model_name}, "
        "and glmops_chat_null_content_total{model_name} when content is empty, reasoning is not and no tool was "
        "called; OpenAIServingChat.__init__ is wrapped to start both series at 0 for every served model name. "
        "The earlier names glmops:chat_completions_total and glmops:chat_null_content_total count the same, "
        "deprecated for one release. "
        "Alert: sum by (model_name) (rate(glmops_chat_null_content_total[10m])) / "
        "sum by (model_name) (rate(glmops_chat_completions_total[10m])) > 0.05."
    ),
    affected=VersionRange("0.26.0"),
    # Plain Python around the OpenAI front end: it counts on any platform (cpu: vLLM's CPU build, as tested here).
    platforms=("cuda", "rocm", "cpu"),
    remove_when="vLLM exports a null-content (content empty, reasoning non-empty) counter of its own",
)

COMPLETIONS = "glmops_chat_completions"
NULL_CONTENT = "glmops_chat_null_content"
# The earlier names, counted alike for one release (deprecated: promtool refuses a colon outside recording rules).
DEPRECATED = {COMPLETIONS: "glmops:chat_completions", NULL_CONTENT: "glmops:chat_null_content"}
LABEL = "model_name"

SERVING = "vllm.entrypoints.openai.chat_completion.serving"
CHAT_PROTOCOL = "vllm.entrypoints.openai.chat_completion.protocol"
CREATE = Target(SERVING, "OpenAIServingChat.create_chat_completion", ("self", "request", "raw_request"))
INIT = Target(SERVING, "OpenAIServingChat.__init__", ("self", "models"))
CHAT_MESSAGE = Target(CHAT_PROTOCOL, "ChatMessage")
# Only the OpenAI front end is counted: the Anthropic and Cohere adapters subclass OpenAIServingChat elsewhere and
# (0.33.0) stream in their own formats.
COUNTED_MODULES = "vllm.entrypoints.openai."


def delta_message(version: Version) -> Target:
    """DeltaMessage moved from the OpenAI engine protocol (0.27.x) to the shared generate protocol (0.30.0)."""
    if version < Version.parse("0.30.0"):
        return Target("vllm.entrypoints.openai.engine.protocol", "DeltaMessage")
    return Target("vllm.entrypoints.generate.base.protocol", "DeltaMessage")


def targets(ctx: Context) -> tuple[Target, ...]:
    return (CREATE, INIT, CHAT_MESSAGE, delta_message(ctx.version))


def apply(ctx: Context, found: Mapping[Target, Any]) -> str:
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat

    for target in (CHAT_MESSAGE, delta_message(ctx.version)):
        fields = getattr(found[target], "model_fields", {})
        if "content" not in fields or not {"reasoning", "reasoning_content"} & set(fields):
            raise PatchTargetMissing(f"{target}: no content/reasoning fields")
    counters()
    if marked(OpenAIServingChat.__dict__["create_chat_completion"], INFO.name):
        return "OpenAIServingChat already wrapped"
    OpenAIServingChat.create_chat_completion = _wrap_create(found[CREATE])
    OpenAIServingChat.__init__ = _wrap_init(found[INIT])
    return f"OpenAIServingChat.create_chat_completion wrapped: {COMPLETIONS}_total, {NULL_CONTENT}_total"


# --- the counters -----------------------------------------------------------------------------------------------


class _Counted:
    """A counter under its name and its deprecated name: `labels(...).inc()` counts both."""

    def __init__(self, current: Any, deprecated: Any) -> None:
        self.current, self.deprecated = current, deprecated

    def labels(self, *values: str) -> _Counted:
        return _Counted(self.current.labels(*values), self.deprecated.labels(*values))

    def inc(self, amount: float = 1) -> None:
        self.current.inc(amount)
        self.deprecated.inc(amount)


_counters: tuple[_Counted, _Counted] | None = None


def counters() -> tuple[_Counted, _Counted]:
    """(completions, null-content) Counters, registered once per process in prometheus_client's global REGISTRY."""
    global _counters
    if _counters is None:
        from prometheus_client import REGISTRY, Counter

        existing = getattr(REGISTRY, "_names_to_collectors", {})
        made = []
        for name, doc in (
            (COMPLETIONS, "Finished chat completion choices (glmops plugin)."),
            (NULL_CONTENT, "Finished chat completion choices with empty content and non-empty reasoning (glmops)."),
        ):
            old = DEPRECATED[name]
            made.append(
                _Counted(
                    existing.get(name) or Counter(name, doc, [LABEL]),
                    existing.get(old) or Counter(old, f"Deprecated, use {name}_total. {doc}", [LABEL]),
                )
            )
        _counters = (made[0], made[1])
    return _counters


def record(model: str, null_content: bool) -> None:
    completions, nulls = counters()
    completions.labels(model).inc()
    if null_content:
        nulls.labels(model).inc()


def is_null_content(content: str | None, reasoning: str | None, tool_calls: bool) -> bool:
    return not (content or "").strip() and bool((reasoning or "").strip()) and not tool_calls


def _reasoning(message: Any) -> str | None:
    if isinstance(message, Mapping):
        return message.get("reasoning") or message.get("reasoning_content")
    return getattr(message, "reasoning", None) or getattr(message, "reasoning_content", None)


# --- non-streaming ----------------------------------------------------------------------------------------------


def count_response(response: Any) -> int:
    """Count every choice of a ChatCompletionResponse; return how many were null-content."""
    nulls = 0
    for choice in response.choices:
        message = choice.message
        null = is_null_content(message.content, _reasoning(message), bool(getattr(message, "tool_calls", None)))
        record(response.model, null)
        nulls += null
    return nulls


# --- streaming --------------------------------------------------------------------------------------------------


@dataclass
class _Choice:
    content: bool = False
    reasoning: bool = False
    tool_calls: bool = False


class StreamTally:
    """Follows the SSE frames of one streamed chat completion; records each choice at its finish_reason."""

    def __init__(self) -> None:
        self.choices: dict[int, _Choice] = {}
        self.finished: list[tuple[str, bool]] = []

    def feed(self, frame: str) -> None:
        for line in frame.splitlines():
            if not line.startswith("data:"):
                continue
            payload = line[len("data:") :].strip()
            if not payload.startswith("{"):
                continue  # "[DONE]"
            self._chunk(json.loads(payload))

    def _chunk(self, chunk: Mapping[str, Any]) -> None:
        if chunk.get("object", "chat.completion.chunk") != "chat.completion.chunk":
            return  # vLLM sets `object` on every chunk; a serializer dropping defaults may leave it out
        for choice in chunk.get("choices") or ():
            seen = self.choices.setdefault(int(choice.get("index", 0)), _Choice())
            delta = choice.get("delta") or {}
            seen.content |= bool((delta.get("content") or "").strip())
            seen.reasoning |= bool((_reasoning(delta) or "").strip())
            seen.tool_calls |= bool(delta.get("tool_calls"))
            if choice.get("finish_reason"):
                null = is_null_content("x" if seen.content else "", "x" if seen.reasoning else "", seen.tool_calls)
                self.finished.append((str(chunk.get("model", "")), null))
                record(str(chunk.get("model", "")), null)
                self.choices.pop(int(choice.get("index", 0)), None)


async def count_stream(frames: AsyncIterator[str]) -> AsyncIterator[str]:
    """Yield `frames` unchanged while counting; a frame the tally cannot read is logged once, never raised."""
    tally, broken = StreamTally(), False
    try:
        async for frame in frames:
            if not broken and isinstance(frame, str):
                try:
                    tally.feed(frame)
                except Exception:  # noqa: BLE001 - counting must never break an answer
                    broken = True
                    log.warning("glmops null-content counter: unreadable stream frame, not counting this stream")
            yield frame
    finally:
        close = getattr(frames, "aclose", None)
        if close is not None:
            await close()


# --- the wrappers -----------------------------------------------------------------------------------------------


def _counted(serving: Any) -> bool:
    return type(serving).__module__.startswith(COUNTED_MODULES)


def _wrap_create(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def create_chat_completion(self: Any, request: Any, raw_request: Any = None) -> Any:
        result = await original(self, request, raw_request)
        if not _counted(self):
            return result
        if getattr(result, "object", None) == "chat.completion" and hasattr(result, "choices"):
            try:
                count_response(result)
            except Exception:  # noqa: BLE001 - counting must never break an answer
                log.warning("glmops null-content counter: could not read a chat completion", exc_info=True)
            return result
        if hasattr(result, "__aiter__"):
            return count_stream(result)
        return result  # ErrorResponse

    return mark(create_chat_completion, INFO.name)


def _wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _counted(self):
            start_series(self)

    return mark(__init__, INFO.name)


def start_series(serving: Any) -> list[str]:
    """Create both series at 0 for every served model name, so rate() sees the first null-content answer."""
    paths = getattr(getattr(serving, "models", None), "base_model_paths", None) or ()
    names = [str(p.name) for p in paths if getattr(p, "name", None)]
    completions, nulls = counters()
    for name in names:
        completions.labels(name)
        nulls.labels(name)
    return names


PATCH = Patch(info=INFO, targets=targets, apply=apply)
