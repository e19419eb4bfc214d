"""The model storage part of one reconcile: which claim and download Job to keep, and whether serving may start.

Pure. In the shared mode the workload waits for the download Job: until it succeeded the planner applies only the
claim and the Job (`planner/deployment.py` `_downloading`). The Job and the claim are created once and never
re-applied: a Job's pod template and a bound claim's spec are immutable, and a change of model or revision is a new
Job (its name carries their hash), not an edit of the old one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from glm_operator.api import GLMDeployment
from glm_operator.api.storage import CacheMode
from glm_operator.render.plan import Plan
from glm_operator.render.storage import (
    DownloadSettings,
    DownloadState,
    cache_size,
    download_job,
    download_state,
    shared_claim,
)
from glm_operator.render.workloads import labels

CREATE_ONLY_KINDS = frozenset({"Job", "PersistentVolumeClaim"})


@dataclass(frozen=True)
class StoragePlan:
    """The storage objects this spec renders, and the download's state (None: the mode downloads nothing ahead)."""

    objects: tuple[dict[str, Any], ...]
    download: DownloadState | None
    summary: str

    @property
    def waiting(self) -> bool:
        return self.download is not None and self.download.phase != "Succeeded"

    @property
    def failed(self) -> bool:
        return self.download is not None and self.download.phase == "Failed"


def storage_plan(
    serving: Plan,
    glmd: GLMDeployment,
    owner: dict[str, Any],
    owned: Iterable[dict[str, Any]],
    settings: DownloadSettings,
) -> StoragePlan:
    cache = glmd.spec.model_cache
    mode = cache.mode
    if mode is CacheMode.EMPTY_DIR:
        return StoragePlan((), None, f"model cache: emptyDir of {cache_size(serving, glmd).describe()}")
    if mode is CacheMode.CLAIM:
        return StoragePlan((), None, f"model cache: claim {cache.persistent_volume_claim} (read-write)")
    if mode is CacheMode.NODE:
        assert cache.node_cache is not None
        return StoragePlan((), None, f"model cache: {cache.node_cache.path} on each node")
    own = labels(serving)
    claim = shared_claim(serving, glmd, own, owner)
    job = download_job(serving, glmd, own, owner, settings)
    name = job["metadata"]["name"]
    live = next((o for o in owned if o["kind"] == "Job" and o["metadata"]["name"] == name), None)
    summary = f"model cache: shared claim {claim['metadata']['name']} of {cache_size(serving, glmd).describe()}"
    return StoragePlan((claim, job), download_state(live, name), summary)


def is_kept(obj: dict[str, Any]) -> bool:
    """A claim without our owner reference was retained (shared.retain): pruning never deletes it."""
    return obj["kind"] == "PersistentVolumeClaim" and not (obj.get("metadata") or {}).get("ownerReferences")
