"""The three upstream vLLM failures as rules: each one declaration (`RuleInfo`) with its check, a pure function from
a resolved spec to findings."""

from __future__ import annotations

from glm_operator.api.constants import ROCM_AITER_ENV, ROCM_AITER_RENDERED
from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.accelerators import ArchFamily
from glm_operator.catalog.versions import Version
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Change, Finding
from glm_operator.rules.partition import (
    affected_layers,
    balanced_partition,
    format_layers,
    parse_partition,
    vllm_default_split,
)
from glm_operator.rules.registry import RuleInfo

PP_ENV = "VLLM_PP_LAYER_PARTITION"
AITER_BMM_ENVS = (facts.AITER_FP4BMM, facts.AITER_FP8BMM)
# The plugin's switch (images/vllm-patches, patch moe-mxfp4-expert-map) that moves this MoE to Marlin.
MOE_BACKEND_ENV = "GLMOPS_MOE_MXFP4_BACKEND"


def _version(ctx: Context) -> str:
    return f"vLLM {ctx.version}" if ctx.version else "an unknown vLLM version (assumed affected)"


def _patched_hint(ctx: Context, patch: str) -> str | None:
    """glmops' patched image carrying `patch` on this platform: of the spec's own vLLM version when the catalog
    builds it with that patch, else of the newest catalog version that does; None when no version does."""
    images = ctx.catalogs.images
    carrying = [v for v in images.versions if patch in images.patches_for(ctx.platform, v)]
    if not carrying:
        return None
    own = str(ctx.version) if ctx.version else None
    version = own if own in carrying else max(carrying, key=Version.parse)
    of = "" if version == own else f" of vLLM {version}"
    return f'glmops\' patched image{of} (drop spec.engine.image, set spec.engine.vllmVersion: "{version}")'


def _or(hint: str | None, lead: str = ", or ", tail: str = "") -> str:
    """`lead` + hint (a leading alternative: hint + `, `), or nothing when there is no hint."""
    if not hint:
        return ""
    return f"{lead}{hint}{tail}" if lead else f"{hint}, "


def vllm_58729(ctx: Context, rule: RuleInfo) -> list[Finding]:
    """MXFP4 MoE on SM100 with expert parallelism routes tokens to the wrong experts, or fails after loading."""
    p = ctx.spec.parallelism
    if (
        ctx.model is None
        or ctx.model.model.format != "compressed-tensors-mxfp4-w4a4"
        or ctx.accelerator.arch_family != ArchFamily.SM100
        or not facts.expert_parallel_active(p.tensor, p.data, p.expert)
    ):
        return []
    if facts.ct_mxfp4_oracle_picks(ctx.spec.engine.moe_backend, ctx.version):
        return []  # the MXFP4 oracle picks these experts and checks them while the model is built: no Cutlass
    patched = ctx.has_patch(rule.patch)
    remaps = ctx.version is not None and facts.CUTLASS_MXFP4_REMAPS.at(ctx.version)
    if not remaps and not patched:
        return [_misroute_finding(ctx, rule)]
    if not facts.all2all_kernels_built(p.tensor, p.data, p.expert):
        return []  # tensor-only expert parallelism: vLLM builds no all-to-all kernels, the backend is unused
    backend = facts.effective_all2all(ctx.spec.engine.all2all_backend, ctx.version)
    batched = backend in facts.MOE_BATCHED_ALL2ALL.at(ctx.version)
    padded = backend in facts.MOE_PADDED_ALL2ALL.at(ctx.version)
    marlin = patched and _marlin_asked(ctx)
    rejected = facts.MARLIN_REJECTED_ALL2ALL.at(ctx.version) if marlin else _cutlass_rejects()
    if backend not in rejected and not batched and not padded:
        return []
    layout = "batched" if batched else "padded" if padded else None
    return [_layout_finding(ctx, rule, backend, patched=patched, layout=layout, marlin=marlin)]


def _misroute_finding(ctx: Context, rule: RuleInfo) -> Finding:
    p = ctx.spec.parallelism
    marlin = (
        " (--moe-backend marlin does not move this checkpoint off Cutlass on these versions)"
        if ctx.spec.engine.moe_backend == "marlin"
        else ""
    )
    return Finding(
        rule=rule.id,
        severity="error",
        field="spec.parallelism.expert",
        value="true",
        problem=(
            f"on {_version(ctx)} the Cutlass MXFP4 MoE experts ignore expert_map under expert "
            f"parallelism ({p.summary()}) on {ctx.accelerator.name}, so tokens reach the wrong experts "
            f"(GSM8K near 0, most chat content null){marlin}"
        ),
        fix=f"Use {_or(_patched_hint(ctx, rule.patch), '')}vLLM >= 0.32.0, or tensor instead of expert parallelism "
        "(expert: false)",
        upstream=rule.upstream,
    )


def _cutlass_rejects() -> frozenset[str]:
    """The layouts the Cutlass MXFP4 experts reject once they honour expert_map: the newest vLLM's list, which
    stock 0.32.0+ checks after loading and glmops' patch checks at model construction in every version."""
    return facts.CUTLASS_MXFP4_REJECTED_ALL2ALL.at(None) or frozenset()


def _layout_finding(
    ctx: Context, rule: RuleInfo, backend: str, *, patched: bool, layout: str | None, marlin: bool
) -> Finding:
    """`layout`: "batched" or "padded" (activation formats neither MXFP4 experts take), or None (a layout the
    experts that run reject)."""
    unfit = layout is not None  # neither experts take it, so Marlin is no way out
    if layout == "batched":
        why = (
            "this all-to-all layout uses the batched activation format, which neither the Cutlass nor the Marlin "
            "MXFP4 experts take"
        )
    elif layout == "padded":
        why = (
            "this all-to-all layout hands the experts padded rows (`moe-padded-all2all`), which neither the Cutlass "
            "nor the Marlin MXFP4 experts take"
        )
    elif marlin:  # the switch moved the MoE to Marlin, which refuses this layout too (marlin-rejected-all2all)
        why = "neither the Cutlass nor the Marlin MXFP4 MoE experts take this all-to-all layout"
    else:
        why = "the Cutlass MXFP4 MoE experts cannot take this all-to-all layout"
    outcome = (
        "glmops' patch refuses to start the server"
        if patched
        else "the compressed-tensors MXFP4 method still picks them, so vLLM fails only after loading every weight"
    )
    marlin_takes = not unfit and backend not in facts.MARLIN_REJECTED_ALL2ALL.at(ctx.version)
    hint = _patched_hint(ctx, rule.patch)
    marlin_fix = (
        f", or engine.env {MOE_BACKEND_ENV}=marlin with {hint} (the Marlin MXFP4 experts)"
        if marlin_takes and hint
        else ""
    )
    return Finding(
        rule=rule.id,
        severity="error",
        field="spec.engine.all2allBackend",
        value=ctx.spec.engine.all2all_backend,
        problem=f"on {_version(ctx)} with expert and data parallelism, {why}; {outcome}",
        fix=f"Use all2allBackend auto (allgather_reducescatter){marlin_fix}",
        upstream=rule.upstream,
    )


def _marlin_asked(ctx: Context) -> bool:
    """The patched image runs this MoE on Marlin when engine.env asks for it."""
    return (ctx.env(MOE_BACKEND_ENV) or "").strip().lower() == "marlin"


def vllm_63170(ctx: Context, rule: RuleInfo) -> list[Finding]:
    """Pipeline stages that start on a top-k reuse layer read stale DSA indices."""
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
            return [_partition_finding(ctx, rule, env, f"{PP_ENV} {err}")]
        how = f"the split {','.join(map(str, sizes))}"
    else:
        sizes = vllm_default_split(model.layers, pp)
        how = f"vLLM's default split {','.join(map(str, sizes))}"
    affected = affected_layers(sizes, computes)
    if not affected or ctx.has_patch(rule.patch) or _topk_sent(ctx, checked_only=True):
        return []
    problem = (
        f"{how} starts pipeline stages on top-k reuse layers, so layers {format_layers(affected)} of "
        f"{model.name} read stale sparse-attention indices (copy errors, loops)"
    )
    if _topk_sent(ctx, checked_only=False):
        return [_unchecked_topk_warning(ctx, rule, how, affected)]
    return [_partition_finding(ctx, rule, env, problem)]


def _topk_sent(ctx: Context, *, checked_only: bool) -> bool:
    """Whether vLLM hands the top-k across stages itself (`dsa-pp-topk-sent`) on this platform: in a checked
    version, or (checked_only=False) in an unchecked one newer than every checked version, judged by the newest."""
    images = ctx.catalogs.images
    if ctx.version is None:
        return False
    if str(ctx.version) in images.versions:
        return ctx.platform in facts.DSA_PP_TOPK_SENT.at(ctx.version)
    newest = images.newest_version()
    return not checked_only and ctx.version > newest and ctx.platform in facts.DSA_PP_TOPK_SENT.at(newest)


def _topk_fixed_in(ctx: Context) -> str | None:
    """The newest checked vLLM version, when it hands the top-k across stages itself on this platform."""
    newest = ctx.catalogs.images.newest_version()
    return str(newest) if ctx.platform in facts.DSA_PP_TOPK_SENT.at(newest) else None


def _unchecked_topk_warning(ctx: Context, rule: RuleInfo, how: str, affected: list[int]) -> Finding:
    assert ctx.model is not None and ctx.version is not None
    model, newest = ctx.model.model, ctx.catalogs.images.newest_version()
    good = balanced_partition(model.layers, ctx.spec.parallelism.pipeline, model.computes_topk)
    split = f" or set {PP_ENV}={','.join(map(str, good))}, which is safe on any version" if good else ""
    return Finding(
        rule=rule.id,
        severity="warning",
        field="spec.engine.image",
        value=ctx.spec.engine.image or str(ctx.version),
        problem=(
            f"{how} starts pipeline stages on top-k reuse layers (layers {format_layers(affected)} of {model.name}); "
            f"glmops has not read vLLM {ctx.version}'s source, and judges it by vLLM {newest}, the newest version it "
            f"has checked, which hands the top-k indices across pipeline stages itself on {ctx.platform.upper()} "
            f"(fact dsa-pp-topk-sent: {facts.DSA_PP_TOPK_SENT.where[str(newest)]}); whether {ctx.version} still "
            "does is not known, so this is not refused"
        ),
        fix=f'Prefer vLLM {newest} (spec.engine.vllmVersion: "{newest}" without spec.engine.image){split}',
        upstream=rule.upstream,
    )


def _partition_finding(ctx: Context, rule: RuleInfo, env: str | None, problem: str) -> Finding:
    assert ctx.model is not None
    model, pp = ctx.model.model, ctx.spec.parallelism.pipeline
    good = balanced_partition(model.layers, pp, model.computes_topk)
    user_set = ctx.env_is_users(PP_ENV)
    field = ctx.env_field(PP_ENV) if env is not None else "spec.parallelism.pipeline"
    value = env if env is not None else str(pp)
    fixed_in = _topk_fixed_in(ctx)
    others = [
        h
        for h in (
            _patched_hint(ctx, rule.patch),
            f'vLLM {fixed_in} (spec.engine.vllmVersion: "{fixed_in}" without spec.engine.image), which hands the '
            "top-k across stages itself"
            if fixed_in and fixed_in != str(ctx.version)
            else None,
        )
        if h
    ]
    if good is None:
        return Finding(
            rule=rule.id,
            severity="error",
            field=field,
            value=value,
            problem=problem,
            fix=(
                f"No split of {model.layers} layers into {pp} stages starts every stage on a computing "
                f"layer: use fewer pipeline stages{''.join(f' or {h}' for h in others)}"
            ),
            upstream=rule.upstream,
        )
    split = ",".join(map(str, good))
    return Finding(
        rule=rule.id,
        severity="error",
        field=field,
        value=value,
        problem=problem,
        fix=(
            f"Set {PP_ENV}={split} (the most balanced split starting every stage on a computing layer)"
            f"{''.join(f' or use {h}' for h in others)}"
        ),
        upstream=rule.upstream,
        changes=(Change("spec.engine.env", split, env_name=PP_ENV),),
        blocked_by=(field,) if user_set else (),
    )


def vllm_52833(ctx: Context, rule: RuleInfo) -> list[Finding]:
    """AITER re-quantizes a BF16 MLA kv_b_proj on gfx950 and MTP accepts no drafts."""
    spec = ctx.spec.engine.speculative
    if (
        ctx.accelerator.architecture not in ("gfx950", "gfx942")
        or ctx.model is None
        or not ctx.model.model.mla_in_bf16()
        or spec is None
        or spec.method != "mtp"
    ):
        return []
    patched = ctx.has_patch(rule.patch)
    if ctx.accelerator.architecture != "gfx950":
        return _gfx942_fp8_bmm_warning(ctx, rule, patched)
    findings = [] if patched or ctx.spec.parallelism.expert else [_illegal_address_warning(rule)]
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
                f"over){_or(_patched_hint(ctx, rule.patch), ', or use ', ' without switching either on')}"
            ),
            upstream=rule.upstream,
            changes=tuple(Change("spec.engine.env", "0", env_name=n) for n in switched_on),
            blocked_by=tuple(ctx.env_field(n) for n in users),
        )
    )
    return findings


def _gfx942_fp8_bmm_warning(ctx: Context, rule: RuleInfo, patched: bool) -> list[Finding]:
    """gfx942 has no FP4 BMM (`aiter-bmm-arch`), but the FP8 BMM re-quantizes the BF16 kv_b_proj there the same way
    (`mla-fp4bmm-needs-bf16`); the reported MTP failure is from gfx950 only, so this warns instead of refusing."""
    assert ctx.model is not None
    arch = ctx.accelerator.architecture
    on = [n for n in _bmm_switches_on(ctx, patched) if dict(facts.AITER_BMM_ARCH.at(ctx.version))[n] in (None, arch)]
    if not on:
        return []
    name = on[0]
    value = (
        f"{name}={ctx.env(name)}" if ctx.env(name) is not None else f"{name} unset (on by default in {_version(ctx)})"
    )
    return [
        Finding(
            rule=rule.id,
            severity="warning",
            field=ctx.env_field(name) if ctx.env_is_users(name) else "spec.engine.env",
            value=value,
            problem=(
                f"on {_version(ctx)} with {ctx.accelerator.name} ({arch}: no FP4 BMM, fact aiter-bmm-arch) and AITER "
                f"on, MLAAttention re-quantizes the BF16 kv_b_proj of {ctx.model.model.name} for AITER's FP8 BMM, the "
                "path that makes MTP accept 0 % of drafts on gfx950; no report measures it on this architecture, so "
                "this is not refused"
            ),
            fix=f"Set {name}=0 to keep kv_b_proj in BF16 with MTP, and watch the spec-decode canary",
            upstream=rule.upstream,
        )
    ]


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


def _illegal_address_warning(rule: RuleInfo) -> Finding:
    return Finding(
        rule=rule.id,
        severity="warning",
        field="spec.parallelism.expert",
        value="false",
        problem=(
            "without expert parallelism the reported setup died in memory profiling on vLLM 0.27.1 with "
            "hipErrorIllegalAddress; the root cause is unknown"
        ),
        fix="Prefer expert: true; glmops does not guess a fix for this one",
        upstream=rule.upstream,
    )


VLLM_58729 = RuleInfo(
    id="vllm-58729",
    title="MXFP4 MoE on Blackwell ignores the expert map under expert parallelism",
    upstream="https://github.com/vllm-project/vllm/issues/58729",
    affected=(
        "0.26.0-0.31.x: compressed-tensors W4A4 MXFP4 checkpoint, SM100-family GPU, expert parallelism "
        "with TP x DP > 1 (--moe-backend marlin does not avoid it; b12x from 0.30.0 and the FlashInfer MoE-EP "
        "backends from 0.32.0 do: other experts, checked by vLLM). Every version, with expert and data "
        "parallelism: the DeepEP high-throughput and FlashInfer NVLink all-to-all layouts, which the Cutlass "
        "MXFP4 experts cannot take, and the batched layouts of DeepEP low-latency and nixl_ep (from 0.34.0 also "
        "DeepEP v2's padded rows), which neither the Cutlass nor the Marlin MXFP4 experts take (0.32.0+ fails only "
        "after loading every weight)."
    ),
    patch="moe-mxfp4-expert-map",
    remedy=(
        "glmops' patched image (engine.vllmVersion without engine.image), vLLM >= 0.32.0, or tensor "
        "instead of expert parallelism; with an all-to-all layout the experts cannot take, allgather_reducescatter "
        "(auto), or for DeepEP high-throughput and (0.27.1+) FlashInfer NVLink one-sided the patched image with "
        "engine.env GLMOPS_MOE_MXFP4_BACKEND=marlin."
    ),
    remove_when="No supported vLLM version picks the Cutlass MXFP4 experts without honouring expert_map.",
    condition=(
        "model format compressed-tensors-mxfp4-w4a4 and accelerator archFamily sm100 and expert parallelism "
        "active (expert and tensor x data > 1, `moe-use-ep`). Then: refuse `spec.parallelism.expert` when the "
        "image is stock and `run_cutlass_moe_mxfp4` ignores expert_map (`cutlass-mxfp4-remaps`: below 0.32.0, "
        "or an unknown version). Otherwise, only when all-to-all kernels are built (data > 1, "
        "`moe-all2all-kernels`, `moe-sequence-parallel`), refuse `spec.engine.all2allBackend` (auto and "
        "`all2all-rewritten` names resolved as vLLM does) when it is batched (`moe-batched-all2all`) or padded "
        "(`moe-padded-all2all`) or rejected "
        "by the experts that run: Cutlass (`cutlass-mxfp4-rejected-all2all` of the newest version, which the "
        "patch also enforces) or, on the patched image with GLMOPS_MOE_MXFP4_BACKEND=marlin, Marlin "
        "(`marlin-rejected-all2all`). Not when --moe-backend is one the compressed-tensors MXFP4 method hands to "
        "the MXFP4 oracle (`ct-mxfp4-moe-backends-read`: b12x from 0.30.0, the flashinfer_moe_ep_* backends from "
        "0.32.0, deep_gemm from 0.34.0), which picks other experts and checks them while the model is built; "
        "--moe-backend marlin is not one of them and changes nothing."
    ),
    facts=(
        "moe-use-ep",
        "moe-all2all-kernels",
        "moe-sequence-parallel",
        "all2all-default",
        "all2all-rewritten",
        "moe-batched-all2all",
        "moe-padded-all2all",
        "cutlass-mxfp4-remaps",
        "cutlass-mxfp4-rejected-all2all",
        "marlin-rejected-all2all",
        "ct-mxfp4-moe-backends-read",
    ),
    check=vllm_58729,
)


VLLM_63170 = RuleInfo(
    id="vllm-63170",
    title="GLM-5.x sparse attention under pipeline parallelism reads stale top-k indices",
    upstream="https://github.com/vllm-project/vllm/issues/63170",
    affected=(
        "Every supported version below 0.34.0 (0.34.0 hands the top-k indices across pipeline stages itself on "
        "CUDA and ROCm): GlmMoeDsaForCausalLM with index_topk_freq > 1 (or an index_topk_pattern with S layers), "
        "pipeline > 1, a stage starting on a top-k reuse layer."
    ),
    patch="dsa-pp-topk-handoff",
    remedy=(
        "VLLM_PP_LAYER_PARTITION with every stage starting on a computing layer (Auto sets the most "
        "balanced one, e.g. 38,40 for PP2 and 18,20,20,20 for PP4 on 78 layers), glmops' patched image (below "
        "0.34.0), or vLLM >= 0.34.0."
    ),
    remove_when="The oldest supported vLLM version is 0.34.0 (`dsa-pp-topk-sent` on CUDA and ROCm).",
    condition=(
        "architecture GlmMoeDsaForCausalLM and pipeline > 1 and the image lacks the patch and vLLM does not hand "
        "the top-k across stages on this platform (`dsa-pp-topk-sent`; a version glmops has not checked that is "
        "newer than every checked one is judged by the newest, and warned on rather than refused) and the split "
        "(VLLM_PP_LAYER_PARTITION, else vLLM's default split, `pp-default-split`) starts a stage after the first "
        "on a layer that reuses top-k indices (the checkpoint's index_topk_pattern where it has one, "
        "`dsa-topk-pattern`, else `dsa-topk-reuse` with its index_topk_freq and index_skip_topk_offset). A "
        "VLLM_PP_LAYER_PARTITION that vLLM would refuse (entry count, sum, not integers) or that gives a stage "
        "fewer than one layer (vLLM does not refuse it at start: it fails later) is refused too."
    ),
    facts=("pp-default-split", "dsa-topk-reuse", "dsa-topk-pattern", "dsa-pp-topk-sent"),
    check=vllm_63170,
)


VLLM_52833 = RuleInfo(
    id="vllm-52833",
    title="GLM-5.2-MXFP4 MTP accepts 0 % of drafts on MI355X",
    upstream="https://github.com/vllm-project/vllm/issues/52833",
    affected=(
        "gfx950 (MI355X/MI350X) with MTP speculative decoding and a BF16 MLA kv_b_proj: checkpoints keeping MLA "
        "attention in BF16 (amd/GLM-5.2-MXFP4) and the BF16 checkpoints (zai-org/GLM-5.2, zai-org/GLM-5.3-BF16, "
        "GLM-5, GLM-5.1), with AITER on and its FP4 or FP8 BMM on: on by default below 0.33.0, and in 0.33.0 "
        "when switched on. Without expert parallelism the reported setup crashed on 0.27.1 with "
        "hipErrorIllegalAddress (warning; cause unknown). Exempt: FP8 checkpoints (kv_b_proj is FP8, so the FP4 "
        "BMM is skipped and the FP8 BMM is AITER's designed path for them) and gfx942 (no FP4 BMM; no report of "
        "the FP8 BMM losing MTP drafts there: warned on when the FP8 BMM re-quantizes a BF16 kv_b_proj, "
        "`aiter-bmm-arch`); the spec-decode canary watches both."
    ),
    patch="rocm-mla-bf16-bmm",
    remedy=(
        "VLLM_ROCM_USE_AITER_FP4BMM=0 and VLLM_ROCM_USE_AITER_FP8BMM=0 (both: with FP4 off the FP8 BMM takes "
        "over), or glmops' patched ROCm image (below 0.33.0; offered only where the catalog builds it with the "
        "patch) without switching either on."
    ),
    remove_when="The oldest supported vLLM version is 0.33.0 (both switches default off there).",
    condition=(
        "accelerator architecture gfx950 and the model's kv_b_proj is BF16 (format bf16, or mla-attention in "
        "bf16Modules: `mla-fp4bmm-needs-bf16`) and speculative method mtp and VLLM_ROCM_USE_AITER on "
        "(unset counts as on: glmops renders it as 1; `aiter-bmm-needs-master`) and VLLM_ROCM_USE_AITER_FP4BMM "
        "or VLLM_ROCM_USE_AITER_FP8BMM on, each read as vLLM reads it: unset means the version's default, "
        "otherwise on only for `true`/`1` in any case (`aiter-switch-defaults`). On the patched image only a "
        "switch set on explicitly counts (the patch keeps BF16 kv_b_proj out of both BMMs otherwise). On gfx942 "
        "(`aiter-bmm-arch`: no FP4 BMM) the same reading of the FP8 BMM switch gives a warning, not a refusal."
    ),
    facts=("aiter-switch-defaults", "aiter-bmm-needs-master", "aiter-bmm-arch", "mla-fp4bmm-needs-bf16"),
    check=vllm_52833,
)

KNOWN_ISSUES: tuple[RuleInfo, ...] = (VLLM_58729, VLLM_63170, VLLM_52833)
