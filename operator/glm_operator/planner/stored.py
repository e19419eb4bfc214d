"""The edge of a reconcile: a GLMDeployment as the API server stores it, parsed into the model once.

`parse_stored(body)` is the one place the reconcile path reads the raw body. It returns the typed `GLMDeployment`
(spec, metadata and status as fields), or, when the model refuses the body, an `Unparsed` holding the schema
problems, as admission would list them, and the few fields the status still needs. The planner, the rules engine,
storage planning and rendering below it read fields of these, never dict keys of the body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from glm_operator.api import GLMDeployment, structural
from glm_operator.rules.engine import parse
from glm_operator.rules.findings import Finding


@dataclass(frozen=True)
class Unparsed:
    """A stored body the model refuses: the planner says why in Validated and renders nothing."""

    name: str
    generation: int | None
    annotations: dict[str, Any]
    conditions: tuple[dict[str, Any], ...]  # status.conditions as stored, kept through set_condition
    problems: tuple[Finding, ...]


Stored = GLMDeployment | Unparsed


def parse_stored(body: dict[str, Any]) -> Stored:
    """The body as the model, or what is needed to refuse it; parsed as admission parses (null values dropped)."""
    parsed = parse(structural.drop_nulls(body))
    if isinstance(parsed, GLMDeployment):
        return parsed
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    return Unparsed(
        name=meta.get("name", ""),
        generation=meta.get("generation"),
        annotations=meta.get("annotations") or {},
        conditions=tuple(status.get("conditions") or ()),
        problems=tuple(parsed),
    )


def stored_conditions(stored: Stored) -> list[dict[str, Any]]:
    """The conditions as last written, in their stored form (set_condition keeps the ones it does not set)."""
    if isinstance(stored, Unparsed):
        return list(stored.conditions)
    return [c.model_dump(by_alias=True, exclude_unset=True) for c in stored.status.conditions]
