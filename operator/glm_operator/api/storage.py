"""spec.modelCache: where a GLMDeployment's weights live, as the pydantic models the CRD schema is generated from.

Four modes, at most one set (admission refuses two, rules/storage.py): an emptyDir per pod (the default, sized
from the model catalog), a claim the user made (`persistentVolumeClaim`), a claim glmops makes and fills once
(`shared`), and a directory on each node (`nodeCache`). docs/storage.md says what each costs.
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from glm_operator.api.naming import wire_name

QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"
# A checkpoint is its shards plus small files; beside them sit the Hub client's temporary `.incomplete` file of
# the shard being fetched and the files a changed revision adds. 10% of the checkpoint covers these (for GLM-5.x,
# 75-150 GB, several shards' worth), and a limit too tight evicts the pod mid-download, which costs far more.
HEADROOM = 0.10
# A model the catalog does not know has no size to go by: the emptyDir keeps the limit it always had.
FALLBACK_SIZE = "1Ti"


def size_for(weight_gb: float | None) -> str:
    """The cache size for a checkpoint of `weight_gb` GB (10^9 bytes): plus headroom, in whole GiB."""
    if weight_gb is None:
        return FALLBACK_SIZE
    return f"{math.ceil(weight_gb * 1e9 * (1 + HEADROOM) / 2**30)}Gi"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=wire_name, populate_by_name=True, extra="forbid")


class AccessMode(StrEnum):
    """PersistentVolumeClaim access modes."""

    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class CacheMode(StrEnum):
    """Which of spec.modelCache's modes a spec uses."""

    EMPTY_DIR = "emptyDir"
    CLAIM = "persistentVolumeClaim"
    SHARED = "shared"
    NODE = "nodeCache"


class SharedCacheSpec(_Model):
    """A PersistentVolumeClaim glmops creates and fills once with a download Job; serving pods mount it read-only."""

    storage_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "StorageClass of the claim. Unset means the cluster's default class. Pods on several nodes "
            "need a class whose volumes mount ReadWriteMany (NFS, CephFS, Lustre, a cloud file store)."
        ),
    )
    size: str | None = Field(
        default=None,
        pattern=QUANTITY,
        description=(
            "Requested size. Unset means the model catalog's checkpoint size plus 10% headroom (1Ti for a "
            "model the catalog does not know)."
        ),
    )
    access_modes: list[AccessMode] = Field(
        default_factory=lambda: [AccessMode.READ_WRITE_MANY],
        min_length=1,
        max_length=4,
        description=(
            "Access modes of the claim. The download Job writes it, so one mode must be writable; "
            "ReadWriteMany lets serving pods on every node mount it."
        ),
        json_schema_extra={"default": ["ReadWriteMany"]},
    )
    retain: bool = Field(
        default=True,
        description=(
            "Keep the claim (and the downloaded weights) when the GLMDeployment is deleted, as StatefulSets keep "
            "theirs: a re-created deployment of the same name mounts it again instead of downloading hundreds of "
            "GB. false: the claim is owned by the GLMDeployment and deleted with it."
        ),
    )
    download_deadline_seconds: int = Field(
        default=21600,
        ge=60,
        le=604800,
        description=(
            "activeDeadlineSeconds of the download Job: how long the download may take before it is failed "
            "(default 6 hours: 1.5 TB at about 70 MB/s)."
        ),
    )


class NodeCacheSpec(_Model):
    """A hostPath directory on each node, filled once per node by an init container of the first pod there."""

    path: str = Field(
        default="/var/lib/glmops/models",
        min_length=2,
        max_length=1024,
        pattern=r"^/",
        description=(
            "Absolute directory on the node (created when missing). Each model and revision is downloaded once "
            "per node; a file lock keeps two pods on one node from downloading it twice."
        ),
    )


class ModelCacheSpec(_Model):
    """Where weights are kept (mounted at /root/.cache/huggingface). Set at most one of persistentVolumeClaim, shared
    and nodeCache; none means an emptyDir per pod."""

    persistent_volume_claim: str | None = Field(
        default=None,
        max_length=253,
        description=(
            "A PersistentVolumeClaim you made, mounted read-write; vLLM downloads into it when the weights are "
            "missing. Unset (and no shared or nodeCache) means an emptyDir per pod."
        ),
    )
    size_limit: str | None = Field(
        default=None,
        pattern=QUANTITY,
        description=(
            "Size limit of the emptyDir used when no other mode is set. Unset means the model catalog's "
            "checkpoint size plus 10% headroom (1Ti for a model the catalog does not know)."
        ),
    )
    shared: SharedCacheSpec | None = Field(
        default=None,
        description=(
            "A claim glmops creates and fills once with a download Job (token from spec.model.tokenSecret, a "
            "Secret in this namespace); serving pods mount it read-only with HF_HUB_OFFLINE=1 and start only "
            "after the download succeeded."
        ),
    )
    node_cache: NodeCacheSpec | None = Field(
        default=None,
        description="A directory on each node (hostPath), filled once per node and kept across pods.",
    )

    def modes(self) -> list[CacheMode]:
        """The modes set, in the order they are named (more than one is refused by admission)."""
        out = []
        if self.persistent_volume_claim:
            out.append(CacheMode.CLAIM)
        if self.shared is not None:
            out.append(CacheMode.SHARED)
        if self.node_cache is not None:
            out.append(CacheMode.NODE)
        return out

    @property
    def mode(self) -> CacheMode:
        """The mode in effect: the first one set, else the emptyDir."""
        return next(iter(self.modes()), CacheMode.EMPTY_DIR)
