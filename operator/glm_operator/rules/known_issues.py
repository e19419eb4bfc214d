"""The three upstream vLLM failures as rules: pure functions from a resolved spec to findings."""

from __future__ import annotations

from glm_operator.api.constants import ROCM_AITER_ENV, ROCM_AITER_RENDERED
from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.accelerators import ArchFamily
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Change, Finding
from glm_operator.rules.partition import (
    affected_layers,
    balanced_partition,
    format_layers,
    parse_partition,
    vllm_default_split,
)
from glm_operator.rules.registry import RULES_BY_ID

PP_ENV = "VLLM_PP_LAYER_PARTITION"
AITER_BMM_ENVS = (facts.AITER_FP4BMM, facts.AITER_FP8BMM)
# The plugin's switch (images/vllm-patches, patch moe-mxfp4-expert-map) that moves this MoE to Marlin.
MOE_BACKEND_ENV = "GLMOPS_MOE_MXFP4_BACKEND"


def _version(ctx: Context) -> str:
    return f"vLLM {ctx.version}" if ctx.version else "an unknown vLLM version (assumed affected)"


def _patched_hint(ctx: Context) -> str:
    version = ctx.version or ctx.catalogs.images.default_version
    return f'glmops\' patched image (drop spec.engine.image, set spec.engine.vllmVersion: "{version}")'


def vllm_58729(ctx: Context) -> list[Finding]:
    """MXFP4 MoE on SM100 with expert parallelism routes tokens to the wrong experts, or fails after loading."""
    rule = RULES_BY_ID["vllm-58729"]
    p = ctx.spec.parallelism
    if (
        ctx.model is None
        or ctx.model.model.format != "compressed-tensors-mxfp4-w4a4"
        or ctx.accelerator.arch_family != ArchFamily.SM100
        or not facts.expert_parallel_active(p.tensor, p.data, p.expert)
    ):
        return []
    patched = ctx.has_patch(rule.patch)
    remaps = ctx.version is not None and facts.CUTLASS_MXFP4_REMAPS.at(ctx.version)
    if not remaps and not patched:
        return [_misroute_finding(ctx, rule.id, rule.upstream)]
    if not facts.all2all_kernels_built(p.tensor, p.data, p.expert):
        return []  # tensor-only expert parallelism: vLLM builds no all-to-all kernels, the backend is unused
    backend = facts.effective_all2all(ctx.spec.engine.all2all_backend, ctx.version)
    batched = backend in facts.MOE_BATCHED_ALL2ALL.at(ctx.version)
    marlin = patched and _marlin_asked(ctx)
    rejected = facts.MARLIN_REJECTED_ALL2ALL.at(ctx.version) if marlin else _cutlass_rejects()
    if backend not in rejected and not batched:
        return []
    return [_layout_finding(ctx, rule.id, rule.upstream, backend, patched=patched, batched=batched)]


def _misroute_finding(ctx: Context, rule_id: str, upstream: str) -> Finding:
    p = ctx.spec.parallelism
    marlin = (
        " (--moe-backend marlin does not move this checkpoint off Cutlass on these versions)"
        if ctx.spec.engine.moe_backend == "marlin"
        else ""
    )
    return Finding(
        rule=rule_id,
        severity="error",
        field="spec.parallelism.expert",
        value="true",
        problem=(
            f"on {_version(ctx)} the Cutlass MXFP4 MoE experts ignore expert_map under expert "
            f"parallelism ({p.summary()}) on {ctx.accelerator.name}, so tokens reach the wrong experts "
            f"(GSM8K near 0, most chat content null){marlin}"
        ),
        fix=f"Use {_patched_hint(ctx)}, vLLM >= 0.32.0, or tensor instead of expert parallelism (expert: false)",
        upstream=upstream,
    )


def _cutlass_rejects() -> frozenset[str]:
    """The layouts the Cutlass MXFP4 experts reject once they honour expert_map: the newest vLLM's list, which
    stock 0.32.0+ checks after loading and glmops' patch checks at model construction in every version."""
    return facts.CUTLASS_MXFP4_REJECTED_ALL2ALL.at(None) or frozenset()


def _layout_finding(
    ctx: Context, rule_id: str, upstream: str, backend: str, *, patched: bool, batched: bool
) -> Finding:
    why = (
        "this all-to-all layout uses the batched activation format, which neither the Cutlass nor the Marlin MXFP4 "
        "experts take"
        if batched
        else "the Cutlass MXFP4 MoE experts cannot take this all-to-all layout"
    )
    outcome = (
        "glmops' patch refuses to start the server"
        if patched
        else "the compressed-tensors MXFP4 method still picks them, so vLLM fails only after loading every weight"
    )
    marlin_takes = not batched and backend not in facts.MARLIN_REJECTED_ALL2ALL.at(ctx.version)
    marlin_fix = (
        f", or engine.env {MOE_BACKEND_ENV}=marlin with {_patched_hint(ctx)} (the Marlin MXFP4 experts)"
        if marlin_takes
        else ""
    )
    return Finding(
        rule=rule_id,
        severity="error",
        field="spec.engine.all2allBackend",
        value=ctx.spec.engine.all2all_backend,
        problem=f"on {_version(ctx)} with expert and data parallelism, {why}; {outcome}",
        fix=f"Use all2allBackend auto (allgather_reducescatter){marlin_fix}",
        upstream=upstream,
    )


def _marlin_asked(ctx: Context) -> bool:
    """The patched image runs this MoE on Marlin when engine.env asks for it."""
    return (ctx.env(MOE_BACKEND_ENV) or "").strip().lower() == "marlin"


def vllm_63170(ctx: Context) -> list[Finding]:
    """Pipeline stages that start on a top-k reuse layer read stale DSA indices."""
    rule = RULES_BY_ID["vllm-63170"]
    pp = ctx.spec.parallelism.pipeline
    if ctx.model is None or ctx.model.model.architecture != "GlmMoeDsaForCausalLM" or pp <= 1:
        return []
    model = ctx.model.model
    if pp > model.layers:
        return []  # feasibility reports this
    computes = model.computes_topk
    env = ctx.env(PP_ENV)
    if env is not None:
        try:
            sizes = parse_partition(env, model.layers, pp)
        except ValueError as err:
            return [_partition_finding(ctx, rule.upstream, env, f"{PP_ENV} {err}", rule.id)]
        how = f"the split {','.join(map(str, sizes))}"
    else:
        sizes = vllm_default_split(model.layers, pp)
        how = f"vLLM's default split {','.join(map(str, sizes))}"
    affected = affected_layers(sizes, computes)
    if not affected or ctx.has_patch(rule.patch):
        return []
    problem = (
        f"{how} starts pipeline stages on top-k reuse layers, so layers {format_layers(affected)} of "
        f"{model.name} read stale sparse-attention indices (copy errors, loops)"
    )
    return [_partition_finding(ctx, rule.upstream, env, problem, rule.id)]


def _partition_finding(ctx: Context, upstream: str, env: str | None, problem: str, rule_id: str) -> Finding:
    assert ctx.model is not None
    model, pp = ctx.model.model, ctx.spec.parallelism.pipeline
    good = balanced_partition(model.layers, pp, model.computes_topk)
    user_set = ctx.env_is_users(PP_ENV)
    field = ctx.env_field(PP_ENV) if env is not None else "spec.parallelism.pipeline"
    value = env if env is not None else str(pp)
    if good is None:
        return Finding(
            rule=rule_id,
            severity="error",
            field=field,
            value=value,
            problem=problem,
            fix=(
                f"No split of {model.layers} layers into {pp} stages starts every stage on a computing "
                f"layer: use fewer pipeline stages or {_patched_hint(ctx)}"
            ),
            upstream=upstream,
        )
    split = ",".join(map(str, good))
    return Finding(
        rule=rule_id,
        severity="error",
        field=field,
        value=value,
        problem=problem,
        fix=(
            f"Set {PP_ENV}={split} (the most balanced split starting every stage on a computing layer) "
            f"or use {_patched_hint(ctx)}"
        ),
        upstream=upstream,
        changes=(Change("spec.engine.env", split, env_name=PP_ENV),),
        blocked_by=(field,) if user_set else (),
    )


def vllm_52833(ctx: Context) -> list[Finding]:
    """AITER re-quantizes a BF16 MLA kv_b_proj on gfx950 and MTP accepts no drafts."""
    rule = RULES_BY_ID["vllm-52833"]
    spec = ctx.spec.engine.speculative
    if (
        ctx.accelerator.architecture != "gfx950"
        or ctx.model is None
        or not ctx.model.model.mla_in_bf16()
        or spec is None
        or spec.method != "mtp"
    ):
        return []
    patched = ctx.has_patch(rule.patch)
    findings = [] if patched or ctx.spec.parallelism.expert else [_illegal_address_warning(ctx, rule.upstream)]
    switched_on = _bmm_switches_on(ctx, patched)
    if not switched_on:
        return findings
    users = [n for n in switched_on if ctx.env_is_users(n)]
    value = ", ".join(
        f"{n}={ctx.env(n)}" if ctx.env(n) is not None else f"{n} unset (on by default in {_version(ctx)})"
        for n in switched_on
    )
    kernel = "FP4" if facts.AITER_FP4BMM in switched_on else "FP8"
    findings.append(
        Finding(
            rule=rule.id,
            severity="error",
            field=ctx.env_field(users[0]) if users else "spec.engine.env",
            value=value,
            problem=(
                f"on {_version(ctx)} with {ctx.accelerator.name} and AITER on, MLAAttention re-quantizes the BF16 "
                f"kv_b_proj of {ctx.model.model.name} for AITER's {kernel} BMM, and MTP accepts 0 % of drafts"
            ),
            fix=(
                f"Set {facts.AITER_FP4BMM}=0 and {facts.AITER_FP8BMM}=0 (both: with FP4 off the FP8 BMM takes "
                f"over), or use {_patched_hint(ctx)} without switching either on"
            ),
            upstream=rule.upstream,
            changes=tuple(Change("spec.engine.env", "0", env_name=n) for n in switched_on),
            blocked_by=tuple(ctx.env_field(n) for n in users),
        )
    )
    return findings


def _bmm_switches_on(ctx: Context, patched: bool) -> list[str]:
    """The AITER BMM switches that are on as vLLM reads them, none when the master switch is off.

    The master switch defaults to on here because glmops renders VLLM_ROCM_USE_AITER=1 on ROCm. glmops' patch keeps
    a BF16 kv_b_proj out of both BMMs unless the user switched one on explicitly (it never overrides a choice).
    """
    master = ctx.env(ROCM_AITER_ENV)
    if not facts.switch_is_on(ROCM_AITER_RENDERED if master is None else master, default=False):
        return []
    return [
        name
        for name in AITER_BMM_ENVS
        if facts.switch_is_on(ctx.env(name), default=not patched and facts.aiter_default(name, ctx.version))
    ]


def _illegal_address_warning(ctx: Context, upstream: str) -> Finding:
    return Finding(
        rule="vllm-52833",
        severity="warning",
        field="spec.parallelism.expert",
        value="false",
        problem=(
            "without expert parallelism the reported setup died in memory profiling on vLLM 0.27.1 with "
            "hipErrorIllegalAddress; the root cause is unknown"
        ),
        fix="Prefer expert: true; glmops does not guess a fix for this one",
        upstream=upstream,
    )


KNOWN_ISSUE_CHECKS = (vllm_58729, vllm_63170, vllm_52833)
