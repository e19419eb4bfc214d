"""GLMDeployment, glmops.dev/v1alpha1: the pydantic models the CRD schema is generated from.

Field descriptions are what `kubectl explain glmdeployment.spec...` prints, so they are written for
the person who types that command. Bounds and enums here are the API server's first line of checks;
the known-issue rules (glm_operator.rules) are the second.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from glm_operator.api.constants import ConditionType, ImageConditionType
from glm_operator.api.naming import wire_name
from glm_operator.api.network import NetworkSpec
from glm_operator.api.pod import PodSettings
from glm_operator.api.storage import ModelCacheSpec

GROUP = "glmops.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GLMDeployment"
PLURAL = "glmdeployments"
SINGULAR = "glmdeployment"
SHORT_NAMES = ("glmd",)

# Kubernetes-style names, so the schema and the Python side agree on one spelling.
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
_HF_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
_BACKEND = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"


class _Model(BaseModel):
    """Shared config: camelCase on the wire, unknown fields refused (as kubectl's strict validation does)."""

    model_config = ConfigDict(
        alias_generator=wire_name,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=False,
    )


class AcceleratorType(StrEnum):
    """GPU models glmops knows; each has a catalog entry with its architecture, memory and node labels."""

    GB200 = "GB200"
    GB300 = "GB300"
    B200 = "B200"
    B300 = "B300"
    H100 = "H100"
    H200 = "H200"
    MI300X = "MI300X"
    MI355X = "MI355X"
    RTX_PRO_6000 = "RTX-PRO-6000"


class Remediation(StrEnum):
    """What admission does with a known-bad setting."""

    AUTO = "Auto"
    REJECT = "Reject"


class SpeculativeMethod(StrEnum):
    """vLLM speculative decoding methods glmops can render."""

    MTP = "mtp"
    NGRAM = "ngram"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    DRAFT_MODEL = "draft_model"
    SUFFIX = "suffix"


class SecretKeyRef(_Model):
    """A key of a Secret in the GLMDeployment's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    key: str = Field(default="HF_TOKEN", min_length=1, max_length=253, description="Key within the Secret.")


class ModelRef(_Model):
    """The checkpoint to serve."""

    name: str = Field(
        min_length=3,
        max_length=256,
        pattern=_HF_ID,
        description=(
            "Hugging Face model id (organisation/name), e.g. RedHatAI/GLM-5.3-MXFP4. It is resolved "
            "against the model catalog, which knows its architecture, checkpoint format and size."
        ),
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        description="Branch, tag or commit of the model repository. Unset means the default branch (main).",
    )
    token_secret: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token (passed as HF_TOKEN), for gated or private repositories.",
    )


class AcceleratorSpec(_Model):
    """The GPUs each replica runs on."""

    type: AcceleratorType = Field(
        description=(
            "GPU model. Selects the nodes (by the labels the vendor's GPU operator sets), the vLLM "
            "platform (CUDA or ROCm) and the known-issue rules that apply."
        ),
    )
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description=(
            "GPUs on each node of this type. Unset means the catalog's default for the type "
            "(4 for GB200/GB300 trays, 8 for HGX and OAM platforms)."
        ),
    )


class ParallelismSpec(_Model):
    """How one replica is split across GPUs: GPUs per replica = tensor x pipeline x data."""

    tensor: int = Field(default=1, ge=1, le=64, description="Tensor parallel size (--tensor-parallel-size).")
    pipeline: int = Field(default=1, ge=1, le=64, description="Pipeline parallel size (--pipeline-parallel-size).")
    data: int = Field(default=1, ge=1, le=1024, description="Data parallel size (--data-parallel-size).")
    expert: bool = Field(
        default=False,
        description=(
            "Expert parallelism (--enable-expert-parallel): MoE experts are sharded across the "
            "tensor x data ranks instead of tensor-split. Needs tensor x data > 1."
        ),
    )

    def gpus(self) -> int:
        """GPUs one replica needs."""
        return self.tensor * self.pipeline * self.data

    def summary(self) -> str:
        """The short form printed in `kubectl get glmd`, e.g. `TP1 PP1 DP8 EP`."""
        parts = [f"TP{self.tensor}", f"PP{self.pipeline}", f"DP{self.data}"]
        if self.expert:
            parts.append("EP")
        return " ".join(parts)


class SpeculativeSpec(_Model):
    """Speculative decoding (--speculative-config)."""

    method: SpeculativeMethod = Field(
        default=SpeculativeMethod.MTP,
        description="Draft method. GLM-5.x checkpoints carry one MTP layer, so mtp needs no draft model.",
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description=(
            "Tokens drafted per step. vLLM needs it: unset, admission sets the checkpoint's MTP layers for mtp "
            "(remediation Auto) and refuses otherwise."
        ),
    )
    prompt_lookup_max: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description=(
            "ngram only: the longest prompt n-gram matched to draft from. Unset means vLLM's default: 5 when "
            "promptLookupMin is unset too, else promptLookupMin."
        ),
    )
    prompt_lookup_min: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description=(
            "ngram only: the shortest prompt n-gram matched to draft from; at most promptLookupMax. Unset means "
            "vLLM's default: 5 when promptLookupMax is unset too, else promptLookupMax."
        ),
    )


class EnvVar(_Model):
    """An environment variable for the vLLM container."""

    name: str = Field(min_length=1, max_length=256, pattern=_ENV_NAME, description="Variable name.")
    value: str = Field(default="", max_length=4096, description="Variable value.")


class EngineSpec(_Model):
    """The vLLM engine: which build, and the flags that change numerics."""

    vllm_version: str | None = Field(
        default=None,
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([a-z]+[0-9]*)?$",
        description=(
            "vLLM release, e.g. 0.30.0. Without `image`, selects glmops' patched image of that "
            "release for the accelerator's platform. Optional when `image` is set."
        ),
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description=(
            "Container image to run. Overrides the choice made from vllmVersion. An image the "
            "catalog does not know is judged by the version in its tag, or vllmVersion."
        ),
    )
    moe_backend: str = Field(
        default="auto",
        max_length=64,
        pattern=_BACKEND,
        description="vLLM --moe-backend. auto lets vLLM (and glmops' remediation) choose.",
    )
    attention_backend: str = Field(
        default="auto",
        max_length=64,
        pattern=_BACKEND,
        description="vLLM --attention-backend (an AttentionBackendEnum name). auto lets vLLM choose.",
    )
    kv_cache_dtype: str = Field(
        default="auto",
        max_length=64,
        pattern=_BACKEND,
        description="vLLM --kv-cache-dtype. auto means the model's dtype (vLLM picks fp8 for some models).",
    )
    all2all_backend: str = Field(
        default="auto",
        max_length=64,
        pattern=_BACKEND,
        description=(
            "vLLM --all2all-backend for expert parallelism. auto keeps vLLM's default (allgather_reducescatter)."
        ),
    )
    speculative: SpeculativeSpec | None = Field(default=None, description="Speculative decoding. Unset means none.")
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description=(
            "Extra environment for the vLLM container, e.g. VLLM_PP_LAYER_PARTITION. Names are unique. "
            "A variable set here is never changed by remediation."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Extra arguments appended to `vllm serve`. Refused: flags glmops renders from other fields "
            "(parallelism, backends, kv-cache dtype, speculative config, model, revision; the message names "
            "the field), and flags that would hide the server from its Service, probes and canary: --port, "
            "--host, --uds, --ssl-keyfile, --ssl-certfile, --served-model-name and --api-key (docs/rules.md)."
        ),
        json_schema_extra={"items": {"type": "string", "maxLength": 1024}},
    )

    def env_value(self, name: str) -> str | None:
        """The value the user set for an environment variable, or None when unset."""
        return next((e.value for e in self.env if e.name == name), None)


class ValidationSpec(_Model):
    """How admission treats settings that hit a known vLLM issue."""

    remediation: Remediation = Field(
        default=Remediation.AUTO,
        description=(
            "Auto: repair settings left unset or auto, record the change, admit. Reject: refuse "
            "instead. A value set explicitly is never overridden: that is always a rejection."
        ),
    )


class GSM8KSource(_Model):
    """Where GSM8K questions come from. Unset everything: built-in seeded grade-school problems."""

    path: str | None = Field(
        default=None,
        description=(
            "Refused: the operator reads no file a GLMDeployment names. Kept so that objects stored before can "
            "be read and corrected; use configMap."
        ),
    )
    url: str | None = Field(
        default=None,
        description=(
            "An http(s) URL of a JSONL file, under one of the cluster's canaryData.allowedUrls (none by default). "
            "Fetched without redirects to other hosts, from public addresses only, size- and time-limited."
        ),
    )
    config_map: str | None = Field(
        default=None, description="A ConfigMap in the GLMDeployment's namespace whose key test.jsonl holds the data."
    )


class GSM8KCanary(_Model):
    """GSM8K accuracy, scored as vLLM's own check does, asked concurrently and decided by a sequential test."""

    enabled: bool = Field(default=True, description="Run this check.")
    max_questions: int = Field(default=200, ge=1, le=1319, description="Questions at most; the test stops early.")
    threshold: float | None = Field(
        default=None, ge=0, le=1, description="Accuracy to pass. Unset means the model catalog's default."
    )
    concurrency: int = Field(
        default=64,
        ge=1,
        le=256,
        description="Requests in flight at once, in every suite (GSM8K questions, smoke, null-content, copy). The "
        "sequential test's error rates do not depend on it; higher decides in fewer round trips but adds load "
        "(vLLM's default batch is 256 sequences).",
    )
    chat: bool = Field(default=False, description="Also score the chat variant (content only, no reasoning).")
    source: GSM8KSource = Field(
        default_factory=GSM8KSource, description="Where the questions come from.", json_schema_extra={"default": {}}
    )


class RateCanary(_Model):
    """A check measured as a rate over several requests."""

    enabled: bool = Field(default=True, description="Run this check.")
    samples: int = Field(default=20, ge=1, le=1000, description="Requests to send.")


class SmokeCanary(RateCanary):
    """Tiny arithmetic ("What is 2+2?") at temperature 0: content present and correct."""

    samples: int = Field(default=4, ge=1, le=20, description="Questions to ask.")


class NullContentCanary(RateCanary):
    """Share of chat answers whose content is empty while the reasoning is not."""

    max_rate: float = Field(default=0.05, ge=0, le=1, description="Highest acceptable null-content share.")


class CopyCanary(_Model):
    """Copy a fixed list of about 50 items exactly, at temperature 0."""

    enabled: bool = Field(default=True, description="Run this check.")
    trials: int = Field(default=3, ge=1, le=20, description="Copies to request; every one must be exact.")


class SpecDecodeCanary(_Model):
    """Speculative-decoding acceptance from the pod's /metrics, around the canary traffic."""

    enabled: bool = Field(default=True, description="Run this check when speculative decoding is configured.")
    min_acceptance: float = Field(default=0.2, ge=0, le=1, description="Lowest acceptable acceptance rate.")


class LogprobCanary(_Model):
    """Mean negative log-likelihood of fixed texts (echo + logprobs) against a reference."""

    enabled: bool = Field(default=False, description="Run this check (needs a per-model reference).")
    reference: float | None = Field(default=None, ge=0, description="Reference mean NLL per token.")
    tolerance: float = Field(default=0.05, ge=0, description="Allowed increase over the reference.")


class CanarySpec(_Model):
    """Correctness canaries run against each serving pod before it joins the Service."""

    smoke: SmokeCanary = Field(
        default_factory=SmokeCanary, description="2+2 and friends.", json_schema_extra={"default": {}}
    )
    gsm8k: GSM8KCanary = Field(
        default_factory=GSM8KCanary, description="GSM8K accuracy.", json_schema_extra={"default": {}}
    )
    null_content: NullContentCanary = Field(
        default_factory=NullContentCanary, description="Null-content rate.", json_schema_extra={"default": {}}
    )
    copy_fidelity: CopyCanary = Field(
        default_factory=CopyCanary, description="Exact list copying.", json_schema_extra={"default": {}}
    )
    spec_decode: SpecDecodeCanary = Field(
        default_factory=SpecDecodeCanary, description="Draft acceptance.", json_schema_extra={"default": {}}
    )
    logprob: LogprobCanary = Field(
        default_factory=LogprobCanary, description="Prompt log-likelihood.", json_schema_extra={"default": {}}
    )
    recheck_seconds: int = Field(default=600, ge=0, description="Re-run the suite this often on Ready pods; 0: never.")
    failures_to_unready: int = Field(
        default=2, ge=1, le=10, description="Consecutive failed re-checks before a Ready pod is taken out."
    )


class GLMDeploymentSpec(_Model):
    """Desired state of a GLM-5.x deployment on vLLM."""

    model: ModelRef = Field(description="The checkpoint to serve.")
    accelerator: AcceleratorSpec = Field(description="The GPUs each replica runs on.")
    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec,
        description="How one replica is split across GPUs.",
        json_schema_extra={"default": {}},
    )
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        description="The vLLM engine and its numerics-relevant flags.",
        json_schema_extra={"default": {}},
    )
    replicas: int = Field(default=1, ge=0, le=1024, description="Independent serving replicas.")
    model_cache: ModelCacheSpec = Field(
        default_factory=ModelCacheSpec,
        description="Where downloaded weights are kept.",
        json_schema_extra={"default": {}},
    )
    validation: ValidationSpec = Field(
        default_factory=ValidationSpec,
        description="How admission treats known-bad settings.",
        json_schema_extra={"default": {}},
    )
    canary: CanarySpec = Field(
        default_factory=CanarySpec,
        description="Correctness canaries gating each pod's readiness.",
        json_schema_extra={"default": {}},
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        description="RDMA devices, secondary networks and NCCL/Gloo interfaces for multi-node replicas.",
        json_schema_extra={"default": {}},
    )
    pod: PodSettings = Field(
        default_factory=PodSettings,
        description=(
            "Settings of every pod glmops renders: requests, node selection, tolerations, pull secrets, "
            "ServiceAccount, priority, labels, annotations, volumes and /dev/shm size."
        ),
        json_schema_extra={"default": {}},
    )


class Condition(_Model):
    """A standard Kubernetes status condition."""

    type: str = Field(
        max_length=316,
        description=(
            f"Condition type: {', '.join(ConditionType)} (GLMDeployment); {', '.join(ImageConditionType)} (GLMImage)."
        ),
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        default="",
        max_length=1024,
        description="One CamelCase word saying why, for machines.",
    )
    message: str = Field(default="", max_length=32768, description="What happened, for people.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this condition was computed from."
    )
    last_transition_time: str | None = Field(
        default=None,
        description="When status last changed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )


class RemediationRecord(_Model):
    """A setting glmops' admission repaired (also kept in the glmops.dev/remediations annotation)."""

    rule: str = Field(description="The rule whose remedy was applied, e.g. vllm-63170.")
    env: str | None = Field(default=None, description="The environment variable set, if the repair set one.")
    field: str | None = Field(default=None, description="The spec field set, if the repair set one.")
    value: str = Field(description="The value glmops set.")


class PlanSummary(_Model):
    """What the operator decided to run."""

    image: str = Field(description="The vLLM image the pods run.")
    image_digest: str | None = Field(
        default=None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Digest of that image once glmops built or found it in its registry; pods run image@digest.",
    )
    vllm_version: str = Field(description="The vLLM version of that image (unknown if it could not be told).")
    patches: list[str] = Field(default_factory=list, description="glmops patches the image carries.")
    pipeline_partition: str = Field(default="", description="VLLM_PP_LAYER_PARTITION, if set.")
    nodes_per_replica: int = Field(ge=1, description="Nodes (pods) each replica spans.")
    gpus_per_pod: int = Field(ge=0, description="GPUs each pod requests.")
    command_hash: str = Field(description="Hash of image, arguments and environment; changes roll the pods.")


class PodCanaryStatus(_Model):
    """The last canary run against one serving pod."""

    passed: bool = Field(description="Whether every check passed.")
    failed: list[str] = Field(default_factory=list, description="Checks that failed.")
    message: str = Field(default="", description="The failed checks and their figures (or every check's).")
    checked_at: str = Field(default="", description="When the run finished (RFC 3339).")


class CheckProgressStatus(_Model):
    """How far one check of a run in progress has got."""

    asked: int = Field(ge=0, description="Questions answered so far.")
    planned: int = Field(
        ge=0, description="Questions the check asks at most (GSM8K and the short checks decide early)."
    )
    correct: int = Field(ge=0, description="Of the answers so far, those right (correct / asked: running accuracy).")
    done: bool = Field(default=False, description="Whether the check has decided; the run goes on to the next one.")


class PodCanaryProgress(_Model):
    """A canary run in progress against one serving pod; removed when the run ends."""

    started_at: str = Field(description="When the run started (RFC 3339).")
    updated_at: str = Field(description="When these figures were taken (RFC 3339); written at most every 2 s.")
    current: str = Field(default="", description="The check running now.")
    checks: dict[str, CheckProgressStatus] = Field(
        default_factory=dict, description="By check, those of this run that ask questions and have started."
    )


class CanaryStatus(_Model):
    """Canary results of the serving pods."""

    pods: dict[str, PodCanaryStatus] = Field(default_factory=dict, description="By pod name.")
    running: dict[str, PodCanaryProgress] = Field(
        default_factory=dict, description="Runs in progress, by pod name: questions asked and answered right so far."
    )
    summary: str = Field(default="", description="How many pods passed, and the first failure with its figure.")


class GLMDeploymentStatus(_Model):
    """Observed state, written by the operator."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation the operator last acted on."
    )
    parallelism: str | None = Field(default=None, description="Parallelism summary, e.g. `TP1 PP1 DP8 EP`.")
    gpus_per_replica: int | None = Field(default=None, ge=0, description="GPUs one replica uses.")
    replicas: int | None = Field(default=None, ge=0, description="Serving replicas that exist.")
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Replicas whose pods passed their canaries and serve traffic."
    )
    selector: str | None = Field(
        default=None,
        description=(
            "Label selector of the serving pods (one per replica), read by the scale subresource so a "
            "HorizontalPodAutoscaler or KEDA can target a GLMDeployment."
        ),
    )
    plan: PlanSummary | None = Field(default=None, description="What the operator runs for this spec.")
    canary: CanaryStatus | None = Field(default=None, description="Canary results per serving pod.")
    remediations: list[RemediationRecord] = Field(
        default_factory=list, description="Settings admission repaired, and the rule behind each."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=f"{', '.join(ConditionType)}.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class ObjectMeta(_Model):
    """The metadata fields glmops reads; the API server's others (managedFields, timestamps) are kept as they are."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(default="", description="The object's name.")
    namespace: str | None = Field(default=None, description="Its namespace; unset in a manifest not yet applied.")
    uid: str | None = Field(default=None, description="Set by the API server.")
    generation: int | None = Field(default=None, description="Set by the API server; moves with each spec change.")
    labels: dict[str, str] = Field(default_factory=dict, description="The object's labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="The object's annotations.")


class GLMDeployment(_Model):
    """A GLM-5.x model served by vLLM, checked against known vLLM issues and gated on correct answers."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["glmops.dev/v1alpha1"] = Field(default="glmops.dev/v1alpha1")
    kind: Literal["GLMDeployment"] = Field(default="GLMDeployment")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: GLMDeploymentSpec
    status: GLMDeploymentStatus = Field(default_factory=GLMDeploymentStatus)
