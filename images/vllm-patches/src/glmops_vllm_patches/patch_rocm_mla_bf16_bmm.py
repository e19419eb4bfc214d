"""Patch rocm-mla-bf16-bmm (vllm-52833): keep a checkpoint's BF16 MLA up-projections out of AITER's FP4/FP8 BMM.

Two modes, chosen by GLMOPS_ROCM_MLA_BMM:
- `per-layer` (default): wrap `MLAAttention.process_weights_after_loading`. Before vLLM derives W_UK/W_UV, a layer
  whose `kv_b_proj` is unquantized (no quantization method, 16/32-bit float weight) gets both AITER BMM flags off,
  so vLLM takes its own BF16 path (W_UK_T, W_UV in the activation dtype) for that layer and, because the forward
  reads the same flags, uses the BF16 `torch.bmm` there. Quantized `kv_b_proj` layers keep vLLM's behaviour.
- `global-off`: set VLLM_ROCM_USE_AITER_FP4BMM=0 and VLLM_ROCM_USE_AITER_FP8BMM=0 (the maintainer-verified
  remedy, and 0.33.0's default) and refresh `rocm_aiter_ops`' cached flags. Child processes inherit the variables.
In both modes a VLLM_ROCM_USE_AITER_*BMM variable the user set explicitly is never overridden.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from glmops_vllm_patches.base import Context, Patch, PatchInfo, PatchTargetMissing, Target, mark, marked
from glmops_vllm_patches.version import Version, VersionRange

log = logging.getLogger("vllm.glmops_patches.rocm_mla_bf16_bmm")

INFO = PatchInfo(
    name="rocm-mla-bf16-bmm",
    issue="vllm-52833",
    issue_url="https://github.com/vllm-project/vllm/issues/52833",
    prs=(
        "https://github.com/vllm-project/vllm/pull/53123",
        "https://github.com/vllm-project/vllm/pull/48051",
    ),
    why=(
        "amd/GLM-5.2-MXFP4 keeps every MLA weight, kv_b_proj included, in BF16. With AITER on ROCm, "
        "MLAAttention re-quantizes the BF16 W_UK/W_UV to MXFP4 (FP4 BMM) or FP8 (FP8 BMM) after loading; on "
        "MI355X the MTP drafter then accepts 0 % of its drafts (0/378 tokens) while answers still look fine. "
        "VLLM_ROCM_USE_AITER_FP4BMM / _FP8BMM default on through 0.32.x."
    ),
    how=(
        "per-layer (default, GLMOPS_ROCM_MLA_BMM=per-layer): MLAAttention.process_weights_after_loading is wrapped; "
        "a layer whose kv_b_proj is unquantized gets is_aiter_triton_fp4_bmm_enabled and "
        "is_aiter_triton_fp8_bmm_enabled set False before vLLM builds W_UK_T/W_UV, so it keeps BF16 weights and the "
        "BF16 bmm; quantized kv_b_proj layers are untouched. global-off (GLMOPS_ROCM_MLA_BMM=global-off): sets "
        "VLLM_ROCM_USE_AITER_FP4BMM=0 and VLLM_ROCM_USE_AITER_FP8BMM=0 and calls "
        "rocm_aiter_ops.refresh_env_variables(). A BMM variable the user set explicitly is never overridden."
    ),
    affected=VersionRange("0.26.0", "0.33.0"),
    platforms=("rocm",),
    remove_when=(
        "the oldest supported vLLM is 0.33.0 or later (both BMM switches default off there), or upstream decides "
        "per layer from the checkpoint's quantization config (the ROCm to-do comment in 0.33.0's MLAAttention.__init__)"
    ),
)

MODE_ENV = "GLMOPS_ROCM_MLA_BMM"
MODES = ("per-layer", "global-off")
FP4_ENV = "VLLM_ROCM_USE_AITER_FP4BMM"
FP8_ENV = "VLLM_ROCM_USE_AITER_FP8BMM"
FP4_FLAG = "is_aiter_triton_fp4_bmm_enabled"  # MLAAttention instance attributes set in __init__, read in forward
FP8_FLAG = "is_aiter_triton_fp8_bmm_enabled"

MLA_MODULE = "vllm.model_executor.layers.attention.mla_attention"
PROCESS_WEIGHTS = Target(MLA_MODULE, "MLAAttention.process_weights_after_loading", ("self", "act_dtype"))
# 0.34.0 dropped the argument: the method reads self.act_dtype, set in __init__ (mla_attention.py:525, :1428-1429).
PROCESS_WEIGHTS_NO_ARG = Target(MLA_MODULE, "MLAAttention.process_weights_after_loading", ("self",))
ACT_DTYPE_ON_LAYER = Version.parse("0.34.0")
UNQUANTIZED = Target("vllm.model_executor.layers.linear", "UnquantizedLinearMethod")
REFRESH = Target("vllm._aiter_ops", "rocm_aiter_ops.refresh_env_variables", ("cls",))
FP4_CACHED = Target("vllm._aiter_ops", "rocm_aiter_ops._FP4BMM_ENABLED")
FP8_CACHED = Target("vllm._aiter_ops", "rocm_aiter_ops._FP8BMM_ENABLED")

_announced = False


def mode(ctx: Context) -> str:
    value = ctx.env.get(MODE_ENV, "").strip().lower() or "per-layer"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


def process_weights(version: Version) -> Target:
    """MLAAttention.process_weights_after_loading as `version` declares it."""
    return PROCESS_WEIGHTS_NO_ARG if version >= ACT_DTYPE_ON_LAYER else PROCESS_WEIGHTS


def targets(ctx: Context) -> tuple[Target, ...]:
    if mode(ctx) == "global-off":
        return (REFRESH, FP4_CACHED, FP8_CACHED)
    return (process_weights(ctx.version), UNQUANTIZED)


def skip(ctx: Context) -> str | None:
    mode(ctx)  # a misspelt mode fails loudly here, before anything is changed
    if FP4_ENV in ctx.env and FP8_ENV in ctx.env:
        return f"{FP4_ENV}={ctx.env[FP4_ENV]} and {FP8_ENV}={ctx.env[FP8_ENV]} were set explicitly: left as set"
    return None


def apply(ctx: Context, found: Mapping[Target, Any]) -> str:
    if mode(ctx) == "global-off":
        return _apply_global_off(ctx, found)
    return _apply_per_layer(ctx, found)


# --- per-layer ------------------------------------------------------------------------------------------------


def _apply_per_layer(ctx: Context, found: Mapping[Target, Any]) -> str:
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    current = MLAAttention.__dict__["process_weights_after_loading"]
    if marked(current, INFO.name):
        return "MLAAttention.process_weights_after_loading already wrapped"
    method = found[process_weights(ctx.version)]
    _require_flags_in_source(method)
    user = (FP4_ENV in ctx.env, FP8_ENV in ctx.env)
    MLAAttention.process_weights_after_loading = _wrap(method, found[UNQUANTIZED], user)
    kept = [f"{env}={ctx.env[env]} (set by the user)" for env in (FP4_ENV, FP8_ENV) if env in ctx.env]
    return (
        "MLAAttention.process_weights_after_loading wrapped: layers with an unquantized kv_b_proj keep BF16 "
        "W_UK_T/W_UV and the BF16 bmm" + (f"; kept {', '.join(kept)}" if kept else "")
    )


def _require_flags_in_source(method: Callable[..., Any]) -> None:
    """The flags are instance attributes (no Target can name them): check the method still reads both."""
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError) as exc:
        raise PatchTargetMissing(f"{PROCESS_WEIGHTS}: source not readable to check the BMM flags ({exc})") from exc
    missing = [flag for flag in (FP4_FLAG, FP8_FLAG) if flag not in source]
    if missing:
        raise PatchTargetMissing(f"{PROCESS_WEIGHTS}: no longer reads {', '.join(missing)}")


def _wrap(original: Callable[..., Any], unquantized_cls: type, user: tuple[bool, bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def process_weights_after_loading(self: Any, *args: Any, **kwargs: Any) -> Any:
        keep_bf16_bmm(self, unquantized_cls, user)
        return original(self, *args, **kwargs)  # (self, act_dtype) before 0.34.0, (self) from 0.34.0

    return mark(process_weights_after_loading, INFO.name)


def keep_bf16_bmm(layer: Any, unquantized_cls: type, user: tuple[bool, bool] = (False, False)) -> bool:
    """Turn a layer's AITER BMM flags off when its kv_b_proj is unquantized; True when the layer was changed."""
    from glmops_vllm_patches import ops_mla

    for flag in (FP4_FLAG, FP8_FLAG):
        if not hasattr(layer, flag):
            raise PatchTargetMissing(f"{MLA_MODULE}::MLAAttention: instance attribute {flag} not found")
    before = (bool(getattr(layer, FP4_FLAG)), bool(getattr(layer, FP8_FLAG)))
    if not any(before):
        return False
    kv_b_proj = _base_layer(getattr(layer, "kv_b_proj", None))
    weight = getattr(kv_b_proj, "weight", None)
    method = getattr(kv_b_proj, "quant_method", None)
    full = ops_mla.keeps_full_precision(
        getattr(weight, "dtype", None), method is None or isinstance(method, unquantized_cls)
    )
    after = ops_mla.bmm_flags(*before, full_precision=full, user_fp4=user[0], user_fp8=user[1])
    if after == before:
        return False
    setattr(layer, FP4_FLAG, after[0])
    setattr(layer, FP8_FLAG, after[1])
    global _announced
    name = getattr(layer, "layer_name", type(layer).__name__)
    level = logging.DEBUG if _announced else logging.INFO  # one INFO line per process, the other layers at DEBUG
    _announced = True
    log.log(level, "%s: kv_b_proj is unquantized %s: AITER FP4/FP8 BMM off, BF16 bmm kept", name, weight.dtype)
    return True


def _base_layer(layer: Any) -> Any:
    """LoRA wrappers keep the quantization method on `base_layer` (as vLLM's own dequant helper unwraps it)."""
    while hasattr(layer, "base_layer") and hasattr(layer.base_layer, "quant_method"):
        layer = layer.base_layer
    return layer


# --- global-off -----------------------------------------------------------------------------------------------


def _apply_global_off(ctx: Context, found: Mapping[Target, Any]) -> str:
    from vllm._aiter_ops import rocm_aiter_ops

    done: list[str] = []
    for env in (FP4_ENV, FP8_ENV):
        if env in ctx.env:
            done.append(f"kept {env}={ctx.env[env]} (set by the user)")
            continue
        os.environ[env] = "0"
        done.append(f"{env}=0")
    rocm_aiter_ops.refresh_env_variables()
    # vLLM caches its environment after start-up; should that cache already be on, set the cached flags directly.
    for env, cached in ((FP4_ENV, "_FP4BMM_ENABLED"), (FP8_ENV, "_FP8BMM_ENABLED")):
        if env not in ctx.env and getattr(rocm_aiter_ops, cached):
            setattr(rocm_aiter_ops, cached, False)
    return "; ".join(done) + "; rocm_aiter_ops.refresh_env_variables() called"


PATCH = Patch(info=INFO, targets=targets, apply=apply, skip=skip)
