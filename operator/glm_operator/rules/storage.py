"""Checks of spec.modelCache: one mode at a time, room for the checkpoint, a claim every pod can mount."""

from __future__ import annotations

import math
import re

from glm_operator.api.storage import AccessMode, CacheMode, size_for
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding, Severity

_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_WRITABLE = {AccessMode.READ_WRITE_ONCE, AccessMode.READ_WRITE_MANY, AccessMode.READ_WRITE_ONCE_POD}
_MODE_FIELDS = {
    CacheMode.CLAIM: "persistentVolumeClaim",
    CacheMode.SHARED: "shared",
    CacheMode.NODE: "nodeCache",
}


def quantity_bytes(text: str) -> float:
    """Bytes of a storage quantity as the schema admits it (`800Gi`, `1.5T`, `1000000`)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or ""]


def _f(rule: str, severity: Severity, field: str, value: object, problem: str, fix: str) -> Finding:
    return Finding(rule=f"storage/{rule}", severity=severity, field=field, value=str(value), problem=problem, fix=fix)


def one_mode(ctx: Context) -> list[Finding]:
    """At most one of persistentVolumeClaim, shared and nodeCache is set."""
    modes = ctx.spec.model_cache.modes()
    if len(modes) < 2:
        return []
    named = [_MODE_FIELDS[m] for m in modes]
    return [
        _f(
            "one-mode",
            "error",
            "spec.modelCache",
            ", ".join(named),
            f"sets {len(named)} cache modes at once; the weights can live in one place only",
            f"Keep one of {', '.join(named)} and remove the other(s)",
        )
    ]


def fits_checkpoint(ctx: Context) -> list[Finding]:
    """The shared claim (error) or the emptyDir's limit (warning) holds the catalogued checkpoint."""
    if ctx.model is None:
        return []
    cache = ctx.spec.model_cache
    weight = ctx.model.model.weight_gb
    need = size_for(weight)
    severity: Severity
    if cache.mode is CacheMode.SHARED and cache.shared is not None and cache.shared.size:
        size, field, severity = cache.shared.size, "spec.modelCache.shared.size", "error"
        effect = "the download Job fills the claim and fails before the checkpoint is complete"
    elif cache.mode is CacheMode.EMPTY_DIR and cache.size_limit:
        size, field, severity = cache.size_limit, "spec.modelCache.sizeLimit", "warning"
        effect = "the kubelet evicts the pod once the download passes the emptyDir's limit"
    else:
        return []
    if quantity_bytes(size) >= weight * 1e9:
        return []
    return [
        _f(
            "size",
            severity,
            field,
            size,
            f"smaller than {ctx.model.model.name}'s {weight:g} GB checkpoint: {effect}",
            f"Set at least {need} (checkpoint plus 10% headroom), or leave it unset to have it sized from the catalog",
        )
    ]


def _pods(ctx: Context) -> int:
    per_node = ctx.spec.accelerator.gpus_per_node or ctx.accelerator.gpus_per_node
    return ctx.spec.replicas * max(1, math.ceil(ctx.spec.parallelism.gpus() / per_node))


def shared_access(ctx: Context) -> list[Finding]:
    """The shared claim is writable by the download Job, and mountable by every serving pod."""
    shared = ctx.spec.model_cache.shared
    if shared is None:
        return []
    modes = set(shared.access_modes)
    shown = ", ".join(m.value for m in shared.access_modes)
    field = "spec.modelCache.shared.accessModes"
    if not modes & _WRITABLE:
        return [
            _f(
                "access-modes",
                "error",
                field,
                shown,
                "no writable access mode: the download Job cannot fill the claim",
                "Add ReadWriteMany (or ReadWriteOnce for one node)",
            )
        ]
    pods = _pods(ctx)
    if pods > 1 and AccessMode.READ_WRITE_MANY not in modes and AccessMode.READ_ONLY_MANY not in modes:
        return [
            _f(
                "access-modes",
                "warning",
                field,
                shown,
                f"{pods} pods mount the claim, but a ReadWriteOnce volume attaches to one node (ReadWriteOncePod to "
                "one pod): pods scheduled elsewhere wait for the volume forever",
                "Use ReadWriteMany with a storage class that provides it, or nodeCache",
            )
        ]
    return []


def size_limit_unused(ctx: Context) -> list[Finding]:
    """sizeLimit sizes the emptyDir only; with shared or nodeCache it does nothing."""
    cache = ctx.spec.model_cache
    if cache.size_limit is None or cache.mode not in (CacheMode.SHARED, CacheMode.NODE):
        return []  # with persistentVolumeClaim it is tolerated: earlier CRDs defaulted it to 1Ti on every object
    other = "shared.size" if cache.mode is CacheMode.SHARED else "the node's disk"
    return [
        _f(
            "size-limit",
            "warning",
            "spec.modelCache.sizeLimit",
            cache.size_limit,
            f"sizes the emptyDir, which {_MODE_FIELDS[cache.mode]} replaces: it is ignored",
            f"Remove it; the room for the weights is {other}",
        )
    ]


STORAGE_CHECKS = (one_mode, fits_checkpoint, shared_access, size_limit_unused)
