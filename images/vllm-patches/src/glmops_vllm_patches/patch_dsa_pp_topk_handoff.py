"""Patch `dsa-pp-topk-handoff` (vllm-63170): pass GLM-5.x sparse-attention top-k rows across pipeline stages.

The DSA indexer of GlmMoeDsaForCausalLM computes top-k key indices only on some layers (GLM-5.x: 0, 1, 2, 6, 10,
..., 74); the others reuse the rows the last computing layer wrote into the rank's `topk_indices_buffer`. Under
pipeline parallelism only `hidden_states` and `residual` cross a stage boundary, so a stage whose first layer is a
reuse layer reads stale rows (the previous batch's, or uninitialised memory): fluent but wrong answers.

What this patch changes, on the classes vLLM builds for GLM-5.x on the platform (the generic
`deepseek_v2.GlmMoeDsaForCausalLM` and the platform's `deepseek_v32` `DeepseekV32ForCausalLM`; which of the two
the registry picks moved between 0.27.1 and 0.31.0, both are wrapped, the unused one stays idle; 0.26.0 has no ROCm
`deepseek_v32` module, so there only the generic class, the one its registry picks, is wrapped):
- `__init__` (after vLLM's): work out from the config's skip rule and the stage's layer range whether this stage
  receives rows (not first, first layer reuses) and whether it sends them (the next stage's first layer reuses);
  find the stage's top-k buffer; where it receives, make `make_empty_intermediate_tensors` pre-allocate the key
  as int32 `[N, index_topk]` (the runners `copy_` received keys into those buffers).
- `forward`: a receiving stage copies the received rows into its buffer before its first layer; a sending stage
  adds `topk_indices_buffer[:tokens]` to the IntermediateTensors it returns. Nothing changes on a stage boundary
  that starts on a computing layer, so nothing extra is sent there.
- TP: vLLM's `isend_tensor_dict` splits every key whose size divides by the TP size across the TP ranks and the
  receiver all-gathers it back (dtype-preserving). The indexer is replicated across TP ranks (ReplicatedLinear /
  disable_tp) and runs on the all-reduced hidden states, so every TP rank holds the same rows, the same property
  the split of `hidden_states` already relies on: the split is kept, and proven lossless for int32 rows.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from glmops_vllm_patches.base import Context, Patch, PatchInfo, PatchTargetMissing, Target, install, mark, marked
from glmops_vllm_patches.version import Version, VersionRange

log = logging.getLogger("vllm.glmops_patches")

INFO = PatchInfo(
    name="dsa-pp-topk-handoff",
    issue="vllm-63170",
    issue_url="https://github.com/vllm-project/vllm/issues/63170",
    prs=(
        "https://github.com/vllm-project/vllm/pull/59961",
        "https://github.com/sgl-project/sglang/pull/28513",
        "https://github.com/vllm-project/vllm-ascend/pull/15614",
    ),
    why=(
        "GLM-5.x (GlmMoeDsaForCausalLM) computes DSA top-k indices only on some layers (index_topk_freq=4, "
        "index_skip_topk_offset=3) and the others reuse the per-rank topk_indices_buffer; with "
        "--pipeline-parallel-size > 1 only hidden_states and residual cross a stage boundary, so a stage that starts "
        "on a reuse layer (PP2 default split: layer 39) attends to stale or uninitialised indices: fluent, wrong text."
    ),
    how=(
        "Wraps __init__ and forward of the GLM-5.x model classes: a stage whose next stage starts on a reuse layer "
        "adds topk_indices_buffer[:tokens] to its IntermediateTensors as 'glmops_topk_indices' (int32 "
        "[tokens, index_topk]); a stage that starts on a reuse layer pre-allocates that key as int32 in "
        "make_empty_intermediate_tensors and copies the received rows into its buffer before its first layer. "
        "vLLM's TP split of the tensor dict is kept (the rows are replicated across TP ranks)."
    ),
    # 0.34.0 sends the rows itself on CUDA and ROCm (model_executor/models/utils.py:1076 pp_topk_buffers, used by
    # models/deepseek_v32/nvidia/model.py:233,274,310 and amd/model.py:191,222,243): a second hand-off there would
    # be a bug, so the patch stands down from 0.34.0.
    affected=VersionRange("0.26.0", "0.34.0"),
    platforms=("cuda", "rocm"),
    remove_when=(
        "the oldest supported vLLM is 0.34.0 or later: 0.34.0 passes the DSA top-k rows across pipeline stages "
        "itself (pp_topk_buffers in vllm/model_executor/models/utils.py, used by the CUDA and ROCm deepseek_v32 "
        "models that serve GlmMoeDsaForCausalLM); tests/plugin/test_dsa_pp_topk_handoff.py proves it per version"
    ),
)

STATE_ATTR = "_glmops_topk_handoff"

_BASE = "vllm.model_executor.models.deepseek_v2"
_FORWARD_PARAMS = ("input_ids", "positions", "intermediate_tensors", "inputs_embeds")
# The platform's DSA module. The registry sends GlmMoeDsaForCausalLM to deepseek_v2 on every platform in 0.26.0 and
# 0.27.1; from 0.30.0 to vllm.models.deepseek_v32, whose __init__ picks nvidia on CUDA and, from 0.31.0, amd on ROCm
# (ROCm 0.30.0 falls back to deepseek_v2). 0.26.0 has no amd module: its deepseek_v32 refuses ROCm at import.
_DSA_CLASS = {
    "cuda": Target("vllm.models.deepseek_v32.nvidia.model", "DeepseekV32ForCausalLM"),
    "rocm": Target("vllm.models.deepseek_v32.amd.model", "DeepseekV32ForCausalLM"),
}
_ROCM_DSA_MODULE_SINCE = Version.parse("0.27.1")
_REGISTRY = Target("vllm.model_executor.models.registry", "_TEXT_GENERATION_MODELS")
# Where the registry may send GlmMoeDsaForCausalLM: both are covered by the wrapped classes above.
_KNOWN_GLM_MODULES = ("deepseek_v2", "vllm.models.deepseek_v32")


def _platform_class(ctx: Context) -> Target | None:
    """The platform's deepseek_v32 class, where the version has one for the platform."""
    if ctx.platform == "rocm" and ctx.version < _ROCM_DSA_MODULE_SINCE:
        return None
    return _DSA_CLASS[ctx.platform]


def targets(ctx: Context) -> tuple[Target, ...]:
    platform_class = _platform_class(ctx)
    return (
        Target(_BASE, "DeepseekV2ForCausalLM.__init__", ("vllm_config",)),
        Target(_BASE, "DeepseekV2ForCausalLM.forward", _FORWARD_PARAMS),
        Target(_BASE, "GlmMoeDsaForCausalLM"),
        *((platform_class,) if platform_class else ()),
        Target("vllm.sequence", "IntermediateTensors"),
        _REGISTRY,
    )


def apply(ctx: Context, found: Mapping[Target, Any]) -> str:
    entry = found[_REGISTRY].get("GlmMoeDsaForCausalLM")
    if not entry or entry[0] not in _KNOWN_GLM_MODULES:
        raise PatchTargetMissing(
            f"{_REGISTRY}: GlmMoeDsaForCausalLM maps to {entry!r}, not to a module this patch wraps "
            f"({', '.join(_KNOWN_GLM_MODULES)})"
        )
    intermediate_cls = found[Target("vllm.sequence", "IntermediateTensors")]
    platform_class = _platform_class(ctx)
    classes = [found[Target(_BASE, "GlmMoeDsaForCausalLM")], *([found[platform_class]] if platform_class else [])]
    wrapped = [f"{c.__module__}.{c.__qualname__}" for c in classes if _wrap_class(c, intermediate_cls)]
    names = ", ".join(wrapped) or "nothing new (already wrapped)"
    return (
        f"wrapped __init__/forward of {names}: stages whose next stage starts on a reuse layer send top-k rows as "
        f"int32 [tokens, index_topk] (registry: GlmMoeDsaForCausalLM -> {entry[0]})"
    )


def _wrap_class(cls: type, intermediate_cls: type) -> bool:
    """Wrap cls.__init__ and cls.forward once; False when both already carry our mark."""
    changed = False
    if not marked(cls.__dict__.get("__init__"), INFO.name):
        changed |= install(cls, "__init__", _wrap_init(cls.__init__), INFO.name)
    if not marked(cls.__dict__.get("forward"), INFO.name):
        changed |= install(cls, "forward", _wrap_forward(cls.forward, intermediate_cls), INFO.name)  # type: ignore[attr-defined]
    return changed


def _mark(func: Callable[..., Any]) -> Callable[..., Any]:
    return mark(func, INFO.name)


def _wrap_init(orig: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        install_handoff(self)

    return _mark(__init__)


def _wrap_forward(orig: Callable[..., Any], intermediate_cls: type) -> Callable[..., Any]:
    # Position of `intermediate_tensors` among the positional arguments after self.
    position = list(inspect.signature(orig).parameters).index("intermediate_tensors") - 1

    @functools.wraps(orig)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        state: _Handoff | None = getattr(self, STATE_ATTR, None)
        if state is None or not (state.plan.receives or state.plan.sends):
            return orig(self, *args, **kwargs)
        from glmops_vllm_patches import ops_dsa

        if state.plan.receives:
            received = kwargs.get("intermediate_tensors")
            if received is None and len(args) > position:
                received = args[position]
            if received is not None:
                ops_dsa.receive_rows(received.tensors, state.buffer)
        out = orig(self, *args, **kwargs)
        if state.plan.sends and isinstance(out, intermediate_cls):
            ops_dsa.attach_rows(out.tensors, state.buffer, out.tensors["hidden_states"].shape[0])
        return out

    return _mark(forward)


@dataclass(frozen=True)
class _Handoff:
    plan: Any  # ops_dsa.HandoffPlan
    buffer: Any  # torch.Tensor | None: the stage's topk_indices_buffer
    index_topk: int


def install_handoff(lm: Any) -> Any:
    """After the model is built: decide this stage's hand-off, find its buffer, pre-allocate the receive key.

    Raises PatchTargetMissing when the model lacks what the hand-off needs (vLLM moved it): refuse to serve.
    Returns the HandoffPlan (None for a model without DSA top-k).
    """
    from glmops_vllm_patches import ops_dsa

    inner = getattr(lm, "model", None)
    config = getattr(inner, "config", None) or getattr(lm, "config", None)
    if config is None or getattr(config, "index_topk", None) is None:
        return None
    missing = [a for a in ("start_layer", "end_layer") if not isinstance(getattr(inner, a, None), int)]
    if not callable(getattr(lm, "make_empty_intermediate_tensors", None)):
        missing.append("make_empty_intermediate_tensors")
    if missing:
        raise PatchTargetMissing(f"{type(lm).__qualname__}: built model lacks {', '.join(missing)}")
    plan = ops_dsa.handoff_plan(
        inner.start_layer, inner.end_layer, int(config.num_hidden_layers), **ops_dsa.reuse_rule_of(config)
    )
    buffer = None
    if plan.receives or plan.sends:
        buffer = find_topk_buffer(inner)
        if buffer is None:
            raise PatchTargetMissing(f"{type(lm).__qualname__}: no topk_indices_buffer in the built model")
    state = _Handoff(plan, buffer, int(config.index_topk))
    setattr(lm, STATE_ATTR, state)
    if plan.receives:
        lm.make_empty_intermediate_tensors = _with_topk_key(lm.make_empty_intermediate_tensors, state.index_topk)
    if plan.receives or plan.sends:
        log.info(
            "glmops patch %s: layers [%d, %d): %s top-k rows",
            INFO.name,
            plan.start_layer,
            plan.end_layer,
            " and ".join(w for w, on in (("receives", plan.receives), ("sends", plan.sends)) if on),
        )
    return plan


def _with_topk_key(orig: Callable[..., Any], index_topk: int) -> Callable[..., Any]:
    if marked(orig, INFO.name):
        return orig

    @functools.wraps(orig)
    def make_empty_intermediate_tensors(batch_size: int, dtype: Any, device: Any) -> Any:
        from glmops_vllm_patches import ops_dsa

        tensors = orig(batch_size=batch_size, dtype=dtype, device=device)
        tensors[ops_dsa.TOPK_KEY] = ops_dsa.empty_rows(batch_size, index_topk, device)
        return tensors

    return _mark(make_empty_intermediate_tensors)


def find_topk_buffer(inner: Any) -> Any:
    """The stage's shared top-k buffer: on the model (CUDA DSA model) or held by its layers (generic, ROCm)."""
    import torch

    holders = [inner]
    for module in inner.modules():
        holders += [module, getattr(module, "impl", None)]
    for holder in holders:
        buf = getattr(holder, "topk_indices_buffer", None)
        if isinstance(buf, torch.Tensor):
            return buf
    return None


PATCH = Patch(info=INFO, targets=targets, apply=apply)
