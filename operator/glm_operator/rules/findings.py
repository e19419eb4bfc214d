"""What a rule reports: a finding, and the change that would repair it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "remediated"]
MAX_VALUE_CHARS = 200
"""A value longer than this is cut in messages, with a marker: a 5 MB model name is not echoed back."""
_MARKER_ROOM = 64  # a text already cut (value plus marker) is not cut again


def clip(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """`text` as a message shows it: cut at `limit` characters with a marker saying how long it was."""
    if len(text) <= limit + _MARKER_ROOM:
        return text
    return f"{text[:limit]}... (truncated, {len(text)} characters in all)"


def shown_json(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as JSON for a message, encoded only as far as `limit` (an alias-expanded list is never built whole)."""
    if isinstance(value, str):
        if len(value) <= limit + _MARKER_ROOM:
            return json.dumps(value)
        return f"{json.dumps(value[:limit])}... (truncated, {len(value)} characters in all)"
    taken: list[str] = []
    total = 0
    for chunk in json.JSONEncoder(default=repr).iterencode(value):
        taken.append(chunk)
        total += len(chunk)
        if total > limit:
            return "".join(taken)[:limit] + "... (truncated)"
    return "".join(taken)


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
        return f"{clip(self.field)}: {clip(self.value)}: {self.problem} ({ref}). {fix}."

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "field": self.field,
            "message": self.message,
            "upstream": self.upstream,
        }
