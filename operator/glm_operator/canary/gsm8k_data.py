"""GSM8K questions: parsed from JSONL, or generated offline as seeded grade-school problems.

GSM8K (MIT, OpenAI) is not shipped with glmops; it is read from a path, a URL or a ConfigMap. Without
any source the generator keeps the canary working: simple word problems with computed answers, in
GSM8K's format (`... #### <integer>`), that a working model solves and a broken one does not.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Item:
    question: str
    answer: str  # reasoning text ending in "#### <label>"

    @property
    def label(self) -> str:
        return self.answer.rsplit("####", 1)[-1].strip().replace(",", "")


def parse_jsonl(text: str) -> list[Item]:
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            items.append(Item(question=str(row["question"]), answer=str(row["answer"])))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"GSM8K line {n}: expected {{question, answer}} JSON: {err}") from err
    if not items:
        raise ValueError("GSM8K data is empty")
    return items


NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jade"]
# (question template, computation, reasoning template); numbers are a, b, c.
TEMPLATES: list[tuple[str, Callable[[int, int, int], int], str]] = [
    (
        "{n} has {a} apples. {n} buys {b} more and gives {c} to a friend. How many apples does {n} have now?",
        lambda a, b, c: a + b - c,
        "{n} has {a} + {b} - {c} = {r} apples.",
    ),
    (
        "A box holds {a} pencils. How many pencils are in {b} boxes?",
        lambda a, b, c: a * b,
        "{b} boxes hold {a} * {b} = {r} pencils.",
    ),
    (
        "{n} earns ${a} per hour and works {b} hours a day for {c} days. How many dollars does {n} earn?",
        lambda a, b, c: a * b * c,
        "{n} earns {a} * {b} * {c} = {r} dollars.",
    ),
    (
        "A farm has {a} cows and {b} times as many chickens. How many animals are on the farm?",
        lambda a, b, c: a + a * b,
        "There are {a} * {b} = {ab} chickens, so {a} + {ab} = {r} animals.",
    ),
]


def generate(count: int, seed: int = 0) -> list[Item]:
    """Seeded problems with computed answers (deterministic for a seed)."""
    rng = random.Random(seed)
    items = []
    for _ in range(count):
        question, compute, reason = rng.choice(TEMPLATES)
        a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(1, 3)
        values = {"n": rng.choice(NAMES), "a": a, "b": b, "c": c, "ab": a * b, "r": compute(a, b, c)}
        items.append(Item(question.format(**values), f"{reason.format(**values)}\n#### {values['r']}"))
    return items


_SOLVERS: list[tuple[re.Pattern[str], Callable[..., Any]]] = [
    (re.compile(r"has (\d+) apples\. \w+ buys (\d+) more and gives (\d+)"), lambda a, b, c: a + b - c),
    (re.compile(r"box holds (\d+) pencils\. How many pencils are in (\d+) boxes"), lambda a, b: a * b),
    (re.compile(r"earns \$(\d+) per hour and works (\d+) hours a day for (\d+) days"), lambda a, b, c: a * b * c),
    (re.compile(r"has (\d+) cows and (\d+) times as many chickens"), lambda a, b: a + a * b),
]


def solve_generated(question: str) -> int | None:
    """The answer to a generated problem (what a working model computes), or None if not one of ours."""
    for pattern, compute in _SOLVERS:
        match = pattern.search(question)
        if match:
            return int(compute(*(int(g) for g in match.groups())))
    return None
