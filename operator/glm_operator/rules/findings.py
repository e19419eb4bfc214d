"""What a rule reports: a finding, and the change that would repair it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "remediated"]
MAX_VALUE_CHARS = 200
"""A value longer than this is cut in messages, with a marker: a 5 MB model name is not echoed back."""
_MARKER_ROOM = 64  # a text already cut (value plus marker) is not cut again


REDACTED = "<redacted>"
_SECRET_WORD = r"(?:api[-_]?key|apikey|token|secret|passw(?:or)?d|credentials?|private[-_]?key|access[-_]?key|auth)"
_SECRET_NAME = rf"(?:[a-z0-9]{{1,32}}[-_.]){{0,8}}{_SECRET_WORD}(?:[-_.][a-z0-9]{{1,32}}){{0,8}}"
"""A name with a secret word as one of its parts: api-key, HF_TOKEN, aws_secret_access_key; not tokenizer."""
_SECRET_FLAG = re.compile(
    rf"(?ai)(?<![\w-])(--?{_SECRET_NAME})(?![\w])"  # a flag naming a secret: --api-key, --hf_token
    r"(=|\s+|\"\s*,\s*\"|'\s*,\s*')"  # =VALUE, a space, or the next item of a JSON or Python list
    r"(?!-)(\\?\"[^\"]{0,256}|'[^']{0,256}|[^\s\"',\]]+)"  # the value, to its closing quote if quoted
)
_SECRET_ENV = re.compile(
    rf"(?ai)(?<![\w-])({_SECRET_NAME})(?![\w])"  # an env name: HF_TOKEN, AWS_SECRET_ACCESS_KEY
    r"(=|\"\s*,\s*\"value\"\s*:\s*\"|'\s*,\s*'value'\s*:\s*')"  # NAME=VALUE, or {"name": NAME, "value": VALUE}
    r"(\\?\"[^\"]{0,256}|'[^']{0,256}|[^\s\"',}]+)"
)
_SECRET_NAME_ONLY = re.compile(rf"(?ai){_SECRET_NAME}")


def is_secret_name(name: object) -> bool:
    """Whether a flag or env name says its value is a secret (HF_TOKEN, --api-key, DB_PASSWORD)."""
    return isinstance(name, str) and _SECRET_NAME_ONLY.fullmatch(name.lstrip("-")) is not None


REDACT_LOOKAHEAD = 320
"""Characters past a cut still read for a secret's name or value, so a cut never keeps half of one."""
REDACT_WINDOW = 4096
"""Text a redaction reads: longer text is cut first (a message shows 200 characters of a value anyway)."""


def redact(text: str, window: int = REDACT_WINDOW) -> str:
    """`text` with the values of secret-like flags and env names replaced by <redacted>.

    `--api-key=V`, `--api_key V`, `"--hf-token", "V"`, `HF_TOKEN=V`, `{"name": "HF_TOKEN", "value": "V"}`: the name
    stays (it says what to fix), the value goes. Bounded: at most `window` characters are read and returned.
    """
    text = text[:window] if len(text) > window else text
    return _SECRET_ENV.sub(rf"\1\2{REDACTED}", _SECRET_FLAG.sub(rf"\1\2{REDACTED}", text))


def clip(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """`text` as a message shows it: secret-like values redacted, cut at `limit` characters with a marker."""
    shown = redact(text)
    if len(text) <= limit + _MARKER_ROOM:
        return shown
    return f"{shown[:limit]}... (truncated, {len(text)} characters in all)"


def shown_json(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as JSON for a message, encoded only as far as `limit` (an alias-expanded list is never built whole)."""
    if isinstance(value, str):
        if len(value) <= limit + _MARKER_ROOM:
            return redact(json.dumps(value))
        return f"{redact(json.dumps(value[:limit]))}... (truncated, {len(value)} characters in all)"
    taken: list[str] = []
    total = 0
    for chunk in json.JSONEncoder(default=repr).iterencode(value):
        taken.append(chunk)
        total += len(chunk)
        if total > limit + REDACT_LOOKAHEAD:
            return redact("".join(taken))[:limit] + "... (truncated)"
    shown = redact("".join(taken))
    return shown if total <= limit else shown[:limit] + "... (truncated)"


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
