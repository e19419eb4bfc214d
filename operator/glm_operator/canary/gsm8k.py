"""GSM8K canary, compatible with vLLM's own check, decided by a sequential test over concurrent waves.

Prompt and scoring follow vLLM's gsm8k_eval: 5-shot "Question: ...\\nAnswer: ..." from the train split
on /v1/completions, temperature 0, max_tokens 256, stop at "Question" and "Assistant:", score = the last
integer of the output (commas stripped) equals the label; an answer that is degenerate (`canary.degenerate`: cut
at max_tokens, repeating, or echoing the question) is wrong whatever its last number. The chat variant scores
`content` only.

Questions are asked in waves of `concurrency` requests at once (vLLM answers a wave as one batch, in
about the time of one question), and the answers are fed to the sequential probability ratio test of `canary.sprt` in
question order; once it decides, the requests still in flight are cancelled. The module docstring of
`canary.sprt` says why its error rates hold whatever the concurrency.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from glm_operator.canary.client import OpenAIClient
from glm_operator.canary.degenerate import degenerate
from glm_operator.canary.gsm8k_data import Item
from glm_operator.canary.progress import CheckProgress, Progress, emit
from glm_operator.canary.results import CheckResult
from glm_operator.canary.sprt import Sprt

STOP = ["Question", "Assistant:"]
Question = TypeVar("Question")
Outcome = TypeVar("Outcome")
Fed = TypeVar("Fed", contravariant=True)
CHAT_SUFFIX = "\nGive the final answer as a number."
_INTEGER = re.compile(r"-?\d[\d,]*")


def few_shot_head(shots: list[Item]) -> str:
    """The worked examples every question of a check is asked after."""
    return "".join(f"Question: {s.question}\nAnswer: {s.answer}\n\n" for s in shots[:5])


def question_prompt(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def few_shot_prompt(shots: list[Item], question: str) -> str:
    return few_shot_head(shots) + question_prompt(question)


def last_integer(text: str) -> str | None:
    found = _INTEGER.findall(text or "")
    return found[-1].replace(",", "") if found else None


def right(text: str, finish_reason: object, item: Item) -> bool:
    """vLLM's scoring (the last integer is the label), and the answer not degenerate (`canary.degenerate`)."""
    return last_integer(text) == item.label and degenerate(text, finish_reason, item.question) is None


@dataclass(frozen=True)
class Gsm8kRun:
    """How one GSM8K check is asked and decided."""

    threshold: float
    max_questions: int
    expected: float = 0.93
    concurrency: int = 64
    chat: bool = False


async def run_gsm8k(
    client: OpenAIClient,
    questions: list[Item],
    shots: list[Item],
    run: Gsm8kRun,
    progress: Progress | None = None,
) -> list[CheckResult]:
    results = [await _run(client, questions, shots, replace(run, chat=False), progress)]
    if run.chat:
        results.append(await _run(client, questions, shots, run, progress))
    return results


async def asker(client: OpenAIClient, shots: list[Item], chat: bool) -> Callable[[Item], Coroutine[Any, Any, bool]]:
    """How one question is asked and scored; what every request of the check shares is encoded here, once."""
    if chat:
        chat_template = await client.chat_template(max_tokens=512)

        async def ask_chat(item: Item) -> bool:
            choice = await client.chat_with(chat_template, item.question + CHAT_SUFFIX)
            return right(str(choice["message"].get("content") or ""), choice.get("finish_reason"), item)

        return ask_chat
    template = await client.completion_template(few_shot_head(shots), max_tokens=256, stop=STOP)

    async def ask(item: Item) -> bool:
        choice = await client.complete_with(template, question_prompt(item.question))
        return right(str(choice.get("text") or ""), choice.get("finish_reason"), item)

    return ask


class Decision(Protocol[Fed]):
    """What `decide` feeds answers to, in question order: a verdict once it is certain (`SprtState`, `Tally`)."""

    @property
    def verdict(self) -> bool | None: ...

    def feed(self, outcomes: Iterable[Fed], /) -> int:
        """Take answers in order until the verdict is certain; returns how many were taken."""
        ...


async def decide(
    ask: Callable[[Question], Coroutine[Any, Any, Outcome]],
    items: list[Question],
    state: Decision[Outcome],
    concurrency: int,
    on_answer: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Ask `items` in waves of `concurrency` until `state` decides; returns how many were sent.

    Each wave goes out at once (vLLM batches it) and its answers are fed in question order as they
    arrive; the next wave goes out only when this one is fed. Waiting for the slowest answer of a wave
    costs little, as a batch finishes together, and bounds what is wasted once the test decides to the
    rest of one wave, whose requests are cancelled.
    """
    pending: dict[asyncio.Task[Outcome], int] = {}
    finished: asyncio.Queue[asyncio.Task[Outcome]] = asyncio.Queue()  # one wake-up per answer, not one per task
    sent = 0
    try:
        while state.verdict is None and sent < len(items):
            first, sent = sent, min(len(items), sent + max(1, concurrency))
            for i in range(first, sent):
                task = asyncio.create_task(ask(items[i]))
                task.add_done_callback(finished.put_nowait)
                pending[task] = i
            answered: dict[int, Outcome] = {}
            fed = first
            while pending and state.verdict is None:
                task = await finished.get()
                answered[pending.pop(task)] = task.result()
                ready: list[Outcome] = []
                while fed + len(ready) in answered:
                    ready.append(answered.pop(fed + len(ready)))
                if ready:
                    fed += state.feed(ready)
                    if on_answer is not None:
                        await on_answer()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return sent


async def _run(
    client: OpenAIClient,
    questions: list[Item],
    shots: list[Item],
    run: Gsm8kRun,
    progress: Progress | None,
) -> CheckResult:
    name = "gsm8k-chat" if run.chat else "gsm8k"
    state = Sprt(run.threshold, run.expected, run.max_questions).start()
    items = questions[: run.max_questions]

    async def report(done: bool = False) -> None:
        await emit(progress, CheckProgress(name, state.asked, len(items), state.correct, done))

    await report()
    sent = await decide(await asker(client, shots, run.chat), items, state, run.concurrency, report)
    passed = state.finish()
    await report(done=True)
    test = state.test
    how = "decided early" if state.early else f"all {state.asked} asked"
    return CheckResult(
        name=name,
        passed=passed,
        value=state.correct / state.asked if state.asked else 0.0,
        threshold=run.threshold,
        detail=f"{state.correct}/{state.asked} correct, SPRT {test.p0:.2f} vs {test.p1:.2f} "
        f"(alpha {test.alpha:g}, beta {test.beta:g}), {how}; {sent} sent, {run.concurrency} at a time",
        asked=state.asked,
    )
