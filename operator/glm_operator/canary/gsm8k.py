"""GSM8K canary, compatible with vLLM's own check, decided by a sequential test.

Prompt and scoring follow vLLM's gsm8k_eval: 5-shot "Question: ...\\nAnswer: ..." from the train split
on /v1/completions, temperature 0, max_tokens 256, stop at "Question" and "Assistant:", score = the last
integer of the output (commas stripped) equals the label. The chat variant scores `content` only.

The decision is sequential: after each answer the Wilson score interval of the accuracy is compared
with the threshold, and the test stops as soon as the interval lies wholly above (pass) or below
(fail) it. The interval is a 99.9 % one because it is looked at after every answer: a healthy model at
94 % must not fail on an unlucky first answer. A model at 0 % fails after 3 questions; a perfect one
passes after 50; models near the threshold run to max_questions and are judged on the point estimate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from glm_operator.canary.client import OpenAIClient
from glm_operator.canary.gsm8k_data import Item
from glm_operator.canary.results import CheckResult

Z = 3.290527  # two-sided 99.9 %
STOP = ["Question", "Assistant:"]
_INTEGER = re.compile(r"-?\d[\d,]*")


def few_shot_prompt(shots: list[Item], question: str) -> str:
    head = "".join(f"Question: {s.question}\nAnswer: {s.answer}\n\n" for s in shots[:5])
    return f"{head}Question: {question}\nAnswer:"


def last_integer(text: str) -> str | None:
    found = _INTEGER.findall(text or "")
    return found[-1].replace(",", "") if found else None


def wilson(successes: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + Z**2 / n
    centre = (p + Z**2 / (2 * n)) / denom
    half = Z * math.sqrt(p * (1 - p) / n + Z**2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Sequential:
    threshold: float
    correct: int = 0
    asked: int = 0

    def add(self, ok: bool) -> None:
        self.asked += 1
        self.correct += int(ok)

    def decided(self) -> bool | None:
        low, high = wilson(self.correct, self.asked)
        if low >= self.threshold:
            return True
        if high < self.threshold:
            return False
        return None


async def run_gsm8k(
    client: OpenAIClient,
    questions: list[Item],
    shots: list[Item],
    threshold: float,
    max_questions: int,
    chat: bool = False,
    progress: Callable[[str], Awaitable[None] | None] | None = None,
) -> list[CheckResult]:
    results = [await _run(client, questions, shots, threshold, max_questions, False, progress)]
    if chat:
        results.append(await _run(client, questions, shots, threshold, max_questions, True, progress))
    return results


async def _run(
    client: OpenAIClient,
    questions: list[Item],
    shots: list[Item],
    threshold: float,
    max_questions: int,
    chat: bool,
    progress: Callable[[str], Awaitable[None] | None] | None,
) -> CheckResult:
    test = Sequential(threshold)
    verdict = None
    for item in questions[:max_questions]:
        if chat:
            message = await client.chat(f"{item.question}\nGive the final answer as a number.", max_tokens=512)
            answer = last_integer(str(message.get("content") or ""))
        else:
            choice = await client.complete(few_shot_prompt(shots, item.question), max_tokens=256, stop=STOP)
            answer = last_integer(str(choice.get("text") or ""))
        test.add(answer == item.label)
        if progress:
            await _maybe(progress(f"gsm8k{'-chat' if chat else ''} {test.correct}/{test.asked}"))
        verdict = test.decided()
        if verdict is not None:
            break
    accuracy = test.correct / test.asked if test.asked else 0.0
    low, high = wilson(test.correct, test.asked)
    passed = verdict if verdict is not None else accuracy >= threshold
    how = "decided early" if verdict is not None else f"all {test.asked} asked"
    return CheckResult(
        name="gsm8k-chat" if chat else "gsm8k",
        passed=passed,
        value=accuracy,
        threshold=threshold,
        detail=f"{test.correct}/{test.asked} correct, 99.9% CI [{low:.2f}, {high:.2f}], {how}",
    )


async def _maybe(result: Awaitable[None] | None) -> None:
    if result is not None:
        await result
