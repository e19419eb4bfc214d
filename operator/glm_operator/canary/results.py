"""The outcome of one canary check, as shown in status, events, metrics and `glmctl canary`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CheckResult:
    name: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: str

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
