"""spec.pod: what a platform team sets on every pod glmops renders, beside what glmops decides itself.

Requests, node selection, tolerations, pull secrets, the ServiceAccount and priority class, pod labels and
annotations, extra volumes and the size of /dev/shm. What the rules and the plan decide (GPU counts, the
readiness gate, probes, command, ports) has no field here, so it cannot be set; what could still undo a
decision (a GPU resource name, a reserved label, a volume glmops mounts) is refused by rules/pod_settings.py.
The merge itself is render/pod_settings.py.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

# Kubernetes' resource.Quantity as CRDs spell it: a decimal with an optional binary or decimal suffix or exponent.
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

DEFAULT_SHM_SIZE = "64Gi"
GLMOPS_VOLUMES = ("shm", "model-cache")
"""Volume names every pod glmops renders already uses (tests/unit/test_pod_settings.py holds the renderer to it)."""
SHM_PATH = "/dev/shm"
HF_CACHE_PATH = "/root/.cache/huggingface"
GLMOPS_MOUNT_PATHS = (SHM_PATH, HF_CACHE_PATH)
"""Mount paths of the vllm container glmops already uses."""

MAX_MAP_ENTRIES = 64
MAX_ANNOTATION_VALUE = 4096
MAX_TERMS = 16

# v1alpha1 imports this module, so its base model is not importable here; the same config, and no field below
# has a digit in its name (where to_camel and v1alpha1.wire_name differ).
_CONFIG = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class _Model(BaseModel):
    model_config = _CONFIG


_QUANTITY_VALUE: JsonDict = {
    "description": "A Kubernetes quantity, e.g. 32, 500m, 512Gi.",
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY,
    "x-kubernetes-int-or-string": True,
}
_PRESERVE: JsonDict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _kept(description: str) -> JsonDict:
    """An object passed through as Kubernetes defines it (its inside is checked by the API server on the pod)."""
    return {**_PRESERVE, "description": description}


_SUFFIX: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


def parse_quantity(value: int | str) -> Decimal | None:
    """A Kubernetes quantity as a number (`64Gi` -> 68719476736, `500m` -> 0.5); None when it is not one."""
    text = str(value)
    if not re.match(QUANTITY, text):
        return None
    match = re.match(r"^([+-]?[0-9.]+)(.*)$", text)
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
        return Decimal(number) * Decimal(_SUFFIX[suffix])
    except (InvalidOperation, KeyError, ValueError):
        return None


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes qualified name (`[prefix/]name`, as label and annotation keys are), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not re.match(DNS_SUBDOMAIN, prefix)):
        return "the prefix before '/' must be a DNS subdomain (lower case, at most 253 characters)"
    if not name or len(name) > 63:
        return "the name part must be 1 to 63 characters"
    if not QUALIFIED_NAME_PART.match(name):
        return "the name part must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


class ResourceSettings(_Model):
    """Compute resources of the vllm container, beside the GPUs glmops computes."""

    requests: dict[str, int | str] = Field(
        default_factory=dict,
        max_length=16,
        description=(
            "Minimum resources the scheduler reserves, by resource name, e.g. cpu: 32, memory: 512Gi, "
            "ephemeral-storage: 100Gi (Kubernetes quantities). Merged into the vllm container. GPU resource "
            "names (nvidia.com/gpu, amd.com/gpu) are refused: the GPU count comes from spec.parallelism."
        ),
        json_schema_extra={"additionalProperties": _QUANTITY_VALUE, "maxProperties": 16},
    )
    limits: dict[str, int | str] = Field(
        default_factory=dict,
        max_length=16,
        description=(
            "Maximum resources the container may use, by resource name (Kubernetes quantities). A request "
            "above its limit is refused. GPU resource names are refused: the GPU count comes from spec.parallelism."
        ),
        json_schema_extra={"additionalProperties": _QUANTITY_VALUE, "maxProperties": 16},
    )


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """The taint effect a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(_Model):
    """A taint the pods tolerate (a Kubernetes Toleration)."""

    key: str | None = Field(
        default=None,
        max_length=316,
        description="Taint key to match. Empty with operator Exists matches every taint.",
    )
    operator: TolerationOperator | None = Field(
        default=None, description="Exists (any value) or Equal (the value below). Unset means Equal."
    )
    value: str | None = Field(
        default=None,
        max_length=63,
        description="Taint value to match with operator Equal; empty with Exists.",
    )
    effect: TaintEffect | None = Field(
        default=None, description="Taint effect to match: NoSchedule, PreferNoSchedule or NoExecute. Unset: all."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        le=2**31,
        description="With effect NoExecute: how long the pod stays on a node after the taint appears. Unset: forever.",
    )


class LocalObjectReference(_Model):
    """An object in the GLMDeployment's namespace, by name."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Name of a Secret in the GLMDeployment's own namespace.",
    )


class NodeSelector(_Model):
    """Required node selection: the pods go to a node matching any one term."""

    node_selector_terms: list[dict[str, Any]] = Field(
        max_length=MAX_TERMS,
        description=(
            "Kubernetes NodeSelectorTerms (matchExpressions, matchFields), ORed. glmops adds the accelerator's "
            "own expressions to every term, so each term still selects only nodes of spec.accelerator.type."
        ),
        json_schema_extra={"items": _kept("A Kubernetes NodeSelectorTerm: matchExpressions and matchFields, ANDed.")},
    )


class NodeAffinity(_Model):
    """Node affinity (a Kubernetes NodeAffinity)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None,
        description="Nodes the pods must land on, ANDed with the accelerator's node labels.",
    )
    preferred_during_scheduling_ignored_during_execution: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_TERMS,
        description="Kubernetes PreferredSchedulingTerms (weight, preference): nodes the scheduler favours.",
        json_schema_extra={"items": _kept("A Kubernetes PreferredSchedulingTerm: weight (1-100) and preference.")},
    )


class Affinity(_Model):
    """Scheduling constraints (a Kubernetes Affinity)."""

    node_affinity: NodeAffinity | None = Field(
        default=None,
        description="Node affinity. Its required terms are ANDed with the accelerator's node selection.",
    )
    pod_affinity: dict[str, Any] | None = Field(
        default=None,
        description="Kubernetes PodAffinity, passed through unchanged.",
        json_schema_extra=_PRESERVE,
    )
    pod_anti_affinity: dict[str, Any] | None = Field(
        default=None,
        description="Kubernetes PodAntiAffinity, passed through unchanged (e.g. spread replicas over racks).",
        json_schema_extra=_PRESERVE,
    )


class Volume(BaseModel):
    """A volume of the pods (a Kubernetes Volume): a name and one source, passed through."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        description=(
            "Volume name, unique in the pod. shm and model-cache are glmops' own. The source is one more "
            "field as in a Pod (configMap, secret, persistentVolumeClaim, emptyDir, csi, ...), passed through."
        ),
    )

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, **(self.model_extra or {})}


class VolumeMount(_Model):
    """Where a volume from spec.pod.volumes appears in the vllm container."""

    name: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL, description="A volume declared in spec.pod.volumes."
    )
    mount_path: str = Field(
        min_length=2,
        max_length=1024,
        pattern=r"^/[^:]*$",
        description="Absolute path in the container. /dev/shm and /root/.cache/huggingface (and below) are glmops'.",
    )
    read_only: bool = Field(default=False, description="Mount read-only.")
    sub_path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^[^/]",
        description="A path inside the volume to mount instead of its root (relative, no '..').",
    )


class PodSettings(_Model):
    """Settings of every pod glmops renders (Deployment, LeaderWorkerSet leader and workers, StatefulSet groups).

    GPU counts, the readiness gate, probes, command and ports are glmops' and have no field here.
    """

    resources: ResourceSettings = Field(
        default_factory=ResourceSettings,
        description="CPU, memory and other non-GPU resources of the vllm container.",
        json_schema_extra={"default": {}},
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description=(
            "Node labels the pods require, ANDed with the labels that select spec.accelerator.type. A key "
            "the accelerator's selection uses may only narrow it to one of its own values."
        ),
        json_schema_extra={
            "additionalProperties": {
                "type": "string",
                "description": "The node label's value.",
                "maxLength": 63,
                "pattern": LABEL_VALUE,
            },
            "maxProperties": MAX_MAP_ENTRIES,
        },
    )
    affinity: Affinity | None = Field(
        default=None,
        description="Node affinity (ANDed with the accelerator's), pod affinity and anti-affinity.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=32,
        description="Taints the pods tolerate, added to glmops' own toleration of the GPU resource taint.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "Secrets (type kubernetes.io/dockerconfigjson) to pull the vLLM image from a private registry. "
            "Only Secrets in the GLMDeployment's own namespace can be named: Kubernetes reads them from the pod's."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    service_account_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="ServiceAccount the pods run as, in the GLMDeployment's namespace. Unset: the namespace's default.",
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="PriorityClass of the pods, e.g. to preempt batch work. Unset: the cluster's default.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description=(
            "Extra pod labels (service mesh, cost tags). Keys are qualified names. Refused: keys under "
            "glmops.dev/ and the labels glmops selects pods by (app.kubernetes.io/name, instance, managed-by)."
        ),
        json_schema_extra={
            "additionalProperties": {
                "type": "string",
                "description": "A label value: at most 63 alphanumerics, '-', '_' or '.'.",
                "maxLength": 63,
                "pattern": LABEL_VALUE,
            },
            "maxProperties": MAX_MAP_ENTRIES,
        },
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description="Extra pod annotations. Keys are qualified names; keys under glmops.dev/ are glmops' own.",
        json_schema_extra={
            "additionalProperties": {
                "type": "string",
                "description": "An annotation value.",
                "maxLength": MAX_ANNOTATION_VALUE,
            },
            "maxProperties": MAX_MAP_ENTRIES,
        },
    )
    volumes: list[Volume] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "Extra volumes of the pods, mounted with volumeMounts. Names are unique; shm and model-cache are glmops'."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=16,
        description="Mounts of spec.pod.volumes in the vllm container. Mount paths are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"]},
    )
    shm_size: str = Field(
        default=DEFAULT_SHM_SIZE,
        max_length=64,
        pattern=QUANTITY,
        description=(
            "Size of the memory-backed /dev/shm. NCCL and vLLM's workers exchange tensors through it; "
            "multi-node and large tensor-parallel replicas need a large one. Counts against the pod's memory."
        ),
    )
