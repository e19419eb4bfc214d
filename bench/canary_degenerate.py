"""The degenerate-answer rule against a healthy model's answers: what it flags and the false-failure rate it gives.

Two measurements side by side, in one run:
1. The rule (`canary.degenerate`) over every GSM8K reference answer (test and train), the text a healthy model
   writes, at the rule's own settings and at looser ones, to show the margin: how many it would call degenerate.
2. The exact false-failure rate of the GSM8K sequential test for a 93 % model without the rule and with it: a
   right answer flagged becomes a wrong one, so a share q flagged turns 93 % into 93 % x (1 - q). Beside it, the
   rate if the rule misfired on 1 % and 5 % of right answers, to show what the margin protects.
3. Timed runs of the GSM8K check against `glmctl sim --accuracy 0.93` on fresh random draws of questions, with the
   rule as the check runs it: false failures out of `--runs`.

Target (issue 30): the false-failure rate of a 93 % model stays within its 1 % target. Exit 1 if missed.

    PYTHONPATH=operator .venv/bin/python bench/canary_degenerate.py [--runs 30] [--gsm8k DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from canary_time_to_ready import GSM8K, Sim, draw, exact, sequential_run

import glm_operator.canary.degenerate as rule
from glm_operator.canary.gsm8k_data import Item, parse_jsonl
from glm_operator.canary.sprt import Sprt

THRESHOLD, EXPECTED, TARGET = 0.82, 0.93, 0.01
SETTINGS = [(4, 24, "the rule"), (3, 12, "twice as eager"), (3, 8, "three times as eager")]


def flagged(items: list[Item], repeats: int, words: int) -> list[tuple[Item, str]]:
    """The answers the rule with these settings calls degenerate, each with why."""
    saved = rule.MIN_REPEATS, rule.MIN_RUN_WORDS
    rule.MIN_REPEATS, rule.MIN_RUN_WORDS = repeats, words
    try:
        found = ((item, rule.degenerate(" " + item.answer, "stop", item.question)) for item in items)
        return [(item, why) for item, why in found if why is not None]
    finally:
        rule.MIN_REPEATS, rule.MIN_RUN_WORDS = saved


async def timed(args: argparse.Namespace, questions: list[Item], shots: list[Item]) -> tuple[int, int]:
    """The draws of canary_time_to_ready's repeated runs (seeds 5000 on), at 20 ms a request."""
    sim = Sim(Path(args.gsm8k), 20, EXPECTED)
    failures = 0
    try:
        model = await sim.ready()
        for i in range(args.runs):
            run = await sequential_run(sim, model, draw(questions, 5000 + i), shots, 64)
            failures += not run.passed
    finally:
        sim.stop()
    return failures, args.runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gsm8k", default=str(GSM8K))
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    data = Path(args.gsm8k)
    test, train = parse_jsonl((data / "test.jsonl").read_text()), parse_jsonl((data / "train.jsonl").read_text())
    items = test + train
    print(f"1. GSM8K reference answers called degenerate, of {len(items)}:")
    for repeats, words, name in SETTINGS:
        hits = flagged(items, repeats, words)
        example = f", e.g. {hits[0][1]}" if hits else ""
        print(f"   {repeats} repeats over {words} words ({name}): {len(hits)}{example}")
    share = len(flagged(items, rule.MIN_REPEATS, rule.MIN_RUN_WORDS)) / len(items)
    test_rule = Sprt(THRESHOLD, EXPECTED, 200)
    print("2. Exact false-failure rate of the GSM8K check for a 93 % model:")
    without = 1 - exact(test_rule, EXPECTED).p_pass
    with_rule = 1 - exact(test_rule, EXPECTED * (1 - share)).p_pass
    print(f"   without the rule {without:.2%}; with it (flags {share:.2%} of right answers) {with_rule:.2%}")
    for misfire in (0.01, 0.05):
        rate = 1 - exact(test_rule, EXPECTED * (1 - misfire)).p_pass
        print(f"   if it flagged {misfire:.0%} of right answers: {rate:.2%}")
    failures, runs = asyncio.run(timed(args, test, train[:5]))
    print(f"3. GSM8K check against glmctl sim at 93 %, the rule on: {failures} false failures of {runs} runs")
    held = with_rule <= TARGET and failures <= max(1, runs * TARGET)
    print(f"target: false failures of a 93 % model <= {TARGET:.0%}: {'held' if held else 'MISSED'}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
