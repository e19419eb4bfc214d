"""What a known-issue rule declares: what a person needs to judge and remove it, and the check itself.

Each rule is one `RuleInfo`, declared beside its check in `known_issues.py`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding


@dataclass(frozen=True)
class RuleInfo:
    id: str
    title: str
    upstream: str
    affected: str
    patch: str
    remedy: str
    remove_when: str
    condition: str  # the exact condition the rule checks, in terms of the spec and the facts below
    facts: tuple[str, ...]  # ids of the vllm_facts it reads (docs/rules.md prints their source lines)
    check: Callable[[Context, RuleInfo], list[Finding]]  # the findings for one resolved spec

    def findings(self, ctx: Context) -> list[Finding]:
        return self.check(ctx, self)
