"""Start-up refusals: configurations vLLM refuses while it starts, refused here at admission instead.

docs/startup-refusals.md lists vLLM's start-up refusals that a GLMDeployment can reach and where each is
handled. Each check here cites the vLLM lines it mirrors (checked by tests/vllm_source/test_startup_refusals.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.versions import Version, newest_at
from glm_operator.catalog.vllm_facts import source_lines
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Change, Finding
from glm_operator.rules.partition import parse_partition

PP_ENV = "VLLM_PP_LAYER_PARTITION"


@dataclass(frozen=True)
class StartupRefusal:
    """One start-up refusal: the rule id its findings carry, and the entry of `lines` in vllm-fact-locations.yaml
    holding, per version, the vLLM lines it mirrors (docs/startup-refusals.md cites them)."""

    id: str
    cites: str


PP_PARTITION = StartupRefusal("startup/pp-partition", "get-pp-indices")
MOE_BACKEND_MODEL = StartupRefusal("startup/moe-backend-model", "moe-backend-model")
MOE_BACKEND_ALL2ALL = StartupRefusal("startup/moe-backend-all2all", "moe-backend-all2all")
EXTRA_ARGS_JSON = StartupRefusal("startup/extra-args-json", "extra-args-json")
SPECULATIVE_TOKENS = StartupRefusal("startup/speculative-tokens", "speculative-tokens")
SPECULATIVE_DRAFT = StartupRefusal("startup/speculative-draft", "speculative-draft")
MOONEP_QUANTIZED = StartupRefusal("startup/moonep-quantized", "moonep-quantized")
KV_NVFP4_MLA = StartupRefusal("startup/kv-nvfp4-mla", "kv-nvfp4-mla")
MXFP4_ORACLE_EXPERTS = StartupRefusal("startup/mxfp4-oracle-experts", "mxfp4-oracle-experts")
STARTUP_REFUSALS = (
    PP_PARTITION,
    MOE_BACKEND_MODEL,
    MOE_BACKEND_ALL2ALL,
    EXTRA_ARGS_JSON,
    SPECULATIVE_TOKENS,
    SPECULATIVE_DRAFT,
    MOONEP_QUANTIZED,
    KV_NVFP4_MLA,
    MXFP4_ORACLE_EXPERTS,
)

# vllm/distributed/utils.py, get_pp_indices: (def line, int() parse refusal, entry-count refusal, sum refusal),
# per version, read from the source by `python -m tests.vllm_source.locate` (catalog/data/vllm-fact-locations.yaml).
# Every model builds its decoder layers through make_layers -> get_pp_indices, at any pipeline size.
GET_PP_INDICES_LINES: dict[str, tuple[int, int, int, int]] = {
    version: (found[0], found[1], found[2], found[3])
    for version, found in source_lines(PP_PARTITION.cites).items()
    if len(found) == 4
}


def _pp_checked_by_63170(ctx: Context) -> bool:
    """vllm-63170 already refuses a malformed partition for GLM-5.x DSA models under pipeline > 1."""
    assert ctx.model is not None
    return ctx.model.model.architecture == "GlmMoeDsaForCausalLM" and ctx.spec.parallelism.pipeline > 1


def pp_partition_valid(ctx: Context) -> list[Finding]:
    """An explicit VLLM_PP_LAYER_PARTITION vLLM's get_pp_indices accepts, at any pipeline size (pipeline 1 too)."""
    env = ctx.env(PP_ENV)
    if env is None or ctx.model is None:
        return []
    pp, layers = ctx.spec.parallelism.pipeline, ctx.model.model.layers
    if pp > layers or _pp_checked_by_63170(ctx):
        return []  # feasibility/pipeline, or vllm-63170, reports it
    try:
        parse_partition(env, layers, pp)
    except ValueError as err:
        where = GET_PP_INDICES_LINES.get(str(ctx.version)) if ctx.version is not None else None
        cite = f" (vllm/distributed/utils.py:{where[0]} get_pp_indices)" if where else ""
        return [
            Finding(
                rule=PP_PARTITION.id,
                severity="error",
                field=ctx.env_field(PP_ENV),
                value=env,
                problem=(
                    f"{PP_ENV} {err}{cite}; vLLM reads it whenever it builds the model's layers, pipeline {pp} included"
                ),
                fix=(
                    f"Remove {PP_ENV} from spec.engine.env, or give it {pp} comma-separated positive integers "
                    f"summing to {layers}"
                ),
            )
        ]
    return []


def _refused_per_version(
    lines: str, since: tuple[tuple[str, frozenset[str]], ...]
) -> dict[str, tuple[frozenset[str], int]]:
    """version -> (the names it refuses, the line that raises), for each version whose source has the check: the
    lines from vllm-fact-locations.yaml, the names from the newest `since` entry at or before the version."""
    out: dict[str, tuple[frozenset[str], int]] = {}
    for version, found in source_lines(lines).items():
        names = [n for first, n in since if Version.parse(version) >= Version.parse(first)]
        if found and names:
            out[version] = (names[-1], found[0])
    return out


# vllm/config/kernel.py: KernelConfig.set_platform_defaults (run while VllmConfig is built) refuses these MoE
# backends for any architecture outside FLASHINFER_MOE_EP_ARCHITECTURES (DeepSeek-V4 only), so for GLM-5.x:
# version -> (the names, the line that raises in validate_flashinfer_moe_ep_model).
MODEL_RESTRICTED_MOE = _refused_per_version(
    MOE_BACKEND_MODEL.cites,
    (
        ("0.30.0", frozenset({"flashinfer_moe_ep_mega_deep_gemm", "flashinfer_moe_ep_mega_cutedsl"})),
        ("0.32.0", frozenset({"flashinfer_moe_ep_mega_deep_gemm"})),
    ),
)
MODEL_RESTRICTED_ARCHITECTURES = frozenset({"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel", "DeepseekV41ForCausalLM"})

# vllm/config/kernel.py bind_passthrough_all2all_backend: these MoE backends dispatch and combine themselves
# and refuse any all-to-all backend but the default: version -> (the names, the line that raises).
SELF_DISPATCHING_MOE = _refused_per_version(
    MOE_BACKEND_ALL2ALL.cites,
    (("0.32.0", frozenset({"flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm"})),),
)
DEFAULT_ALL2ALL = ("auto", "allgather_reducescatter")


def _per_version(table: dict[str, tuple[frozenset[str], int]], ctx: Context) -> tuple[frozenset[str], int | None]:
    """The names a version refuses and its line; an unknown version is assumed to refuse every name any does."""
    if ctx.version is None:
        return frozenset().union(*(names for names, _ in table.values())), None
    names, line = table.get(str(ctx.version), (frozenset(), 0))
    return names, line


def moe_backend_fits_model(ctx: Context) -> list[Finding]:
    """No MoE backend vLLM's kernel config restricts to other architectures, nor one that refuses the all2all."""
    if ctx.model is None:
        return []
    backend = ctx.spec.engine.moe_backend.lower().replace("-", "_")
    arch = ctx.model.model.architecture
    names, line = _per_version(MODEL_RESTRICTED_MOE, ctx)
    where = f" (vllm/config/kernel.py:{line})" if line else ""
    if backend in names and arch not in MODEL_RESTRICTED_ARCHITECTURES:
        return [
            Finding(
                rule=MOE_BACKEND_MODEL.id,
                severity="error",
                field="spec.engine.moeBackend",
                value=ctx.spec.engine.moe_backend,
                problem=(
                    f"vLLM {ctx.version or '(unknown version)'} runs it only for DeepSeek-V4 models and refuses to "
                    f"start {ctx.model.model.name} ({arch}) with it{where}"
                ),
                fix="Use auto or a MoE backend for this model's format (docs/rules.md lists them)",
            )
        ]
    names, line = _per_version(SELF_DISPATCHING_MOE, ctx)
    where = f" (vllm/config/kernel.py:{line})" if line else ""
    all2all = ctx.spec.engine.all2all_backend
    if backend in names and all2all not in DEFAULT_ALL2ALL:
        return [
            Finding(
                rule=MOE_BACKEND_ALL2ALL.id,
                severity="error",
                field="spec.engine.all2allBackend",
                value=all2all,
                problem=(
                    f"moeBackend {backend} dispatches and combines itself, so vLLM {ctx.version or '(unknown)'} "
                    f"refuses to start with any other all-to-all backend{where}"
                ),
                fix="Leave all2allBackend at auto",
            )
        ]
    return []


# vLLM's JSON config flags (engine/arg_utils.py EngineArgs.add_cli_args) and the keys in them glmops renders from
# the spec. FlexibleArgumentParser.parse_args (utils/argparse_utils.py) also takes any key of them as
# `--flag.key value` or `--flag.key=value` (JSON or plain), merged into the flag's JSON. The lines, per version:
# `extra-args-json` in catalog/data/vllm-fact-locations.yaml.
JSON_FLAGS = {
    "--kernel-config": {"moe_backend": "spec.engine.moeBackend"},
    "--attention-config": {"backend": "spec.engine.attentionBackend"},
    "--speculative-config": {"": "spec.engine.speculative"},  # every key: glmops renders the whole config
}
JSON_FLAG_ALIASES = {"-ac": "--attention-config", "-sc": "--speculative-config"}


def _json_flag(name: str) -> str | None:
    """The JSON config flag `name` spells: itself, its short alias, or a unique prefix (argparse abbreviation)."""
    if name.startswith("--"):
        head = name.replace("_", "-")
        if head in JSON_FLAGS:
            return head
        found = [f for f in JSON_FLAGS if f.startswith(head)] if len(head) >= 5 else []
        return found[0] if len(found) == 1 else None
    return JSON_FLAG_ALIASES.get(name)


def _managed_key(flag: str, key: str) -> str | None:
    keys = JSON_FLAGS[flag]
    return keys.get("") or keys.get(key.replace("-", "_"))


def extra_args_json_knobs(ctx: Context) -> list[Finding]:
    """extraArgs sets no managed knob through a JSON config flag, whole (`--kernel-config '{...}'`) or dotted."""
    out: list[Finding] = []
    args = ctx.spec.engine.extra_args
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        name, eq, inline = arg.partition("=")
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        base, dot, rest = name.partition(".")
        flag = _json_flag(base)
        if flag is None:
            continue
        if dot:
            keys = {rest.split(".")[0]}
        elif flag == "--speculative-config":
            continue  # the whole flag is refused by feasibility/extra-args (MANAGED_FLAGS)
        else:
            try:
                parsed = json.loads(value)
            except ValueError:
                continue  # not JSON: vLLM refuses it while parsing arguments, and no managed key is set
            keys = set(parsed) if isinstance(parsed, dict) else set()
        for key in sorted(keys):
            field = _managed_key(flag, key)
            if field is None:
                continue
            out.append(
                Finding(
                    rule=EXTRA_ARGS_JSON.id,
                    severity="error",
                    field=f"spec.engine.extraArgs[{i}]",
                    value=arg,
                    problem=(
                        f"vLLM reads it as {flag} key {key}, which glmops renders from {field}, where the rules "
                        "can check it"
                    ),
                    fix=f"Set {field} instead and remove {key} from this argument",
                )
            )
    return out


def _cite(refusal: StartupRefusal, ctx: Context, rel: str) -> str:
    """ " (vllm/<rel>:N)" for the version's first located line of `refusal`, or nothing for an unknown version."""
    found = source_lines(refusal.cites).get(str(ctx.version)) if ctx.version is not None else None
    return f" (vllm/{rel}:{found[0]})" if found else ""


# Speculative methods that draft from a separate draft checkpoint. glmops renders `--speculative-config` without a
# `model` (a GLMDeployment has no field naming a draft checkpoint), and vLLM's SpeculativeConfig then refuses them:
# "num_speculative_tokens was provided but without speculative model", or, without a count, the check below.
DRAFT_CHECKPOINT_METHODS = ("eagle", "eagle3", "draft_model")
# Where vLLM raises "num_speculative_tokens was provided but without speculative model", from the first version on
# (0.34.0 moved it into the speculator configs); tests/vllm_source checks each version's located line is there.
SPECULATIVE_DRAFT_FILES = (
    ("0.26.0", "config/speculative.py"),
    ("0.34.0", "v1/worker/gpu/spec_decode/speculator_config.py"),
)


def speculative_draft_file(version: Version | None) -> str:
    """The file holding the draft-checkpoint refusal in `version` (the newest file for an unknown version)."""
    return newest_at(SPECULATIVE_DRAFT_FILES, version)


def speculative_renderable(ctx: Context) -> list[Finding]:
    """A speculative config vLLM starts with as glmops renders it: a method that needs no draft checkpoint, and a
    draft count (vLLM's SpeculativeConfig takes the draft from the target model only when a count is given)."""
    spec = ctx.spec.engine.speculative
    if spec is None:
        return []
    field = "spec.engine.speculative"
    version = ctx.version or "(unknown version)"
    if spec.method.value in DRAFT_CHECKPOINT_METHODS:
        return [
            Finding(
                rule=SPECULATIVE_DRAFT.id,
                severity="error",
                field=f"{field}.method",
                value=spec.method.value,
                problem=(
                    "it drafts from a separate draft checkpoint, which a GLMDeployment cannot name, and "
                    f"vLLM {version} refuses to start without one"
                    f"{_cite(SPECULATIVE_DRAFT, ctx, speculative_draft_file(ctx.version))}"
                ),
                fix=f"Use {field}.method mtp (GLM-5.x checkpoints carry their MTP layer) or ngram",
            )
        ]
    if spec.num_speculative_tokens is not None:
        return []
    mtp_layers = ctx.model.model.mtp_layers if ctx.model is not None else 0
    repair = spec.method == "mtp" and mtp_layers > 0
    return [
        Finding(
            rule=SPECULATIVE_TOKENS.id,
            severity="error",
            field=f"{field}.numSpeculativeTokens",
            value="unset",
            problem=(
                f"vLLM {version} takes the {spec.method.value} draft only with a count of draft tokens and refuses to "
                f"start without one{_cite(SPECULATIVE_TOKENS, ctx, 'config/speculative.py')}"
            ),
            fix=(
                f"Set {field}.numSpeculativeTokens"
                + (f" ({mtp_layers}: the checkpoint's MTP layers)" if repair else " (3 is a common start)")
            ),
            changes=(Change(f"{field}.numSpeculativeTokens", mtp_layers),) if repair else (),
        )
    ]


MOONEP = "moonep"


def moonep_unquantized(ctx: Context) -> list[Finding]:
    """The moonep all-to-all backend only with an unquantized (BF16) checkpoint (VllmConfig refuses any other)."""
    if ctx.spec.engine.all2all_backend != MOONEP or ctx.model is None or ctx.model.model.format == "bf16":
        return []
    if ctx.version is not None and source_lines(MOONEP_QUANTIZED.cites).get(str(ctx.version)) == ():
        return []  # a version without moonep: feasibility/backend refuses the name
    return [
        Finding(
            rule=MOONEP_QUANTIZED.id,
            severity="error",
            field="spec.engine.all2allBackend",
            value=MOONEP,
            problem=(
                f"{ctx.model.model.name} is a {ctx.model.model.format} checkpoint, and "
                f"vLLM {ctx.version or '(unknown)'} runs moonep with unquantized BF16 models only"
                f"{_cite(MOONEP_QUANTIZED, ctx, 'config/vllm.py')}"
            ),
            fix="Use another all2allBackend (auto), or the model's BF16 checkpoint",
        )
    ]


def kv_cache_fits_mla(ctx: Context) -> list[Finding]:
    """No plain nvfp4 KV cache layout: GLM-5.x attention is MLA, and VllmConfig refuses nvfp4 (but the _ds_mla
    layouts) for MLA models."""
    dtype = ctx.spec.engine.kv_cache_dtype
    if not dtype.startswith("nvfp4") or dtype.endswith("_ds_mla"):
        return []
    return [
        Finding(
            rule=KV_NVFP4_MLA.id,
            severity="error",
            field="spec.engine.kvCacheDtype",
            value=dtype,
            problem=(
                "GLM-5.x attention is multi-head latent attention (MLA), and "
                f"vLLM {ctx.version or '(unknown)'} refuses "
                f"this nvfp4 layout for MLA models{_cite(KV_NVFP4_MLA, ctx, 'config/vllm.py')}"
            ),
            fix="Use kvCacheDtype auto, fp8, or nvfp4_ds_mla where the version has it",
        )
    ]


MXFP4_W4A4 = "compressed-tensors-mxfp4-w4a4"
# The FlashInfer NVLink all-to-all layouts DeepGemmFP4Experts._supports_parallel_config refuses
# (use_fi_nvl_two_sided_kernels / use_fi_nvl_one_sided_kernels; flashinfer_all2allv is the two-sided alias).
FI_NVLINK_ALL2ALL = frozenset({"flashinfer_nvlink_two_sided", "flashinfer_all2allv", "flashinfer_nvlink_one_sided"})
# Where the oracle raises when no candidate experts class supports the deployment: `_return_or_raise` in
# fused_moe/oracle/mxfp4.py, from 0.34.0 `MoEKernelOracle.return_or_raise` in fused_moe/oracle/base.py.
MXFP4_ORACLE_FILES = (
    ("0.26.0", "model_executor/layers/fused_moe/oracle/mxfp4.py"),
    ("0.34.0", "model_executor/layers/fused_moe/oracle/base.py"),
)


def mxfp4_oracle_file(version: Version | None) -> str:
    """The file holding the MXFP4 oracle's refusal in `version` (the newest file for an unknown version)."""
    return newest_at(MXFP4_ORACLE_FILES, version)


def _oracle_experts_refusal(ctx: Context, backend: str) -> tuple[str, str] | None:
    """(experts class, what it does not support) where the one experts class the oracle tries for `backend`
    refuses this device or parallel config for certain; None where it may run."""
    p = ctx.spec.parallelism
    family = ctx.accelerator.arch_family
    use_ep = facts.expert_parallel_active(p.tensor, p.data, p.expert)
    kernels = facts.all2all_kernels_built(p.tensor, p.data, p.expert)
    all2all = facts.effective_all2all(ctx.spec.engine.all2all_backend, ctx.version) if kernels else ""
    if backend == "b12x":  # both b12x variants (MXFP8 and BF16 activations) map to B12xExperts alone
        if family != "sm120":
            return "B12xExperts", f"the {ctx.accelerator.name} ({family}): it needs the SM120 family"
        if use_ep:
            return "B12xExperts", "expert parallelism: it runs with ep_size 1 only"
        return None
    if backend == "deep_gemm":
        if family not in ("sm100", "sm120"):
            return "DeepGemmFP4Experts", f"the {ctx.accelerator.name} ({family}): it needs SM100 or SM120"
        if all2all in FI_NVLINK_ALL2ALL:
            return "DeepGemmFP4Experts", f"the FlashInfer NVLink all-to-all layout ({all2all})"
        return None
    if family != "sm100":  # the flashinfer_moe_ep_* backends: FlashInferMoeEpExperts
        return "FlashInferMoeEpExperts", f"the {ctx.accelerator.name} ({family}): it needs capability 10.0 or 10.3"
    if not use_ep:
        return "FlashInferMoeEpExperts", "a deployment without expert parallelism"
    if all2all in facts.MOE_BATCHED_ALL2ALL.at(ctx.version) | facts.MOE_PADDED_ALL2ALL.at(ctx.version):
        return "FlashInferMoeEpExperts", f"the batched or padded activation format of {all2all}"
    return None


def mxfp4_oracle_experts(ctx: Context) -> list[Finding]:
    """For a compressed-tensors MXFP4 checkpoint on CUDA, no --moe-backend whose experts the MXFP4 oracle picks
    and then refuses for the device or the parallel config (`select_mxfp4_moe_backend` -> `_return_or_raise`)."""
    backend = ctx.spec.engine.moe_backend.lower().replace("-", "_")
    if (
        ctx.model is None
        or ctx.model.model.format != MXFP4_W4A4
        or ctx.platform != "cuda"
        or not facts.ct_mxfp4_oracle_picks(backend, ctx.version)
    ):
        return []
    refused = _oracle_experts_refusal(ctx, backend)
    if refused is None:
        return []
    experts, why = refused
    return [
        Finding(
            rule=MXFP4_ORACLE_EXPERTS.id,
            severity="error",
            field="spec.engine.moeBackend",
            value=ctx.spec.engine.moe_backend,
            problem=(
                f"vLLM {ctx.version} hands it to its MXFP4 oracle for {ctx.model.model.name}, which picks {experts} "
                f"and refuses to build the model, since they do not support {why}"
                f"{_cite(MXFP4_ORACLE_EXPERTS, ctx, mxfp4_oracle_file(ctx.version))}"
            ),
            fix=(
                "Use moeBackend auto (vLLM's own choice for this checkpoint), or the backend for this accelerator "
                "and parallelism: b12x on SM120 without expert parallelism, flashinfer_moe_ep_* on SM100 with "
                "expert parallelism, deep_gemm on SM100 or SM120 without a FlashInfer NVLink all-to-all"
            ),
        )
    ]


STARTUP_CHECKS = (
    pp_partition_valid,
    moe_backend_fits_model,
    extra_args_json_knobs,
    speculative_renderable,
    moonep_unquantized,
    kv_cache_fits_mla,
    mxfp4_oracle_experts,
)
