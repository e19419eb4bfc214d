"""Pure torch logic of the rocm-mla-bf16-bmm patch: which MLA layers keep their BF16 up-projections.

vLLM's MLA layer derives W_UK / W_UV from `kv_b_proj` after loading. With AITER on ROCm it re-quantizes them for an
FP4 (MXFP4) or FP8 batched matmul, even when the checkpoint kept `kv_b_proj` in BF16 on purpose. The wrapper in
`patch_rocm_mla_bf16_bmm` asks `bmm_flags` what a layer's two BMM flags must be before vLLM processes its weights;
the tests use the same functions, plus `reference_split`, the layout the BF16 path must produce.
"""

from __future__ import annotations

import torch

# Floating-point dtypes a checkpoint stores unquantized weights in. FP8 (1 byte) and packed integer layouts are not.
FULL_PRECISION = (torch.bfloat16, torch.float16, torch.float32)


def keeps_full_precision(weight_dtype: torch.dtype | None, unquantized_method: bool) -> bool:
    """True when `kv_b_proj` was left unquantized by the checkpoint: no quantization method and a 16/32-bit float.

    `unquantized_method` is False for any quantization method, online ones included (`--quantization fp8` on a BF16
    checkpoint asked for quantization, so its layers keep vLLM's behaviour).
    """
    return unquantized_method and weight_dtype in FULL_PRECISION


def bmm_flags(
    fp4: bool, fp8: bool, *, full_precision: bool, user_fp4: bool = False, user_fp8: bool = False
) -> tuple[bool, bool]:
    """The (FP4 BMM, FP8 BMM) flags a layer gets: both off for a full-precision `kv_b_proj`.

    A kernel the user switched on explicitly (`user_fp4`/`user_fp8`: its VLLM_ROCM_USE_AITER_*BMM variable was set)
    keeps vLLM's decision: the patch never overrides an explicit choice.
    """
    if not full_precision:
        return fp4, fp8
    return (fp4 and user_fp4), (fp8 and user_fp8)


def reference_split(
    weight: torch.Tensor, kv_lora_rank: int, num_heads: int, qk_nope_head_dim: int, v_head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`kv_b_proj.weight` ([N*(P+V), L], out x in) split into W_UK_T [N, P, L] and W_UV [N, L, V], dtype kept.

    Written from the MLA algebra (k_nope = kv_c @ W_UK, v = kv_c @ W_UV per head), independently of vLLM's code, so
    the tests can compare vLLM's BF16 path against it value for value.
    """
    expected = (num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank)
    if tuple(weight.shape) != expected:
        raise ValueError(f"kv_b_proj weight has shape {tuple(weight.shape)}, expected {expected}")
    per_head = weight.reshape(num_heads, qk_nope_head_dim + v_head_dim, kv_lora_rank)
    w_uk_t = per_head[:, :qk_nope_head_dim, :]  # [N, P, L]
    w_uv = per_head[:, qk_nope_head_dim:, :].transpose(1, 2)  # [N, L, V]
    return w_uk_t.contiguous(), w_uv.contiguous()
