"""The outcome of one canary check, as shown in status, events, metrics and `glmctl canary`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# The normal quantile of a two-sided 95 % interval.
Z_95 = 1.959963984540054


def wilson_interval(right: int, asked: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a share of right answers (right of asked): unlike the plain normal
    interval it stays inside [0, 1] and is not zero-wide at 0/n or n/n, which a canary of 20 questions hits."""
    if asked <= 0 or not 0 <= right <= asked:
        raise ValueError(f"wilson_interval: {right} right of {asked} asked: needs 0 <= right <= asked and asked > 0")
    share, z2 = right / asked, z * z
    centre = (share + z2 / (2 * asked)) / (1 + z2 / asked)
    half = z / (1 + z2 / asked) * math.sqrt(share * (1 - share) / asked + z2 / (4 * asked * asked))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class CheckResult:
    name: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: str
    # How many answers `value` is the share of, where it is a share of right answers (gsm8k, smoke, copy).
    asked: int | None = None

    def interval(self) -> tuple[float, float] | None:
        """The 95 % Wilson interval of `value` as a share of `asked` answers; None without a count."""
        if self.asked is None or self.value is None or self.asked <= 0:
            return None
        return wilson_interval(round(self.value * self.asked), self.asked)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        figure = "" if self.value is None else f" {self.value:.3g}"
        bound = "" if self.threshold is None else f" (threshold {self.threshold:.3g})"
        return f"{self.name}{figure}{bound}: {self.detail}"


@dataclass
class SuiteResult:
    checks: list[CheckResult] = field(default_factory=list)
    # Suites left out without being asked for by name, each with the reason (shown by `glmctl canary`).
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [c.as_dict() for c in self.checks], "skipped": dict(self.skipped)}
