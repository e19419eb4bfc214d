"""The known-issue rules glmops enforces, with what a person needs to judge and remove each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleInfo:
    id: str
    title: str
    upstream: str
    affected: str
    patch: str
    remedy: str
    remove_when: str


KNOWN_ISSUES: tuple[RuleInfo, ...] = (
    RuleInfo(
        id="vllm-58729",
        title="MXFP4 MoE on Blackwell ignores the expert map under expert parallelism",
        upstream="https://github.com/vllm-project/vllm/issues/58729",
        affected=(
            "0.27.1-0.31.x: compressed-tensors W4A4 MXFP4 checkpoint, SM100-family GPU, expert parallelism "
            "with TP x DP > 1 (--moe-backend marlin does not avoid it). Every version: the DeepEP "
            "high-throughput and FlashInfer NVLink all-to-all backends, which the Cutlass MXFP4 experts cannot "
            "take (0.32.0+ fails only after loading every weight)."
        ),
        patch="moe-mxfp4-expert-map",
        remedy=(
            "glmops' patched image (engine.vllmVersion without engine.image), vLLM >= 0.32.0, or tensor "
            "instead of expert parallelism; with DeepEP HT or FlashInfer NVLink all-to-all, another backend, or "
            "the patched image with engine.env GLMOPS_MOE_MXFP4_BACKEND=marlin (not FlashInfer NVLink two-sided)."
        ),
        remove_when="No supported vLLM version picks the Cutlass MXFP4 experts without honouring expert_map.",
    ),
    RuleInfo(
        id="vllm-63170",
        title="GLM-5.x sparse attention under pipeline parallelism reads stale top-k indices",
        upstream="https://github.com/vllm-project/vllm/issues/63170",
        affected=(
            "Every supported version (still present in 0.33.0): GlmMoeDsaForCausalLM with index_topk_freq > 1, "
            "pipeline > 1, a stage starting on a top-k reuse layer."
        ),
        patch="dsa-pp-topk-handoff",
        remedy=(
            "VLLM_PP_LAYER_PARTITION with every stage starting on a computing layer (Auto sets the most "
            "balanced one, e.g. 38,40 for PP2 and 18,20,20,20 for PP4 on 78 layers), or glmops' patched image."
        ),
        remove_when=(
            "vLLM hands the top-k indices across pipeline stages (draft fix PR #59961) in every supported version."
        ),
    ),
    RuleInfo(
        id="vllm-52833",
        title="GLM-5.2-MXFP4 MTP accepts 0 % of drafts on MI355X",
        upstream="https://github.com/vllm-project/vllm/issues/52833",
        affected=(
            "< 0.33.0 on gfx950 (MI355X/MI350X): a checkpoint keeping MLA weights in BF16 (amd/GLM-5.2-MXFP4), "
            "MTP speculative decoding, AITER FP4/FP8 BMM not off. Without expert parallelism the same setup "
            "crashed on 0.27.1 with hipErrorIllegalAddress (warning; cause unknown)."
        ),
        patch="rocm-mla-bf16-bmm",
        remedy="VLLM_ROCM_USE_AITER_FP4BMM=0 and VLLM_ROCM_USE_AITER_FP8BMM=0, or glmops' patched ROCm image.",
        remove_when="The oldest supported vLLM version is 0.33.0 (both switches default off there).",
    ),
)

RULES_BY_ID = {r.id: r for r in KNOWN_ISSUES}
