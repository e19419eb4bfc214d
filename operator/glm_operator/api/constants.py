"""Contracts several modules share: a value written here is the one the renderer, the rules, the handlers, the
simulator fleet and the tests use. Change one here and every user follows; `tests/unit/test_contracts.py` checks
that what is rendered still satisfies what is watched."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# --- Labels and selectors ------------------------------------------------------------------------------------------

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "glmops"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_DEPLOYMENT = "glmops.dev/deployment"
"""On every owned object and pod: the name of the GLMDeployment it belongs to (in the same namespace)."""
LABEL_SERVING = "glmops.dev/serving"
"""On pods (and selectors) that serve HTTP: the canary gate watches these, the Service selects them."""
LABEL_ROLE = "glmops.dev/role"
ROLE_GROUP = "group"
"""The role of StatefulSet node-group pods; only index 0 of a group serves HTTP, the others mirror its gate."""
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"

CANARY_CONDITION = "glmops.dev/canary"
"""The readiness gate of every serving pod: the pod condition the canary gate writes."""

MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}
SERVING = {LABEL_SERVING: "true", **MANAGED}
"""The labels of a serving pod as the kopf watch selects it."""


def selector(labels: dict[str, str]) -> str:
    """A label selector string for exact matches, e.g. `glmops.dev/serving=true,app.kubernetes.io/managed-by=glmops`."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


# --- Owned objects --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OwnedKind:
    """A kind of object a GLMDeployment owns: created, watched for drift and pruned by the operator."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


LWS = "leaderworkerset.x-k8s.io"
OWNED_KINDS: tuple[OwnedKind, ...] = (
    OwnedKind(LWS, "v1", "LeaderWorkerSet", "leaderworkersets"),
    OwnedKind("apps", "v1", "StatefulSet", "statefulsets"),
    OwnedKind("apps", "v1", "Deployment", "deployments"),
    OwnedKind("", "v1", "Service", "services"),
    OwnedKind("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    OwnedKind("", "v1", "ConfigMap", "configmaps"),
    OwnedKind("batch", "v1", "Job", "jobs"),
    OwnedKind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
)
"""In the order stale ones are pruned (workloads first). The operator watches each (handlers/settings.py), lists and
prunes them (k8s/objects.py), and the chart grants exactly these (tests/unit/test_chart_values.py holds it to this)."""


# --- Ports -------------------------------------------------------------------------------------------------------

VLLM_PORT = 8000
SERVER_CONTAINER = "vllm"  # the container running vLLM in every pod glmops renders
"""vLLM's HTTP port in every serving pod: the Service, the probes, the canaries and the simulator fleet use it."""

# --- Status conditions -------------------------------------------------------------------------------------------


class ConditionType(StrEnum):
    """The condition types of a GLMDeployment's status."""

    VALIDATED = "Validated"
    PROGRESSING = "Progressing"
    READY = "Ready"
    DEGRADED = "Degraded"
    IMAGE_BUILDING = "ImageBuilding"
    CATALOG = "CatalogLoaded"


class Reason(StrEnum):
    """Reasons of the GLMDeployment's conditions and of the canary gate (image builds name theirs in render/)."""

    RULES_PASSED = "RulesPassed"
    RULES_FAILED = "RulesFailed"
    SCALED_TO_ZERO = "ScaledToZero"
    ALL_REPLICAS_READY = "AllReplicasReady"
    PARTIALLY_READY = "PartiallyReady"
    NO_REPLICA_READY = "NoReplicaReady"
    CANARY_PASSED = "CanaryPassed"
    CANARY_FAILED = "CanaryFailed"
    CANARY_UNREACHABLE = "CanaryUnreachable"
    SERVER_RESTARTED = "ServerRestarted"
    BLOCKED = "Blocked"
    APPLIED = "Applied"
    WAITING_FOR_IMAGE = "WaitingForImage"
    IMAGE_BUILD_FAILED = "ImageBuildFailed"
    PATCHES_NOT_LOADED = "PatchesNotLoaded"
    AS_PLANNED = "AsPlanned"
    CATALOG_OK = "CatalogOK"
    CATALOG_INVALID = "CatalogInvalid"
    MODEL_DOWNLOADING = "ModelDownloading"
    MODEL_DOWNLOAD_FAILED = "ModelDownloadFailed"


class EventType(StrEnum):
    """The two types of a Kubernetes Event."""

    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(StrEnum):
    """Reasons of the Events glmops posts that are not a condition's reason (those post their `Reason`)."""

    RECONCILED = "Reconciled"
    PRUNED = "Pruned"
    RESTORED = "Restored"
    REFRESH_FAILED = "RefreshFailed"


class ImageConditionType(StrEnum):
    """The condition types of a GLMImage's status."""

    BUILT = "Built"


class ImageReason(StrEnum):
    """Reasons of a GLMImage's Built condition, and of the GLMDeployment's ImageBuilding condition that mirrors it."""

    BUILDING = "Building"
    BUILT = "Built"
    BUILD_FAILED = "BuildFailed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    NO_DIGEST = "NoDigest"
    CONTEXT_INVALID = "ContextInvalid"
    PENDING = "Pending"
    IMAGE_CONFLICT = "ImageConflict"


class Platform(StrEnum):
    """The GPU software platform an accelerator runs and a vLLM image is built for."""

    CUDA = "cuda"
    ROCM = "rocm"


# --- Rendering decisions the rules read ----------------------------------------------------------------------------

ROCM_AITER_ENV = "VLLM_ROCM_USE_AITER"
ROCM_AITER_RENDERED = "1"
"""The renderer sets VLLM_ROCM_USE_AITER=1 on ROCm unless the spec sets it (ROCm sparse MLA runs on AITER only), so
the rules read an unset master switch as on."""

REPAIR_WEBHOOK_ID = "glmops-repair"
VALIDATE_WEBHOOK_ID = "glmops-validate"
"""kopf handler ids of the admission webhooks, and so the URL paths the webhook server answers on (/<id>)."""
