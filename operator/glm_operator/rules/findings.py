"""What a rule reports: a finding, and the change that would repair it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "remediated"]


@dataclass(frozen=True)
class Change:
    """One repair: set an environment variable of the vLLM container, or a spec field by path."""

    path: str  # "spec.engine.env" for env changes, else a dotted spec path like "spec.engine.vllmVersion"
    value: Any
    env_name: str | None = None

    def describe(self) -> str:
        if self.env_name:
            return f"Set {self.env_name}={self.value}"
        return f"Set {self.path}={self.value}"


@dataclass(frozen=True)
class Finding:
    """One problem with a spec, in the words a person acts on."""

    rule: str
    severity: Severity
    field: str
    value: str
    problem: str
    fix: str
    upstream: str | None = None
    changes: tuple[Change, ...] = ()
    # A change is blocked when it would override a value the user set explicitly.
    blocked_by: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        ref = f"rule {self.rule}, {self.upstream}" if self.upstream else f"rule {self.rule}"
        fix = self.fix.rstrip(".")
        return f"{self.field}: {self.value}: {self.problem} ({ref}). {fix}."

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "field": self.field,
            "message": self.message,
            "upstream": self.upstream,
        }
