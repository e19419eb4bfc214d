"""The three upstream vLLM failures as rules: pure functions from a resolved spec to findings."""

from __future__ import annotations

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
AITER_BMM_ENVS = ("VLLM_ROCM_USE_AITER_FP4BMM", "VLLM_ROCM_USE_AITER_FP8BMM")
# The plugin's switch (images/vllm-patches, patch moe-mxfp4-expert-map) that moves this MoE to Marlin.
MOE_BACKEND_ENV = "GLMOPS_MOE_MXFP4_BACKEND"
FI_TWO_SIDED = {"flashinfer_nvlink_two_sided", "flashinfer_all2allv"}
UNGUARDED_A2A = {
    "deepep_high_throughput",
    "flashinfer_nvlink_two_sided",
    "flashinfer_nvlink_one_sided",
    "flashinfer_all2allv",
}


def _version(ctx: Context) -> str:
    return f"vLLM {ctx.version}" if ctx.version else "an unknown vLLM version (assumed affected)"


def _patched_hint(ctx: Context) -> str:
    version = ctx.version or ctx.catalogs.images.default_version
    return f'glmops\' patched image (drop spec.engine.image, set spec.engine.vllmVersion: "{version}")'


def vllm_58729(ctx: Context) -> list[Finding]:
    """MXFP4 MoE on SM100 with expert parallelism routes tokens to the wrong experts."""
    rule = RULES_BY_ID["vllm-58729"]
    p = ctx.spec.parallelism
    if (
        ctx.model is None
        or ctx.model.model.format != "compressed-tensors-mxfp4-w4a4"
        or ctx.accelerator.arch_family != "sm100"
        or not p.expert
        or p.tensor * p.data <= 1
    ):
        return []
    patched = ctx.has_patch(rule.patch)
    if ctx.version_in(None, "0.32.0") and not patched:
        marlin = (
            " (--moe-backend marlin does not move this checkpoint off Cutlass on these versions)"
            if ctx.spec.engine.moe_backend == "marlin"
            else ""
        )
        return [
            Finding(
                rule=rule.id,
                severity="error",
                field="spec.parallelism.expert",
                value="true",
                problem=(
                    f"on {_version(ctx)} the Cutlass MXFP4 MoE experts ignore expert_map under expert "
                    f"parallelism ({p.summary()}) on {ctx.accelerator.name}, so tokens reach the wrong experts "
                    f"(GSM8K near 0, most chat content null){marlin}"
                ),
                fix=(
                    f"Use {_patched_hint(ctx)}, vLLM >= 0.32.0, or tensor instead of expert parallelism (expert: false)"
                ),
                upstream=rule.upstream,
            )
        ]
    backend = ctx.spec.engine.all2all_backend
    if backend not in UNGUARDED_A2A or (patched and _marlin_takes(ctx, backend)):
        return []
    # The Cutlass MXFP4 experts cannot take these all-to-all layouts in any version. Stock 0.32.0+ fails closed
    # only after loading every weight; glmops' patch refuses at model construction unless Marlin is asked for.
    outcome = (
        "glmops' patch refuses to start the server rather than route tokens to the wrong experts"
        if patched
        else "the compressed-tensors MXFP4 method still picks them, so vLLM fails only after loading every weight"
    )
    marlin_fix = (
        f", or engine.env {MOE_BACKEND_ENV}=marlin with {_patched_hint(ctx)} (the Marlin MXFP4 experts)"
        if backend not in FI_TWO_SIDED
        else ""
    )
    return [
        Finding(
            rule=rule.id,
            severity="error",
            field="spec.engine.all2allBackend",
            value=backend,
            problem=f"on {_version(ctx)} the Cutlass MXFP4 MoE experts cannot take this all-to-all layout; {outcome}",
            fix=f"Use all2allBackend auto (allgather_reducescatter){marlin_fix}",
            upstream=rule.upstream,
        )
    ]


def _marlin_takes(ctx: Context, backend: str) -> bool:
    """The patched image runs this MoE on Marlin when asked, except for FlashInfer NVLink two-sided layouts."""
    choice = (ctx.env(MOE_BACKEND_ENV) or "").strip().lower()
    return choice == "marlin" and backend not in FI_TWO_SIDED


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
            return [_partition_finding(ctx, rule.upstream, env, f"{PP_ENV} {err}, so vLLM refuses to start", rule.id)]
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
    """AITER re-quantizes BF16 MLA weights on gfx950 and MTP accepts no drafts."""
    rule = RULES_BY_ID["vllm-52833"]
    spec = ctx.spec.engine.speculative
    if (
        ctx.accelerator.architecture != "gfx950"
        or ctx.model is None
        or "mla-attention" not in ctx.model.model.bf16_modules
        or spec is None
        or spec.method != "mtp"
        or not ctx.version_in(None, "0.33.0")
        or ctx.has_patch(rule.patch)
    ):
        return []
    findings: list[Finding] = []
    if not ctx.spec.parallelism.expert:
        findings.append(
            Finding(
                rule=rule.id,
                severity="warning",
                field="spec.parallelism.expert",
                value="false",
                problem=(
                    "without expert parallelism this setup died in memory profiling on vLLM 0.27.1 with "
                    "hipErrorIllegalAddress; the root cause is unknown"
                ),
                fix="Prefer expert: true; glmops does not guess a fix for this one",
                upstream=rule.upstream,
            )
        )
    not_off = [n for n in AITER_BMM_ENVS if ctx.env(n) != "0"]
    if not not_off:
        return findings
    users = [n for n in not_off if ctx.env_is_users(n)]
    field = ctx.env_field(users[0]) if users else "spec.engine.env"
    value = ", ".join(f"{n}={ctx.env(n)}" if ctx.env(n) is not None else f"{n} unset (on by default)" for n in not_off)
    findings.append(
        Finding(
            rule=rule.id,
            severity="error",
            field=field,
            value=value,
            problem=(
                f"on {_version(ctx)} with {ctx.accelerator.name}, AITER re-quantizes the BF16 MLA weights of "
                f"{ctx.model.model.name} for its FP4/FP8 BMM, and MTP accepts 0 % of drafts"
            ),
            fix=f"Set {'=0 and '.join(AITER_BMM_ENVS)}=0, or use {_patched_hint(ctx)}",
            upstream=rule.upstream,
            changes=tuple(Change("spec.engine.env", "0", env_name=n) for n in not_off),
            blocked_by=tuple(ctx.env_field(n) for n in users),
        )
    )
    return findings


KNOWN_ISSUE_CHECKS = (vllm_58729, vllm_63170, vllm_52833)
