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
    condition: str  # the exact condition the rule checks, in terms of the spec and the facts below
    facts: tuple[str, ...]  # ids of the vllm_facts it reads (docs/rules.md prints their source lines)


KNOWN_ISSUES: tuple[RuleInfo, ...] = (
    RuleInfo(
        id="vllm-58729",
        title="MXFP4 MoE on Blackwell ignores the expert map under expert parallelism",
        upstream="https://github.com/vllm-project/vllm/issues/58729",
        affected=(
            "0.27.1-0.31.x: compressed-tensors W4A4 MXFP4 checkpoint, SM100-family GPU, expert parallelism "
            "with TP x DP > 1 (--moe-backend marlin does not avoid it). Every version, with expert and data "
            "parallelism: the DeepEP high-throughput and FlashInfer NVLink all-to-all layouts, which the Cutlass "
            "MXFP4 experts cannot take, and the batched layouts of DeepEP low-latency and nixl_ep, which neither "
            "the Cutlass nor the Marlin MXFP4 experts take (0.32.0+ fails only after loading every weight)."
        ),
        patch="moe-mxfp4-expert-map",
        remedy=(
            "glmops' patched image (engine.vllmVersion without engine.image), vLLM >= 0.32.0, or tensor "
            "instead of expert parallelism; with an all-to-all layout the experts cannot take, allgather_reducescatter "
            "(auto), or for DeepEP high-throughput and FlashInfer NVLink one-sided the patched image with engine.env "
            "GLMOPS_MOE_MXFP4_BACKEND=marlin."
        ),
        remove_when="No supported vLLM version picks the Cutlass MXFP4 experts without honouring expert_map.",
        condition=(
            "model format compressed-tensors-mxfp4-w4a4 and accelerator archFamily sm100 and expert parallelism "
            "active (expert and tensor x data > 1, `moe-use-ep`). Then: refuse `spec.parallelism.expert` when the "
            "image is stock and `run_cutlass_moe_mxfp4` ignores expert_map (`cutlass-mxfp4-remaps`: below 0.32.0, "
            "or an unknown version). Otherwise, only when all-to-all kernels are built (data > 1, "
            "`moe-all2all-kernels`, `moe-sequence-parallel`), refuse `spec.engine.all2allBackend` (auto and "
            "`all2all-rewritten` names resolved as vLLM does) when it is batched (`moe-batched-all2all`) or rejected "
            "by the experts that run: Cutlass (`cutlass-mxfp4-rejected-all2all` of the newest version, which the "
            "patch also enforces) or, on the patched image with GLMOPS_MOE_MXFP4_BACKEND=marlin, Marlin "
            "(`marlin-rejected-all2all`). `ct-mxfp4-moe-backends-read`: --moe-backend marlin changes nothing."
        ),
        facts=(
            "moe-use-ep",
            "moe-all2all-kernels",
            "moe-sequence-parallel",
            "all2all-default",
            "all2all-rewritten",
            "moe-batched-all2all",
            "cutlass-mxfp4-remaps",
            "cutlass-mxfp4-rejected-all2all",
            "marlin-rejected-all2all",
            "ct-mxfp4-moe-backends-read",
        ),
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
        condition=(
            "architecture GlmMoeDsaForCausalLM and pipeline > 1 and the image lacks the patch and the split "
            "(VLLM_PP_LAYER_PARTITION, else vLLM's default split, `pp-default-split`) starts a stage after the first "
            "on a layer that reuses top-k indices (`dsa-topk-reuse` with the checkpoint's index_topk_freq and "
            "index_skip_topk_offset). A VLLM_PP_LAYER_PARTITION that vLLM would refuse (entry count, sum, not "
            "integers) or that gives a stage fewer than one layer (vLLM does not refuse it at start: it fails "
            "later) is refused too."
        ),
        facts=("pp-default-split", "dsa-topk-reuse"),
    ),
    RuleInfo(
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
            "the FP8 BMM losing MTP drafts there); the spec-decode canary watches both."
        ),
        patch="rocm-mla-bf16-bmm",
        remedy=(
            "VLLM_ROCM_USE_AITER_FP4BMM=0 and VLLM_ROCM_USE_AITER_FP8BMM=0 (both: with FP4 off the FP8 BMM takes "
            "over), or glmops' patched ROCm image (below 0.33.0) without switching either on."
        ),
        remove_when="The oldest supported vLLM version is 0.33.0 (both switches default off there).",
        condition=(
            "accelerator architecture gfx950 and the model's kv_b_proj is BF16 (format bf16, or mla-attention in "
            "bf16Modules: `mla-fp4bmm-needs-bf16`) and speculative method mtp and VLLM_ROCM_USE_AITER on "
            "(unset counts as on: glmops renders it as 1; `aiter-bmm-needs-master`) and VLLM_ROCM_USE_AITER_FP4BMM "
            "or VLLM_ROCM_USE_AITER_FP8BMM on, each read as vLLM reads it: unset means the version's default, "
            "otherwise on only for `true`/`1` in any case (`aiter-switch-defaults`). On the patched image only a "
            "switch set on explicitly counts (the patch keeps BF16 kv_b_proj out of both BMMs otherwise)."
        ),
        facts=("aiter-switch-defaults", "aiter-bmm-needs-master", "mla-fp4bmm-needs-bf16"),
    ),
)

RULES_BY_ID = {r.id: r for r in KNOWN_ISSUES}
