"""Start-up refusals: configurations vLLM refuses while it starts, refused here at admission instead.

docs/startup-refusals.md lists vLLM's start-up refusals that a GLMDeployment can reach and where each is
handled. Each check here cites the vLLM lines it mirrors (checked by tests/vllm_source/test_startup_refusals.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from glm_operator.catalog.versions import Version
from glm_operator.catalog.vllm_facts import source_lines
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding
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
STARTUP_REFUSALS = (PP_PARTITION, MOE_BACKEND_MODEL, MOE_BACKEND_ALL2ALL, EXTRA_ARGS_JSON)

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


STARTUP_CHECKS = (pp_partition_valid, moe_backend_fits_model, extra_args_json_knobs)
