"""What the operator knows of its objects without asking the API server: the newest copy of each, from its watches
and from its own writes.

A refresh used to GET its GLMDeployment and LIST every owned kind on each owned object's event, about 2.5 times per
deployment while its objects come up, and each canary run GET the GLMDeployment again (bench/RESULTS.md, reconcile
scale). The watch streams kopf keeps open already deliver every change to those objects; this store keeps the newest
copy of each, and the operator's own writes (an apply or a status patch answers with the object as stored) are
recorded at once, so a refresh that follows a write reads it back without waiting for its watch event. A deletion
is remembered with its version for a while, so a write's answer that arrives after its object's deletion was seen
(a thread that applied it, then was slow to record) does not bring the copy back.

Newer wins. Two copies of one object are ordered by `metadata.resourceVersion`, which the API server guarantees
comparable as integers within a resource type since Kubernetes 1.35 (KEP-5504, "Comparable resource versions"; the
API concepts page, "Resource versions"): a late watch event never replaces the answer of a later write. A version
that is not an integer is not compared, and the copy recorded last wins. A deletion removes the copy unless the
stored one is newer than the deleted object (the operator already re-created it).

Copies are kept as compact JSON without `managedFields`, which is about a fifth of the memory of the parsed objects
at 1,000 deployments, and parsed when read: each reader gets an object of its own, which it may change.

Pure: no kopf, no client. Writes come from kopf's event loop (the watches) and from the threads the refreshes run
in, so every method holds one lock for a dictionary update.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from glm_operator.api.constants import LABEL_DEPLOYMENT

ObjectKey = tuple[str, str, str]  # namespace, kind, name
TOMBSTONES = 10_000  # deletions remembered (their versions), so a write's late answer cannot bring a copy back
OwnerKey = tuple[str, str]  # namespace, GLMDeployment name


def resource_version(obj: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion as an integer, or None where it is missing or not one."""
    value = (obj.get("metadata") or {}).get("resourceVersion")
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _newer_or_unordered(new: int | None, old: int | None) -> bool:
    return new is None or old is None or new >= old


@dataclass(frozen=True, slots=True)
class _Copy:
    version: int | None
    owner: str | None  # the GLMDeployment it is labelled for, if any
    data: bytes


def _compact(obj: Mapping[str, Any]) -> bytes:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return json.dumps({**obj, "metadata": meta}, separators=(",", ":"), default=_plain).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):  # kopf's body views are Mappings, not dicts
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


class ObservedObjects:
    """The newest known copy of every object recorded, by namespace, kind and name."""

    def __init__(self, owned_kinds: Iterable[str]) -> None:
        """`owned_kinds`: the kinds whose objects belong to the GLMDeployment named by their deployment label."""
        self._owned_kinds = frozenset(owned_kinds)
        self._lock = threading.Lock()
        self._copies: dict[ObjectKey, _Copy] = {}
        self._owned: dict[OwnerKey, set[ObjectKey]] = {}
        self._deleted: OrderedDict[ObjectKey, int] = OrderedDict()  # the version each recent deletion was seen at

    def __len__(self) -> int:
        return len(self._copies)

    def record(self, obj: Mapping[str, Any], kind: str | None = None) -> bool:
        """Keep this copy unless a newer one is known; returns whether it was kept. `kind` where the body has none."""
        key = self._key(obj, kind)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        owner = labels.get(LABEL_DEPLOYMENT) if key[1] in self._owned_kinds else None
        new = _Copy(resource_version(obj), owner if isinstance(owner, str) else None, _compact(obj))
        with self._lock:
            old = self._copies.get(key)
            if old is not None and not _newer_or_unordered(new.version, old.version):
                return False
            gone = self._deleted.get(key)
            if gone is not None and new.version is not None and new.version <= gone:
                return False  # an answer that arrived after its object's deletion was seen
            self._deleted.pop(key, None)
            if old is not None and old.owner != new.owner:
                self._unlink(key, old.owner)
            self._copies[key] = new
            if new.owner is not None:
                self._owned.setdefault((key[0], new.owner), set()).add(key)
            return True

    def forget(self, namespace: str, kind: str, name: str, version: str | int | None = None) -> bool:
        """Drop the copy of an object that was deleted (at `version`, when known) unless the copy is newer."""
        key = (namespace, kind, name)
        deleted = int(version) if isinstance(version, int) or (isinstance(version, str) and version.isdigit()) else None
        with self._lock:
            old = self._copies.get(key)
            if deleted is not None and (old is None or old.version is None or old.version <= deleted):
                self._deleted[key] = max(deleted, self._deleted.get(key, deleted))
                self._deleted.move_to_end(key)
                while len(self._deleted) > TOMBSTONES:
                    self._deleted.popitem(last=False)
            if old is None:
                return False
            if deleted is not None and old.version is not None and old.version > deleted:
                return False  # re-created since
            del self._copies[key]
            self._unlink(key, old.owner)
            return True

    def forget_object(self, obj: Mapping[str, Any], kind: str | None = None) -> bool:
        """`forget` for a deleted object as a watch delivers it."""
        namespace, kind_, name = self._key(obj, kind)
        return self.forget(namespace, kind_, name, (obj.get("metadata") or {}).get("resourceVersion"))

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._copies.get((namespace, kind, name))
        return None if found is None else _parse(found.data)

    def owned_by(self, namespace: str, deployment: str) -> tuple[dict[str, Any], ...]:
        """Every object labelled for this GLMDeployment, ordered by kind and name."""
        with self._lock:
            keys = sorted(self._owned.get((namespace, deployment), ()))
            data = [self._copies[k].data for k in keys]
        return tuple(_parse(d) for d in data)

    def names(self, namespace: str, kind: str) -> dict[str, int | None]:
        """Name -> resourceVersion of every copy of this kind in this namespace (what a re-list is compared with)."""
        with self._lock:
            return {k[2]: c.version for k, c in self._copies.items() if k[0] == namespace and k[1] == kind}

    def namespaces(self, kind: str | None = None) -> set[str]:
        """The namespaces holding a copy (of this kind, if given)."""
        with self._lock:
            return {k[0] for k in self._copies if kind is None or k[1] == kind}

    def owner_of(self, namespace: str, kind: str, name: str) -> str | None:
        with self._lock:
            found = self._copies.get((namespace, kind, name))
        return None if found is None else found.owner

    def size_bytes(self) -> int:
        """The bytes the copies take (their JSON), for the memory benchmark."""
        with self._lock:
            return sum(len(c.data) for c in self._copies.values())

    def _unlink(self, key: ObjectKey, owner: str | None) -> None:
        if owner is None:
            return
        keys = self._owned.get((key[0], owner))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._owned[(key[0], owner)]

    @staticmethod
    def _key(obj: Mapping[str, Any], kind: str | None) -> ObjectKey:
        meta = obj.get("metadata") or {}
        found = kind or obj.get("kind")
        if not found or not meta.get("name"):
            raise ValueError("an object needs a kind and metadata.name to be recorded")
        return (str(meta.get("namespace") or ""), str(found), str(meta["name"]))


def _parse(data: bytes) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(data)
    return parsed


def stale_after_relist(
    known: Mapping[str, int | None], listed: Iterable[Mapping[str, Any]], list_version: int | None
) -> list[str]:
    """Names known here that a fresh LIST (at `list_version`) no longer has: deleted while no watch saw it.

    A copy newer than the list (recorded from a write after the LIST was served) is not stale; without comparable
    versions, every copy the list lacks is."""
    present = {str((o.get("metadata") or {}).get("name")) for o in listed}
    return sorted(
        name
        for name, version in known.items()
        if name not in present and (version is None or list_version is None or version <= list_version)
    )
