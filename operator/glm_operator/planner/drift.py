"""Whether an owned object as it stands still carries everything glmops renders for it.

Applying an object that already says what we render changes nothing but costs a request (and every owned object's
watch event used to trigger a full re-apply of all of them). An object needs applying when it is missing, being
deleted, or any field we render is absent or different in the live object. Fields the API server or other
controllers add (defaults, status, their own labels) do not count; a list must keep its length (an added or removed
container or port is drift). Where the API server writes a value in another form than we render it (a quantity
`8` read back as `"8"`), the two compare as equal; any form we do not recognise counts as drift, so the worst
case of a wrong guess is one apply too many, never a drift left in place.
"""

from __future__ import annotations

from typing import Any


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    if live is None or (live.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return not _carries(live, desired)


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _carries(live: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if not isinstance(live, dict):
            return _empty(want) and _empty(live)
        return all(_carries(live.get(key), value) if key in live else _empty(value) for key, value in want.items())
    if isinstance(want, list):
        if not isinstance(live, list):
            return _empty(want) and _empty(live)
        return len(live) == len(want) and all(_carries(a, b) for a, b in zip(live, want, strict=True))
    if isinstance(want, bool) or isinstance(live, bool):
        return want is live
    if isinstance(want, int | float) and isinstance(live, str):  # quantities come back as strings
        return str(want) == live
    return bool(want == live)
