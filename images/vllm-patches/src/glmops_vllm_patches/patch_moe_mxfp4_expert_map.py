"""Patch `moe-mxfp4-expert-map` (vllm-58729): MXFP4 MoE on Blackwell must honour the expert map under EP.

vLLM 0.26.0-0.31.x: `CutlassExpertsMxfp4.apply` gets `expert_map` and ignores it, so global expert ids index the
rank's local weights and the MoE answers with the wrong experts, silently. Here the wrapper maps the ids to local
slots first (routes to experts on other ranks: a valid dummy slot and weight 0, see `ops_moe`).

Every supported version: the compressed-tensors and (0.27.1+) INC W4A4 MXFP4 methods pick the CUTLASS experts by device
capability alone. The wrapped `__init__` then (a) refuses, at model construction and with the flag and the fix,
the all-to-all backends whose token layout the CUTLASS kernel cannot take (DeepEP high-throughput, FlashInfer NVLink;
vLLM 0.32.0 added this check to the kernel, 0.32/0.33 fail only after loading every weight, with no fix named),
(b) with `GLMOPS_MOE_MXFP4_BACKEND=marlin` runs this MoE on the Marlin MXFP4 experts instead (the reporter's
verified workaround; `--moe-backend marlin` does not reach these methods), and (c) with either choice refuses the
batched all-to-all layouts (DeepEP low-latency, NIXL EP: per-expert token batches), which neither the CUTLASS nor the
Marlin experts these methods build take (both standard format; the methods never build BatchedMarlinExperts), so
vLLM fails there only after loading every weight (<= 0.31 in FusedMoEExperts.__init__, 0.32+ in its MXFP4 oracle).
0.34.0 is still affected: CompressedTensorsW4A4Mxfp4MoEMethod.__init__ still picks CUTLASS by device capability
(compressed_tensors_moe_w4a4_mxfp4.py:71,77-79) unless --moe-backend is b12x, deep_gemm or a FlashInfer EP backend
(:68-76, those go through the oracle and are left alone), and refuses a layout only in make_mxfp4_moe_kernel
(oracle/mxfp4.py:2274), after loading; the layout moved to FusedMoEConfig.activation_format (fused_moe/config.py:1468),
where DeepEP v2 adds PaddedStandard rows, refused the same way (c).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from glmops_vllm_patches.base import Context, Patch, PatchInfo, Target, install, mark
from glmops_vllm_patches.version import Version, VersionRange

log = logging.getLogger("vllm.glmops_patches")

INFO = PatchInfo(
    name="moe-mxfp4-expert-map",
    issue="vllm-58729",
    issue_url="https://github.com/vllm-project/vllm/issues/58729",
    prs=(
        "fixed upstream in v0.32.0: run_cutlass_moe_mxfp4 takes expert_map and remaps ids to local slots",
        "https://github.com/vllm-project/vllm/pull/51158 (related: MXFP4 grouped GEMM on SM12x, re-check per version)",
    ),
    why=(
        "A compressed-tensors (or INC) W4A4 MXFP4 MoE checkpoint such as GLM-5.3-MXFP4 on SM100-family GPUs with "
        "expert parallelism: on vLLM 0.26.0-0.31.x CutlassExpertsMxfp4 ignores expert_map, so global expert ids "
        "index local weights and every MoE layer answers with the wrong experts (GSM8K near 0 %, no NaN, /health "
        "green). The methods pick CUTLASS by device capability alone and ignore --moe-backend marlin. On 0.32.0+ "
        "the kernel remaps ids but rejects the DeepEP high-throughput and FlashInfer NVLink all-to-all backends; "
        "the methods still pick it, so the server fails after loading every weight with no fix named. On every "
        "version the batched all-to-all layouts (deepep_low_latency, nixl_ep with EP and DP > 1) fail the same way "
        "after loading every weight, with CUTLASS and with Marlin: both experts take only the standard format."
    ),
    how=(
        "< 0.32.0: wrap CutlassExpertsMxfp4.apply to map topk ids through expert_map (routes to other ranks get "
        "slot 0 and weight 0; rows with no local route are zeroed when the router weight is applied on the input) "
        "and let _supports_parallel_config accept EP except DeepEP HT/FlashInfer NVLink, as 0.32.0 does; skipped "
        "where run_cutlass_moe_mxfp4 already takes expert_map. All versions: wrap the W4A4 MXFP4 methods' "
        "__init__ (compressed-tensors; INC from 0.27.1): a CUTLASS choice with DeepEP HT or FlashInfer NVLink "
        "all-to-all is refused at model construction naming --all2all-backend and the fix; "
        "GLMOPS_MOE_MXFP4_BACKEND=marlin "
        "(default cutlass) moves a CUTLASS choice to MarlinExperts; with either value a CUTLASS choice with a "
        "batched all-to-all layout (FusedMoEParallelConfig.use_batched_activation_format: DeepEP low-latency, "
        "NIXL EP; from 0.34.0 FusedMoEConfig.activation_format, which also names DeepEP v2's padded rows) is "
        "refused too (MarlinExperts takes only the standard format as well)."
    ),
    affected=VersionRange("0.26.0"),  # every supported version: the method guard; < 0.32.0 also the remap
    platforms=("cuda",),
    remove_when=(
        "the oldest supported vLLM is >= 0.32.0 and the W4A4 MXFP4 methods check the experts' parallel config "
        "before loading weights (or pick experts through the MoE oracle, batched layouts included) and honour "
        "--moe-backend marlin"
    ),
)

# Where vLLM keeps what the patch needs (the same modules in 0.26.0-0.34.0; 0.26.0 has no INC MXFP4 MoE method).
_CUTLASS = "vllm.model_executor.layers.fused_moe.experts.cutlass_moe"
_MARLIN = "vllm.model_executor.layers.fused_moe.experts.marlin_moe"
_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
_MOE_CONFIG = "vllm.model_executor.layers.fused_moe.config"
_CT = (
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
    "compressed_tensors_moe_w4a4_mxfp4"
)
_INC = "vllm.model_executor.layers.quantization.inc.schemes.inc_mxfp4_moe"

CUTLASS_EXPERTS = Target(_CUTLASS, "CutlassExpertsMxfp4")
CUTLASS_APPLY = Target(
    _CUTLASS,
    "CutlassExpertsMxfp4.apply",
    ("output", "hidden_states", "topk_weights", "topk_ids", "expert_map", "apply_router_weight_on_input"),
)
CUTLASS_PARALLEL = Target(_CUTLASS, "CutlassExpertsMxfp4._supports_parallel_config", ("moe_parallel_config",))
# Before 0.32.0 apply hands the ids to this function unchanged; from 0.32.0 it takes expert_map and remaps.
RUN_CUTLASS = Target(_CUTLASS, "run_cutlass_moe_mxfp4", ("topk_weights", "topk_ids", "apply_router_weight_on_input"))
RUN_CUTLASS_REMAPS = Target(_CUTLASS, "run_cutlass_moe_mxfp4", ("topk_ids", "expert_map"))
MARLIN_EXPERTS = Target(_MARLIN, "MarlinExperts")
# What the Marlin experts take is asked of them: 0.26.0 also refuses FlashInfer NVLink one-sided, 0.27.1+ takes it.
MARLIN_PARALLEL = Target(_MARLIN, "MarlinExpertsBase._supports_parallel_config", ("moe_parallel_config",))
MARLIN_BACKEND = Target(_ORACLE, "Mxfp4MoeBackend.MARLIN")
DEEPEP_HT = Target(_MOE_CONFIG, "FusedMoEParallelConfig.use_deepep_ht_kernels")
FI_NVL_TWO_SIDED = Target(_MOE_CONFIG, "FusedMoEParallelConfig.use_fi_nvl_two_sided_kernels")
FI_NVL_ONE_SIDED = Target(_MOE_CONFIG, "FusedMoEParallelConfig.use_fi_nvl_one_sided_kernels")
# DeepEP low-latency or NIXL EP all-to-all kernels: tokens arrive as per-expert batches (BatchedExperts format).
BATCHED_LAYOUT = Target(_MOE_CONFIG, "FusedMoEParallelConfig.use_batched_activation_format")
# From 0.34.0 the layout is a property of the MoE config the methods get (fused_moe/config.py:1468 activation_format):
# BatchedExperts as before, and PaddedStandard for DeepEP v2 (rows are an upper bound, padding marked by topk_ids -1),
# which the Standard-format CUTLASS and Marlin experts do not take either (modular_kernel.py:119 is_superset; vLLM
# refuses it only in make_mxfp4_moe_kernel, oracle/mxfp4.py:2242-2274, after loading every weight).
LAYOUT_ON_MOE_CONFIG = Version.parse("0.34.0")
ACTIVATION_FORMAT = Target(_MOE_CONFIG, "FusedMoEConfig.activation_format")
STANDARD_FORMAT = Target("vllm.model_executor.layers.fused_moe.modular_kernel", "FusedMoEActivationFormat.Standard")
CT_METHOD = Target(_CT, "CompressedTensorsW4A4Mxfp4MoEMethod")
CT_INIT = Target(_CT, "CompressedTensorsW4A4Mxfp4MoEMethod.__init__", ("moe",))
INC_METHOD = Target(_INC, "INCMxfp4MoEMethod")
INC_INIT = Target(_INC, "INCMxfp4MoEMethod.__init__", ("moe",))
INC_SINCE = Version.parse("0.27.1")  # INC's W4A4 MXFP4 MoE method first ships in 0.27.1

UPSTREAM_REMAP = Version.parse("0.32.0")
BACKEND_ENV = "GLMOPS_MOE_MXFP4_BACKEND"
BACKENDS = ("cutlass", "marlin")

# What the wrapped methods read when a model is built; set by apply().
_settings: dict[str, Any] = {"backend": "cutlass", "version": None, "standard_format": None}
_logged: set[str] = set()


class UnsupportedMoEDeployment(ValueError):
    """This MXFP4 MoE with this all-to-all backend would be computed wrongly or not at all: do not start."""


def method_inits(version: Version) -> tuple[tuple[Target, Target], ...]:
    """The W4A4 MXFP4 MoE methods (class, __init__) that pick the CUTLASS experts in `version`."""
    return ((CT_METHOD, CT_INIT), *(((INC_METHOD, INC_INIT),) if version >= INC_SINCE else ()))


def layout_targets(version: Version) -> tuple[Target, ...]:
    """What tells the patch the token layout the all-to-all hands the experts, in `version`."""
    if version >= LAYOUT_ON_MOE_CONFIG:
        return (ACTIVATION_FORMAT, STANDARD_FORMAT)
    return (BATCHED_LAYOUT,)


def targets(ctx: Context) -> tuple[Target, ...]:
    common = (
        CUTLASS_EXPERTS,
        MARLIN_EXPERTS,
        MARLIN_PARALLEL,
        MARLIN_BACKEND,
        DEEPEP_HT,
        FI_NVL_TWO_SIDED,
        FI_NVL_ONE_SIDED,
        *layout_targets(ctx.version),
    )
    methods = tuple(t for pair in method_inits(ctx.version) for t in pair)
    if ctx.version < UPSTREAM_REMAP:
        return (*common, CUTLASS_APPLY, CUTLASS_PARALLEL, RUN_CUTLASS, *methods)
    # The kernel remaps itself: require that it still does, since the patch then leaves apply alone.
    return (*common, Target(_CUTLASS, "CutlassExpertsMxfp4.apply", ("expert_map",)), RUN_CUTLASS_REMAPS, *methods)


def backend_choice(env: Mapping[str, str]) -> str:
    """GLMOPS_MOE_MXFP4_BACKEND: `cutlass` (default: vLLM's choice, fixed) or `marlin`; anything else refuses."""
    value = env.get(BACKEND_ENV, "").strip().lower() or "cutlass"
    if value == "auto":
        value = "cutlass"
    if value not in BACKENDS:
        raise ValueError(
            f"{BACKEND_ENV}: {value!r}: not a MXFP4 MoE experts choice (glmops patch {INFO.name}, {INFO.issue_url}). "
            f"Use one of {', '.join(BACKENDS)}, or leave it unset."
        )
    return value


def apply(ctx: Context, found: Mapping[Target, Any]) -> str:
    backend = backend_choice(ctx.env)
    standard = found[STANDARD_FORMAT] if ctx.version >= LAYOUT_ON_MOE_CONFIG else None
    _settings.update(backend=backend, version=ctx.version, standard_format=standard)
    cutlass_cls = found[CUTLASS_EXPERTS]
    done = []
    if ctx.version >= UPSTREAM_REMAP:
        done.append("vLLM remaps expert ids in run_cutlass_moe_mxfp4 itself, CutlassExpertsMxfp4.apply left alone")
    elif "expert_map" in inspect.signature(found[RUN_CUTLASS]).parameters:
        done.append("this build's run_cutlass_moe_mxfp4 already takes expert_map, CutlassExpertsMxfp4.apply left alone")
    else:
        _install(cutlass_cls, "apply", _wrap_experts_apply(found[CUTLASS_APPLY]))
        _install(cutlass_cls, "_supports_parallel_config", staticmethod(_marked(supports_parallel_config)))
        done.append(
            "CutlassExpertsMxfp4.apply maps expert ids through expert_map (other ranks' routes: slot 0, weight 0), "
            "_supports_parallel_config accepts EP except DeepEP HT/FlashInfer NVLink"
        )
    inits = method_inits(ctx.version)
    for method, init in inits:
        cls = found[method]
        _install(
            cls, "__init__", _wrap_method_init(found[init], cutlass_cls, found[MARLIN_EXPERTS], found[MARLIN_BACKEND])
        )
    names = "compressed-tensors, INC" if len(inits) > 1 else "compressed-tensors"
    done.append(
        f"W4A4 MXFP4 methods ({names}) refuse CUTLASS with DeepEP HT/FlashInfer NVLink all-to-all "
        f"and either experts with batched all-to-all (DeepEP LL, NIXL EP); MXFP4 MoE experts: {backend} ({BACKEND_ENV})"
    )
    return "; ".join(done)


def supports_parallel_config(moe_parallel_config: Any) -> bool:
    """What the CUTLASS MXFP4 experts handle once they honour expert_map: EP except the rejected all-to-all layouts."""
    return rejected_all2all(moe_parallel_config) is None


def rejected_all2all(moe_parallel_config: Any) -> str | None:
    """The configured all-to-all backend when the CUTLASS MXFP4 kernel cannot take its token layout, else None."""
    pc = moe_parallel_config
    if pc.use_deepep_ht_kernels or pc.use_fi_nvl_two_sided_kernels or pc.use_fi_nvl_one_sided_kernels:
        return str(getattr(pc, "all2all_backend", "?"))
    return None


def _wrap_experts_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def apply(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        expert_map = bound.arguments.get("expert_map")
        if expert_map is None:
            return original(*args, **kwargs)
        from glmops_vllm_patches.ops_moe import remap_routes_to_local, zero_rows_without_local_route

        routes = remap_routes_to_local(bound.arguments["topk_ids"], bound.arguments["topk_weights"], expert_map)
        bound.arguments["topk_ids"] = routes.ids
        bound.arguments["topk_weights"] = routes.weights
        result = original(*bound.args, **bound.kwargs)
        if bound.arguments.get("apply_router_weight_on_input"):
            zero_rows_without_local_route(bound.arguments["output"], routes.is_local)
        return result

    return _marked(apply)


def _wrap_method_init(
    original: Callable[..., Any], cutlass_cls: type, marlin_cls: type, marlin_backend: Any
) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, moe: Any, *args: Any, **kwargs: Any) -> None:
        original(self, moe, *args, **kwargs)
        if getattr(self, "experts_cls", None) is cutlass_cls:
            _check_cutlass_choice(self, moe, marlin_cls, marlin_backend)

    return _marked(__init__)


def _check_cutlass_choice(method: Any, moe: Any, marlin_cls: type, marlin_backend: Any) -> None:
    """The method picked the CUTLASS experts: refuse a layout the experts it runs cannot take, move it to Marlin."""
    pc = moe.moe_parallel_config
    rejected = rejected_all2all(pc)
    where = f"{type(method).__name__}"
    _refuse_non_standard_layout(moe, where)
    marlin_takes = bool(marlin_cls._supports_parallel_config(pc))  # type: ignore[attr-defined]
    if _settings["backend"] == "marlin":
        if not marlin_takes:
            raise UnsupportedMoEDeployment(
                f"--all2all-backend: {rejected}: neither the CUTLASS nor the Marlin MXFP4 MoE experts take this "
                f"all-to-all layout with expert parallelism ({where}; glmops patch {INFO.name}, {INFO.issue_url}). "
                "Use --all2all-backend allgather_reducescatter."
            )
        method.use_cutlass_mxfp4 = False
        method.mxfp4_backend = marlin_backend
        method.experts_cls = marlin_cls
        if where not in _logged:
            _logged.add(where)
            log.info("glmops patch %s: %s runs its MoE on MarlinExperts (%s=marlin)", INFO.name, where, BACKEND_ENV)
        return
    if rejected is not None:
        version = _settings["version"]
        outcome = (
            "vLLM would route tokens to the wrong experts and serve wrong answers"
            if version is not None and version < UPSTREAM_REMAP
            else "vLLM would refuse it only after loading every weight"
        )
        # Marlin takes every layout CUTLASS rejects but the FlashInfer two-sided one (0.26.0: nor one-sided).
        marlin = f", or set {BACKEND_ENV}=marlin to run this MoE on Marlin" if marlin_takes else ""
        raise UnsupportedMoEDeployment(
            f"--all2all-backend: {rejected}: the CUTLASS MXFP4 MoE experts that {where} picks on this GPU cannot "
            f"take this all-to-all layout with expert parallelism; {outcome} (glmops patch {INFO.name}, "
            f"{INFO.issue_url}). Use --all2all-backend allgather_reducescatter{marlin}."
        )


def non_standard_layout(moe: Any) -> str | None:
    """How the all-to-all hands the experts their tokens when not one row per token (None: standard).

    CUTLASS and MarlinExperts take only the standard layout; DeepEP low-latency / NIXL EP hand per-expert batches, and
    from 0.34.0 DeepEP v2 hands padded rows (the MoE config's activation_format says which).
    """
    standard = _settings["standard_format"]
    if standard is None:  # < 0.34.0: the parallel config says whether the layout is batched
        batched = moe.moe_parallel_config.use_batched_activation_format
        return "per-expert token batches (batched format)" if batched else None
    fmt = moe.activation_format
    if fmt == standard:
        return None
    if getattr(fmt, "is_batched", False):
        return "per-expert token batches (batched format)"
    return f"{fmt.name} rows (a row count that is only an upper bound, padding rows among them)"


def _refuse_non_standard_layout(moe: Any, where: str) -> None:
    """Refuse a layout that neither the CUTLASS nor the Marlin experts the method builds take."""
    layout = non_standard_layout(moe)
    if layout is None:
        return
    backend = getattr(moe.moe_parallel_config, "all2all_backend", "?")
    raise UnsupportedMoEDeployment(
        f"--all2all-backend: {backend}: this all-to-all hands the MoE experts {layout}; neither the CUTLASS nor "
        f"the Marlin MXFP4 MoE experts that {where} builds take it, so vLLM would fail only after loading every "
        f"weight (glmops patch {INFO.name}, {INFO.issue_url}). Use --all2all-backend allgather_reducescatter "
        f"(deepep_high_throughput works with {BACKEND_ENV}=marlin)."
    )


def _marked(func: Callable[..., Any]) -> Callable[..., Any]:
    return mark(func, INFO.name)


def _install(cls: type, name: str, new: Any) -> None:
    install(cls, name, new, INFO.name)


PATCH = Patch(info=INFO, targets=targets, apply=apply)
