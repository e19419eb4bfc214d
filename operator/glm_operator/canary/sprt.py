"""The GSM8K decision rule: Wald's sequential probability ratio test between the threshold and the expected level.

Each answer is a Bernoulli trial. H0: accuracy = p0, the threshold (`gsm8kThreshold`, 0.82 for GLM-5.x);
H1: accuracy = p1, the level a healthy deployment reaches (`gsm8kExpected`, 0.93). After each answer the
log-likelihood ratio log L(p1)/L(p0) moves up by log(p1/p0) on a right answer and down by
log((1-p1)/(1-p0)) on a wrong one; the test passes at log((1-beta)/alpha), fails at log(beta/(1-alpha)),
and judges by the ratio's sign (the likelier hypothesis) when `max_questions` run out.

Error rates, chosen for what each mistake costs:
- alpha = 5 %: the chance of passing a model exactly at the threshold. The threshold already sits 8 points
  under vLLM CI's own level; a really broken model is far below it (a 75 % model passes 0.25 % of the time,
  a 0 % one never), and a re-check sees it again.
- beta = 0.1 %: the chance of failing a model at its expected level. A false failure keeps a good pod out
  of the Service (or takes a Ready one out), so it is held ten times under the 1 % target; truncation at
  200 questions raises the exact rate to 0.5 % (computed exactly by `bench/canary_time_to_ready.py`).

With these, a 0 % model fails on its 8th answer and a 93 % one passes after 59 on average; a fixed
evaluation needs all 200. The rule is fully sequential in question order: answers asked concurrently are
fed in the order the questions were listed, and the test stops at the first answer that crosses a
boundary, ignoring answers beyond it. Its decision and its count are therefore those of asking one
question at a time, whatever the concurrency or the order answers arrive in, so the error rates above
hold across waves: a wave that would overshoot a boundary cannot change the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

ALPHA = 0.05  # passing a model at the threshold
BETA = 0.001  # failing a model at its expected level
EDGE = 0.001  # accuracies kept inside (0, 1) so that every log is finite


def hypotheses(threshold: float, expected: float) -> tuple[float, float]:
    """(p0, p1) inside (0, 1) with p0 < p1; an expected level at or under the threshold is moved halfway up."""
    p0 = min(max(threshold, EDGE), 1 - 4 * EDGE)
    p1 = expected if p0 < expected < 1 else p0 + (1 - p0) / 2
    return p0, min(max(p1, p0 + EDGE), 1 - EDGE)


@dataclass(frozen=True)
class Sprt:
    """The boundaries and steps of one test; `start()` gives a fresh state."""

    threshold: float
    expected: float
    max_questions: int
    alpha: float = ALPHA
    beta: float = BETA

    # Computed once per test, not once per answer: a wave feeds up to 256 answers in a burst.
    @cached_property
    def p0(self) -> float:
        return hypotheses(self.threshold, self.expected)[0]

    @cached_property
    def p1(self) -> float:
        return hypotheses(self.threshold, self.expected)[1]

    @cached_property
    def upper(self) -> float:
        return math.log((1 - self.beta) / self.alpha)

    @cached_property
    def lower(self) -> float:
        return math.log(self.beta / (1 - self.alpha))

    @cached_property
    def _steps(self) -> tuple[float, float]:
        p0, p1 = self.p0, self.p1
        return math.log((1 - p1) / (1 - p0)), math.log(p1 / p0)

    def step(self, correct: bool) -> float:
        return self._steps[correct]

    def start(self) -> SprtState:
        return SprtState(self)


@dataclass
class SprtState:
    """Answers fed so far, in question order, and the verdict once there is one."""

    test: Sprt
    correct: int = 0
    asked: int = 0
    llr: float = 0.0
    verdict: bool | None = field(default=None)

    @property
    def early(self) -> bool:
        """Whether a boundary was crossed (else the verdict, if any, came from running out of questions)."""
        return self.verdict is not None and (self.llr >= self.test.upper or self.llr <= self.test.lower)

    def feed(self, outcomes: Iterable[bool]) -> int:
        """Add answers in question order until the test decides; returns how many were used."""
        used = 0
        for ok in outcomes:
            if self.verdict is not None:
                break
            used += 1
            self.asked += 1
            self.correct += int(ok)
            self.llr += self.test.step(ok)
            if self.llr >= self.test.upper:
                self.verdict = True
            elif self.llr <= self.test.lower:
                self.verdict = False
            elif self.asked >= self.test.max_questions:
                self.verdict = self.llr >= 0
        return used

    def finish(self) -> bool:
        """The verdict; questions ran out before the cap (a short list): judged by the ratio's sign."""
        if self.verdict is None:
            self.verdict = self.llr >= 0
        return self.verdict
