"""Whether this operator replica is the active one, decided as kopf's peering decides it.

kopf pauses a replica while another live peer has a higher priority, or the same priority (then every
replica with it pauses). It stops its own daemons then; the canary gate's tasks are not kopf daemons (they
must not put a finalizer on pods), so they read the same peering object and follow the same rule.
A peer is live until `lastseen + lifetime`. This replica cannot name its own entry (kopf's identity is
internal), but it knows its priority: one entry with it is this replica, a second one is a conflict.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

DEFAULT_LIFETIME_S = 60


def _live(info: Mapping[str, Any], now: datetime.datetime) -> bool:
    seen = info.get("lastseen")
    if not isinstance(seen, str):
        return True  # kopf counts a peer without lastseen as seen now
    try:
        lastseen = datetime.datetime.fromisoformat(seen.replace("Z", "+00:00"))
    except ValueError:
        return True
    if lastseen.tzinfo is None:
        lastseen = lastseen.replace(tzinfo=datetime.UTC)
    try:
        lifetime = datetime.timedelta(seconds=int(info.get("lifetime", DEFAULT_LIFETIME_S)))
    except (TypeError, ValueError):
        lifetime = datetime.timedelta(seconds=DEFAULT_LIFETIME_S)
    return lastseen + lifetime > now


def paused_by_peers(peers: Mapping[str, Any], own_priority: int, now: datetime.datetime) -> bool:
    """True when a live peer outranks this replica, or another live peer shares its priority."""
    same = 0
    for info in peers.values():
        if not isinstance(info, Mapping) or not _live(info, now):
            continue
        try:
            priority = int(info.get("priority", 0))
        except (TypeError, ValueError):
            continue  # not a kopf peer entry
        if priority > own_priority:
            return True
        same += priority == own_priority
    return same > 1
