"""Standard status conditions: set one without disturbing the others or faking a transition."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from glm_operator.api.v1alpha1 import Condition


def now_rfc3339() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: Literal["True", "False", "Unknown"],
    reason: str,
    message: str,
    generation: int | None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """Return the conditions with `type_` set; lastTransitionTime moves only when status changes."""
    existing = [dict(c) for c in (conditions or [])]
    previous = next((c for c in existing if c.get("type") == type_), None)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        last_transition_time=since or now or now_rfc3339(),
    ).model_dump(by_alias=True, exclude_none=True)
    others = [c for c in existing if c.get("type") != type_]
    return [*others, new] if previous is None else [new if c is previous else c for c in existing]
