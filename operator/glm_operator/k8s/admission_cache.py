"""The webhooks' memory of their last rule evaluations: one evaluation per object, not one per webhook.

The API server sends every create and update of a GLMDeployment through the mutating webhook and then, unless the
repair changed it, the same object through the validating webhook, a few milliseconds apart. Both ask the rules
engine the same question; the second asks it of an object that differs only in what the API server fills in
between the two calls (uid, creation time, generation), which no rule reads. The answer is kept for a short
while under a digest of the object without those fields and of the catalogs it was judged by, so the second call
reuses it. A repaired object's validating call carries the repair and misses, as it should: it is judged again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from glm_operator.rules.engine import Admission

SERVER_SET = ("uid", "creationTimestamp", "generation", "resourceVersion", "managedFields")
"""metadata the API server sets between the mutating and the validating call of a create; and managedFields, which
no rule reads (left out, it is neither written out nor hashed for each call)."""


class AdmissionCache:
    """The last `size` admissions, each for `ttl_seconds`, each valid only under the catalogs it was judged by."""

    def __init__(self, size: int = 256, ttl_seconds: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.size = size
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._entries: OrderedDict[bytes, tuple[float, object, Admission]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(obj: dict[str, Any]) -> bytes:
        """A digest of the object as the rules see it (without the metadata the API server sets)."""
        metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_SET}
        text = json.dumps({**obj, "metadata": metadata}, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def get(self, key: bytes, catalogs: object) -> Admission | None:
        """The admission kept for `key` under these very catalogs (a catalog re-read is a new object: a miss)."""
        entry = self._entries.get(key)
        if entry is None or entry[1] is not catalogs or self.clock() - entry[0] > self.ttl_seconds:
            self.misses += 1
            return None
        self.hits += 1
        return entry[2]

    def put(self, key: bytes, catalogs: object, admission: Admission) -> None:
        self._entries[key] = (self.clock(), catalogs, admission)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
