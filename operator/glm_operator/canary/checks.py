"""The short canaries: smoke arithmetic, null-content rate, copy fidelity, draft acceptance, log-likelihood."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from glm_operator.canary.client import OpenAIClient, reasoning_of
from glm_operator.canary.degenerate import degenerate
from glm_operator.canary.gsm8k import last_integer
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


def content_of(choice: dict[str, Any]) -> str:
    return str(choice["message"].get("content") or "")


def smoke_fault(choice: dict[str, Any], question: str, expected: str) -> str | None:
    """Why a smoke answer is wrong, or None: the last number must be right and the answer not degenerate."""
    content = content_of(choice)
    why = degenerate(content, choice.get("finish_reason"), question)
    if why is None and content.strip() and last_integer(content) == expected:
        return None
    return f"{question!r} -> {content[:40]!r}" + (f" ({why})" if why else "")


async def smoke(client: OpenAIClient, samples: int) -> CheckResult:
    wrong = []
    for question, expected in SMOKE[:samples]:
        fault = smoke_fault(await client.chat(question, max_tokens=512), question, expected)
        if fault is not None:
            wrong.append(fault)
    asked = min(samples, len(SMOKE))
    ok = asked - len(wrong)
    return CheckResult(
        "smoke", not wrong, ok / asked, 1.0, f"{ok}/{asked} correct" + (f"; e.g. {wrong[0]}" if wrong else "")
    )


def null_kind(choice: dict[str, Any], question: str) -> str | None:
    """ "null" for empty content with non-empty reasoning, why it is degenerate for a degenerate answer, else None."""
    content = content_of(choice)
    if not content.strip() and reasoning_of(choice["message"]).strip():
        return "null"
    return degenerate(content, choice.get("finish_reason"), question)


async def null_content(client: OpenAIClient, samples: int, max_rate: float) -> CheckResult:
    empty, degenerated = 0, []
    for i in range(samples):
        question = NULL_PROMPTS[i % len(NULL_PROMPTS)]
        kind = null_kind(await client.chat(question, max_tokens=512), question)
        if kind == "null":
            empty += 1
        elif kind is not None:
            degenerated.append(f"{question!r}: {kind}")
    rate = empty / samples
    detail = f"{empty}/{samples} answers had empty content and non-empty reasoning"
    if degenerated:
        detail += f"; {len(degenerated)}/{samples} degenerate, e.g. {degenerated[0]}"
    return CheckResult(
        "null-content", rate <= max_rate and len(degenerated) / samples <= max_rate, rate, max_rate, detail
    )


def copy_fault(choice: dict[str, Any]) -> str | None:
    """Why an answer is not an exact copy of the list, or None (line ends and surrounding blanks aside)."""
    content = content_of(choice)
    lines = [line.strip() for line in content.strip().splitlines() if line.strip()]
    why = degenerate(content, choice.get("finish_reason"))
    if why is None and lines == COPY_ITEMS:
        return None
    difference = _first_difference(lines) if lines != COPY_ITEMS else "every item right"
    return f"{difference}" + (f"; {why}" if why else "")


async def copy_fidelity(client: OpenAIClient, trials: int) -> CheckResult:
    exact, first_error = 0, ""
    for _ in range(trials):
        fault = copy_fault(await client.chat(COPY_PROMPT, max_tokens=1024))
        if fault is None:
            exact += 1
        elif not first_error:
            first_error = fault
    return CheckResult(
        "copy",
        exact == trials,
        exact / trials,
        1.0,
        f"{exact}/{trials} exact copies of {len(COPY_ITEMS)} items" + (f"; {first_error}" if first_error else ""),
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
