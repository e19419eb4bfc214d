"""The short canaries: smoke arithmetic, null-content rate, copy fidelity, draft acceptance, log-likelihood."""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from glm_operator.canary.client import OpenAIClient, reasoning_of
from glm_operator.canary.degenerate import degenerate
from glm_operator.canary.gsm8k import decide, last_integer
from glm_operator.canary.progress import CheckProgress, Progress, emit
from glm_operator.canary.results import CheckResult

SMOKE = [
    ("What is 2+2?", "4"),
    ("What is 3+5?", "8"),
    ("What is 10-7?", "3"),
    ("What is 6*7?", "42"),
    ("What is 9+9?", "18"),
    ("What is 12-4?", "8"),
]
NULL_PROMPTS = [
    "Name a primary colour.",
    "What is the capital of France?",
    "Say hello in Spanish.",
    "How many legs does a spider have?",
    "What is the opposite of cold?",
    "Name a planet.",
    "What colour is the sky on a clear day?",
    "Name a fruit that is yellow.",
    "What is frozen water called?",
    "Which animal says moo?",
    "Name a day of the week.",
    "What is the largest ocean?",
    "How many days are in a week?",
    "Name a musical instrument.",
    "What do bees make?",
    "Which season comes after winter?",
    "Name a shape with three sides.",
    "What is the capital of Japan?",
    "What gas do plants take in?",
    "Name a metal.",
]
# 50 items, about 250 tokens: identifiers a model cannot guess, only copy.
# fmt: off
_COPY_WORDS = (
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
    "kelp", "lotus", "maple", "nickel", "onyx", "pepper", "quartz", "raven", "saffron", "tundra",
    "umber", "violet", "walnut", "xenon", "yarrow", "zephyr", "acorn", "birch", "cobalt", "dune",
    "elm", "flint", "gale", "heron", "iris", "jasper", "kiwi", "lilac", "marsh", "nectar",
    "olive", "plume", "quill", "reed", "sage", "thyme", "ulmus", "vale", "willow", "yew",
)
_COPY_NUMBERS = (
    17, 42, 8, 93, 5, 61, 27, 74, 38, 12, 86, 49, 3, 70, 55, 21, 98, 34, 66, 9, 81, 13, 47, 58, 26,
    90, 7, 39, 72, 15, 64, 31, 88, 2, 53, 19, 77, 44, 10, 95, 36, 68, 23, 51, 84, 6, 29, 62, 41, 97,
)
# fmt: on
COPY_ITEMS = [f"{w}-{n}" for w, n in zip(_COPY_WORDS, _COPY_NUMBERS, strict=True)]
COPY_PROMPT = (
    "Copy the following list exactly, one item per line, in the same order, and write nothing else:\n"
    + "\n".join(COPY_ITEMS)
)
LOGPROB_TEXTS = [
    "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, and the clocks were "
    "striking thirteen.",
    "Water boils at one hundred degrees Celsius at sea level. The Earth orbits the Sun once every year.",
]
SPEC_COUNTERS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")


@dataclass
class Tally:
    """The answers of a fixed-size suite, fed in question order, and its verdict as soon as it is certain.

    Each answer is None (right) or (kind, detail). The suite passes when no kind counts more than `allowed`: it has
    failed once one does, and has passed once even every answer still to come being wrong could not change that."""

    total: int
    allowed: int
    asked: int = 0
    faults: dict[str, list[str]] = field(default_factory=dict)
    verdict: bool | None = None

    def feed(self, outcomes: Iterable[tuple[str, str] | None]) -> int:
        used = 0
        for outcome in outcomes:
            if self.verdict is not None:
                break
            used += 1
            self.asked += 1
            if outcome is not None:
                self.faults.setdefault(outcome[0], []).append(outcome[1])
            worst = max((len(found) for found in self.faults.values()), default=0)
            if worst > self.allowed:
                self.verdict = False
            elif worst + self.total - self.asked <= self.allowed:
                self.verdict = True
        return used

    @property
    def passed(self) -> bool:
        return self.verdict is True

    def count(self, kind: str) -> int:
        return len(self.faults.get(kind, []))

    def first(self, kind: str) -> str:
        return self.faults[kind][0]

    @property
    def right(self) -> int:
        """Answers with no fault of any kind."""
        return self.asked - sum(len(found) for found in self.faults.values())

    def early(self, sent: int) -> str:
        """How the verdict came before every answer, if it did."""
        if self.asked >= self.total:
            return ""
        return f"; decided after {self.asked} of {self.total} ({sent} sent, the rest cancelled)"


async def tallied(
    name: str,
    ask: Callable[[Any], Coroutine[Any, Any, tuple[str, str] | None]],
    items: list[Any],
    tally: Tally,
    concurrency: int,
    progress: Progress | None,
) -> int:
    """`decide` over a tally, reporting the check's figures when it starts, after each answer and once decided."""

    async def report(done: bool = False) -> None:
        await emit(progress, CheckProgress(name, tally.asked, tally.total, tally.right, done))

    await report()
    sent = await decide(ask, items, tally, concurrency, report)
    await report(done=True)
    return sent


def content_of(choice: dict[str, Any]) -> str:
    return str(choice["message"].get("content") or "")


def smoke_fault(choice: dict[str, Any], question: str, expected: str) -> str | None:
    """Why a smoke answer is wrong, or None: the last number must be right and the answer not degenerate."""
    content = content_of(choice)
    why = degenerate(content, choice.get("finish_reason"), question)
    if why is None and content.strip() and last_integer(content) == expected:
        return None
    return f"{question!r} -> {content[:40]!r}" + (f" ({why})" if why else "")


async def smoke(
    client: OpenAIClient, samples: int, concurrency: int = 64, progress: Progress | None = None
) -> CheckResult:
    template = await client.chat_template(max_tokens=512)

    async def ask(item: tuple[str, str]) -> tuple[str, str] | None:
        fault = smoke_fault(await client.chat_with(template, item[0]), *item)
        return None if fault is None else ("wrong", fault)

    questions = SMOKE[:samples]
    tally = Tally(len(questions), allowed=0)
    sent = await tallied("smoke", ask, questions, tally, concurrency, progress)
    ok = tally.asked - tally.count("wrong")
    example = f"; e.g. {tally.first('wrong')}" if tally.count("wrong") else ""
    return CheckResult(
        "smoke",
        tally.passed,
        ok / tally.asked,
        1.0,
        f"{ok}/{tally.asked} correct{example}{tally.early(sent)}",
        asked=tally.asked,
    )


def null_kind(choice: dict[str, Any], question: str) -> str | None:
    """The kind of a null-content answer: "null" (empty content, some reasoning), why it is degenerate, or None."""
    content = content_of(choice)
    if not content.strip() and reasoning_of(choice["message"]).strip():
        return "null"
    return degenerate(content, choice.get("finish_reason"), question)


async def null_content(
    client: OpenAIClient, samples: int, max_rate: float, concurrency: int = 64, progress: Progress | None = None
) -> CheckResult:
    template = await client.chat_template(max_tokens=512)

    async def ask(question: str) -> tuple[str, str] | None:
        kind = null_kind(await client.chat_with(template, question), question)
        if kind is None:
            return None
        return ("null", question) if kind == "null" else ("degenerate", f"{question!r}: {kind}")

    questions = [NULL_PROMPTS[i % len(NULL_PROMPTS)] for i in range(samples)]
    tally = Tally(samples, allowed=math.floor(max_rate * samples + 1e-9))
    sent = await tallied("null-content", ask, questions, tally, concurrency, progress)
    empty, degenerated = tally.count("null"), tally.count("degenerate")
    detail = f"{empty}/{tally.asked} answers had empty content and non-empty reasoning"
    if degenerated:
        detail += f"; {degenerated}/{tally.asked} degenerate, e.g. {tally.first('degenerate')}"
    return CheckResult("null-content", tally.passed, empty / tally.asked, max_rate, detail + tally.early(sent))


def copy_fault(choice: dict[str, Any]) -> str | None:
    """Why an answer is not an exact copy of the list, or None (line ends and surrounding blanks aside)."""
    content = content_of(choice)
    lines = [line.strip() for line in content.strip().splitlines() if line.strip()]
    why = degenerate(content, choice.get("finish_reason"))
    if why is None and lines == COPY_ITEMS:
        return None
    difference = _first_difference(lines) if lines != COPY_ITEMS else "every item right"
    return f"{difference}" + (f"; {why}" if why else "")


async def copy_fidelity(
    client: OpenAIClient, trials: int, concurrency: int = 64, progress: Progress | None = None
) -> CheckResult:
    template = await client.chat_template(max_tokens=1024)

    async def ask(_: int) -> tuple[str, str] | None:
        fault = copy_fault(await client.chat_with(template, COPY_PROMPT))
        return None if fault is None else ("wrong", fault)

    tally = Tally(trials, allowed=0)
    sent = await tallied("copy", ask, list(range(trials)), tally, concurrency, progress)
    exact = tally.asked - tally.count("wrong")
    first_error = f"; {tally.first('wrong')}" if tally.count("wrong") else ""
    return CheckResult(
        "copy",
        tally.passed,
        exact / tally.asked,
        1.0,
        f"{exact}/{tally.asked} exact copies of {len(COPY_ITEMS)} items{first_error}{tally.early(sent)}",
        asked=tally.asked,
    )


def _first_difference(lines: list[str]) -> str:
    for i, expected in enumerate(COPY_ITEMS):
        got = lines[i] if i < len(lines) else None
        if got != expected:
            return f"item {i + 1}: expected {expected!r}, got {got!r} ({len(lines)} lines)"
    return f"{len(lines) - len(COPY_ITEMS)} extra lines (e.g. a loop)"


def spec_counters(metrics_text: str) -> dict[str, float]:
    """Sum of each exact `_total` counter over its label sets (engines, positions)."""
    totals = dict.fromkeys(SPEC_COUNTERS, 0.0)
    per_position: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
            elif sample.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                pos = sample.labels.get("position", "?")
                per_position[pos] = per_position.get(pos, 0.0) + sample.value
    totals.update({f"position {k}": v for k, v in per_position.items()})
    return totals


def acceptance(before: dict[str, float], after: dict[str, float], min_acceptance: float) -> CheckResult:
    drafts = after[SPEC_COUNTERS[0]] - before[SPEC_COUNTERS[0]]
    accepted = after[SPEC_COUNTERS[1]] - before[SPEC_COUNTERS[1]]
    if drafts <= 0:
        return CheckResult(
            "spec-decode",
            False,
            None,
            min_acceptance,
            "no draft tokens counted during the canary traffic (is speculative decoding running?)",
        )
    rate = accepted / drafts
    positions = sorted(k for k in after if k.startswith("position "))
    per_pos = ", ".join(f"{(after[k] - before.get(k, 0.0)) / (drafts / max(len(positions), 1)):.2f}" for k in positions)
    return CheckResult(
        "spec-decode",
        rate >= min_acceptance,
        rate,
        min_acceptance,
        f"{accepted:.0f}/{drafts:.0f} draft tokens accepted" + (f"; per position {per_pos}" if per_pos else ""),
    )


async def logprob(client: OpenAIClient, reference: float, tolerance: float) -> CheckResult:
    values: list[float] = []
    for text in LOGPROB_TEXTS:
        choice = await client.complete(text, max_tokens=1, echo=True, logprobs=0)
        token_logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        values.extend(-float(v) for v in token_logprobs[: len(token_logprobs) - 1] if v is not None)
    if not values:
        return CheckResult("logprob", False, None, reference + tolerance, "no prompt logprobs returned")
    nll = sum(values) / len(values)
    return CheckResult(
        "logprob",
        nll <= reference + tolerance,
        nll,
        reference + tolerance,
        f"mean NLL {nll:.3f} over {len(values)} tokens; reference {reference:.3f}",
    )
