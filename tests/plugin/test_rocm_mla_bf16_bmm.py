"""rocm-mla-bf16-bmm (vllm-52833): BF16 kv_b_proj layers keep BF16 W_UK/W_UV instead of AITER's FP4/FP8 copies.

Static: every target exists in every proven version. Runtime: the real MLAAttention.process_weights_after_loading
of each version, run on a CPU layer with the AITER kernels stubbed (they need a ROCm GPU), before and after the
patch. Numeric: the ops the wrapper uses, and the BF16 path against the MLA algebra.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest
import torch
from glmops_vllm_patches import ops_mla
from glmops_vllm_patches import patch_rocm_mla_bf16_bmm as mla
from glmops_vllm_patches.base import Context
from glmops_vllm_patches.static import find_problem, module_file
from glmops_vllm_patches.version import Version

from tests.plugin import shared_vllm_runs
from tests.plugin.conftest import vllm_source

MODES = {"per-layer": {}, "global-off": {mla.MODE_ENV: "global-off"}}


def ctx(version: str, platform: str = "rocm", **env: str) -> Context:
    return Context(Version.parse(version), platform, env)


# --- static: the targets in the real sources --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_every_target_exists_in_every_proven_version(vllm_version: str, mode: str) -> None:
    root = vllm_source(vllm_version)
    needed = mla.targets(Context(Version.parse(vllm_version), "rocm", MODES[mode]))
    assert [find_problem(root, t) for t in needed] == [None] * len(needed)


def test_the_mla_layer_still_decides_by_the_two_instance_flags(vllm_version: str) -> None:
    path = module_file(vllm_source(vllm_version), mla.MLA_MODULE)
    assert path is not None
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "MLAAttention")
    methods = {n.name: ast.unparse(n) for n in cls.body if isinstance(n, ast.FunctionDef)}
    for method in ("__init__", "process_weights_after_loading", "_v_up_proj"):
        assert mla.FP4_FLAG in methods[method] and mla.FP8_FLAG in methods[method], method


# --- the guard ----------------------------------------------------------------------------------------------------

GUARD = [
    ("0.26.0", "rocm", {}, True),
    ("0.27.1", "rocm", {}, True),
    ("0.30.0", "rocm", {}, True),
    ("0.31.0", "rocm", {}, True),
    ("0.32.0", "rocm", {}, True),
    ("0.33.0", "rocm", {}, False),  # both BMM switches default off from 0.33.0
    ("0.32.0", "cuda", {}, False),
    ("0.32.0", "cpu", {}, False),
    ("0.32.0", "rocm", {"GLMOPS_PATCH_ROCM_MLA_BF16_BMM": "off"}, False),
    ("0.32.0", "rocm", {mla.FP4_ENV: "1", mla.FP8_ENV: "1"}, False),  # the user chose both kernels
    ("0.32.0", "rocm", {mla.FP8_ENV: "1"}, True),
    ("0.32.0", "rocm", {mla.MODE_ENV: "global-off"}, True),
]


@pytest.mark.parametrize(("version", "platform", "env", "applies"), GUARD)
def test_guard_applies_only_to_rocm_before_0_33(
    version: str, platform: str, env: dict[str, str], applies: bool
) -> None:
    assert mla.PATCH.decide(ctx(version, platform, **env)).apply is applies


def test_a_misspelt_mode_stops_the_server() -> None:
    with pytest.raises(ValueError, match="GLMOPS_ROCM_MLA_BMM"):
        mla.PATCH.decide(ctx("0.32.0", **{mla.MODE_ENV: "globaloff"}))


# --- numeric: the ops the wrapper uses (torch, CPU) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "unquantized", "keeps"),
    [
        (torch.bfloat16, True, True),
        (torch.float16, True, True),
        (torch.float32, True, True),
        (torch.bfloat16, False, False),  # online quantization asked for
        (torch.float8_e4m3fn, False, False),
        (torch.uint8, False, False),  # packed MXFP4
        (None, True, False),
    ],
)
def test_only_an_unquantized_float_kv_b_proj_keeps_full_precision(dtype: Any, unquantized: bool, keeps: bool) -> None:
    assert ops_mla.keeps_full_precision(dtype, unquantized) is keeps


@pytest.mark.parametrize(
    ("flags", "full", "user", "expected"),
    [
        ((True, True), True, (False, False), (False, False)),
        ((False, True), True, (False, False), (False, False)),
        ((True, True), False, (False, False), (True, True)),  # quantized checkpoint: vLLM's choice
        ((True, True), True, (False, True), (False, True)),  # the user switched FP8 BMM on explicitly
        ((False, False), True, (False, False), (False, False)),
    ],
)
def test_bmm_flags_turn_off_only_what_the_user_did_not_ask_for(
    flags: tuple[bool, bool], full: bool, user: tuple[bool, bool], expected: tuple[bool, bool]
) -> None:
    assert ops_mla.bmm_flags(*flags, full_precision=full, user_fp4=user[0], user_fp8=user[1]) == expected


def test_reference_split_is_the_mla_up_projection() -> None:
    lora, heads, nope, v = 64, 4, 32, 16
    weight = torch.randn(heads * (nope + v), lora, dtype=torch.float64)
    kv_c = torch.randn(5, lora, dtype=torch.float64)
    kv = (kv_c @ weight.T).view(5, heads, nope + v)  # what kv_b_proj(kv_c) computes
    w_uk_t, w_uv = ops_mla.reference_split(weight, lora, heads, nope, v)
    assert torch.allclose(torch.einsum("sl,npl->snp", kv_c, w_uk_t), kv[..., :nope])
    assert torch.allclose(torch.einsum("sl,nlv->snv", kv_c, w_uv), kv[..., nope:])


class _Unquantized:
    pass


def _layer(dtype: torch.dtype, method: object, fp4: bool = True, fp8: bool = True) -> Any:
    kv_b_proj = torch.nn.Linear(8, 8).to(dtype)
    kv_b_proj.quant_method = method  # type: ignore[assignment]
    layer = torch.nn.Module()
    layer.kv_b_proj = kv_b_proj
    layer.is_aiter_triton_fp4_bmm_enabled = fp4  # type: ignore[assignment]
    layer.is_aiter_triton_fp8_bmm_enabled = fp8  # type: ignore[assignment]
    return layer


def test_wrapper_logic_turns_both_flags_off_for_a_bf16_layer_and_leaves_a_quantized_one() -> None:
    bf16 = _layer(torch.bfloat16, _Unquantized())
    assert mla.keep_bf16_bmm(bf16, _Unquantized) is True
    assert (bf16.is_aiter_triton_fp4_bmm_enabled, bf16.is_aiter_triton_fp8_bmm_enabled) == (False, False)
    quantized = _layer(torch.bfloat16, object())
    assert mla.keep_bf16_bmm(quantized, _Unquantized) is False
    assert (quantized.is_aiter_triton_fp4_bmm_enabled, quantized.is_aiter_triton_fp8_bmm_enabled) == (True, True)


# --- runtime: the real vLLM of every proven version ---------------------------------------------------------------

RUNTIME = r"""
import inspect, os, sys, types
import torch
from torch import nn
from glmops_vllm_patches import plugin, ops_mla, patch_rocm_mla_bf16_bmm as P
from glmops_vllm_patches.base import Context, PatchTargetMissing, resolve
from glmops_vllm_patches.version import Version
import vllm
from vllm.model_executor.layers.attention import mla_attention as M
from vllm.model_executor.layers.linear import UnquantizedLinearMethod, LinearMethodBase
from vllm._aiter_ops import rocm_aiter_ops

L, N, PD, VD, B = 512, 4, 128, 128, 8
torch.manual_seed(0)
ver = Version.parse(vllm.__version__)
result["version"] = str(ver)
result["default_flags"] = [rocm_aiter_ops._FP4BMM_ENABLED, rocm_aiter_ops._FP8BMM_ENABLED]

class Fp8Checkpoint(LinearMethodBase):  # a kv_b_proj stored in FP8: dequantized by vLLM's generic path
    def create_weights(self, *a, **k): pass
    def apply(self, layer, x, bias=None):
        return x @ (layer.weight.to(torch.float32) * layer.weight_scale).to(x.dtype).T

def kv_b_proj(kind):
    mod = nn.Module()
    w = torch.randn(N * (PD + VD), L) * 0.05
    if kind == "fp8":
        scale = w.abs().max() / 448.0
        mod.weight = nn.Parameter((w / scale).to(torch.float8_e4m3fn), requires_grad=False)
        mod.weight_scale, mod.quant_method, mod.input_size_per_partition = scale, Fp8Checkpoint(), L
    else:
        mod.weight = nn.Parameter(w.to(torch.bfloat16), requires_grad=False)
        mod.quant_method = UnquantizedLinearMethod()
    return mod

def mla_layer(kind, fp4, fp8):  # the attributes MLAAttention.__init__ sets that the weight processing reads
    obj = M.MLAAttention.__new__(M.MLAAttention)
    nn.Module.__init__(obj)
    obj.kv_b_proj = kv_b_proj(kind)
    obj.kv_lora_rank, obj.num_heads, obj.qk_nope_head_dim, obj.v_head_dim = L, N, PD, VD
    obj.dcp_q_replicate, obj.is_amx_bmm_enabled, obj.quant_config = False, False, None
    obj.layer_name = "model.layers.0.self_attn.attn"
    obj.impl = types.SimpleNamespace(process_weights_after_loading=lambda dt: None)
    for n in ("_k_scale", "_v_scale", "_q_scale", "_prob_scale"):
        setattr(obj, n, torch.tensor(1.0))
    obj.is_aiter_triton_fp4_bmm_enabled, obj.is_aiter_triton_fp8_bmm_enabled = fp4, fp8
    return obj

# Only the AITER GPU kernels are stubbed: the FP8 BMM warm-up and the MXFP4 quantizer (packed uint8 output).
rocm_aiter_ops.triton_fp8_bmm = staticmethod(lambda *a, **k: None)
quant = types.ModuleType("aiter.ops.triton.quant")
def mxfp4(x):
    n, d = x.shape
    return torch.zeros(n, d // 2, dtype=torch.uint8), torch.zeros(n, d // 32, dtype=torch.uint8)
quant.dynamic_mxfp4_quant = mxfp4
for name in ("aiter", "aiter.ops", "aiter.ops.triton"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["aiter.ops.triton.quant"] = quant

def process(kind, fp4, fp8):
    obj = mla_layer(kind, fp4, fp8)
    weight = obj.kv_b_proj.weight.detach().clone()
    if "act_dtype" in inspect.signature(M.MLAAttention.process_weights_after_loading).parameters:
        M.MLAAttention.process_weights_after_loading(obj, torch.bfloat16)
    else:  # 0.34.0: the layer holds act_dtype (set in __init__) and the method takes no argument
        obj.act_dtype = torch.bfloat16
        M.MLAAttention.process_weights_after_loading(obj)
    out = {"flags": [obj.is_aiter_triton_fp4_bmm_enabled, obj.is_aiter_triton_fp8_bmm_enabled]}
    if not any(out["flags"]):
        uk_t, uv = ops_mla.reference_split(weight, L, N, PD, VD)
        out.update(W_UK_T=str(obj.W_UK_T.dtype), W_UV=str(obj.W_UV.dtype),
                   equal=[torch.equal(obj.W_UK_T, uk_t), torch.equal(obj.W_UV, uv)])
        x = torch.randn(B, N * L).to(torch.bfloat16)
        y = torch.empty(B, N * VD, dtype=torch.bfloat16)
        obj._v_up_proj(x, y)  # the forward's V up-projection, BF16 torch.bmm branch
        ref = torch.einsum("bnl,nlv->bnv", x.double().view(B, N, L), uv.double()).reshape(B, -1)
        out["v_up_rel_err"] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    else:
        out.update(W_K=str(obj.W_K.dtype), W_V=str(obj.W_V.dtype))
        if kind == "bf16" and obj.W_V.dtype != torch.uint8:  # FP8 copy of BF16 weights: its cost
            uk_t, uv = ops_mla.reference_split(weight.to(torch.float32), L, N, PD, VD)
            w_v = obj.W_V.double() * obj.W_V_scale.double()  # [N, V, L]
            x = torch.randn(B, N * L).double().view(B, N, L)
            ref = torch.einsum("bnl,nlv->bnv", x, uv.double())
            err = (torch.einsum("bnl,nvl->bnv", x, w_v) - ref).abs().max()
            out["fp8_v_up_rel_err"] = (err / ref.abs().max()).item()
    return out

result["before"] = {"bf16_fp8": process("bf16", False, True), "bf16_fp4": process("bf16", True, True)}

def ctx(platform, **env):
    return Context(ver, platform, env)

result["cuda"] = plugin.apply_patches(ctx("cuda"), (P.PATCH,))[P.INFO.name].message
plugin._outcomes.clear()
result["off"] = plugin.apply_patches(ctx("rocm", GLMOPS_PATCH_ROCM_MLA_BF16_BMM="off"), (P.PATCH,))[P.INFO.name].message
plugin._outcomes.clear()
original = M.MLAAttention.__dict__["process_weights_after_loading"]
del M.MLAAttention.process_weights_after_loading
try:
    plugin.apply_patches(ctx("rocm"), (P.PATCH,))
    result["missing"] = None
except PatchTargetMissing as exc:
    result["missing"] = str(exc)
M.MLAAttention.process_weights_after_loading = original
plugin._outcomes.clear()

os.environ["GLMOPS_PATCH_PLATFORM"] = "rocm"
outcome = plugin.apply_patches(None, (P.PATCH,))[P.INFO.name]  # the real version and the platform override
result["outcome"] = [outcome.applied, outcome.message]
current = M.MLAAttention.__dict__["process_weights_after_loading"]
result["wrapped"] = getattr(current, "__glmops_patch__", None)
if outcome.applied:
    found = {t: resolve(t) for t in P.targets(ctx("rocm"))}
    result["again"] = P.apply(ctx("rocm"), found)
    result["same_wrapper"] = M.MLAAttention.__dict__["process_weights_after_loading"] is current
result["after"] = {"bf16_fp8": process("bf16", False, True), "bf16_fp4": process("bf16", True, True),
                   "fp8_checkpoint": process("fp8", False, True)}

# global-off mode: sets what the user did not set, refreshes rocm_aiter_ops' cached flags
def global_off(**user):
    for env in (P.FP4_ENV, P.FP8_ENV):
        os.environ.pop(env, None)
    os.environ.update(user)
    rocm_aiter_ops.refresh_env_variables()
    c = Context(ver, "rocm", {**user, P.MODE_ENV: "global-off"})
    line = P.apply(c, {t: resolve(t) for t in P.targets(c)})
    return {"line": line, "env": [os.environ.get(P.FP4_ENV), os.environ.get(P.FP8_ENV)],
            "cached": [rocm_aiter_ops._FP4BMM_ENABLED, rocm_aiter_ops._FP8BMM_ENABLED]}

result["global_off"] = global_off()
result["global_off_user_fp8"] = global_off(**{P.FP8_ENV: "1"})
"""

shared_vllm_runs.register("rocm-mla-bf16-bmm", RUNTIME)


def _runtime(run_in_vllm: Any, version: str) -> dict[str, Any]:
    return shared_vllm_runs.result(run_in_vllm, "rocm-mla-bf16-bmm", version)


def test_stock_vllm_requantizes_bf16_kv_b_proj_before_0_33(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    affected = Version.parse(vllm_version) < Version.parse("0.33.0")
    assert out["default_flags"] == [affected, affected]
    assert out["before"]["bf16_fp8"]["W_K"] == "torch.float8_e4m3fn"
    assert out["before"]["bf16_fp4"]["W_K"] == "torch.uint8"  # packed MXFP4


def test_patch_applies_or_skips_as_its_guard_says(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    applies = mla.PATCH.decide(ctx(vllm_version)).apply
    assert out["outcome"][0] is applies
    assert out["wrapped"] == ("rocm-mla-bf16-bmm" if applies else None)
    assert out["off"] == "turned off by GLMOPS_PATCH_ROCM_MLA_BF16_BMM"
    if applies:
        assert out["cuda"] == "platform cuda is not affected (only rocm)"
        assert "process_weights_after_loading" in out["missing"]
        assert out["again"] == "MLAAttention.process_weights_after_loading already wrapped"
        assert out["same_wrapper"] is True
    else:
        assert "outside the affected range" in out["outcome"][1]
        assert "outside the affected range" in out["cuda"]


def test_patched_bmm_path_keeps_bf16_weights_bf16(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    if not mla.PATCH.decide(ctx(vllm_version)).apply:
        pytest.skip(f"vLLM {vllm_version} is outside the affected range")
    for path in ("bf16_fp8", "bf16_fp4"):
        after = out["after"][path]
        assert after["flags"] == [False, False]
        assert (after["W_UK_T"], after["W_UV"]) == ("torch.bfloat16", "torch.bfloat16")
        assert after["equal"] == [True, True]  # values equal to the reference split of kv_b_proj
        assert after["v_up_rel_err"] < 1e-2  # BF16 bmm rounding only
    assert out["before"]["bf16_fp8"]["fp8_v_up_rel_err"] > 2 * out["after"]["bf16_fp8"]["v_up_rel_err"]


def test_a_quantized_kv_b_proj_keeps_the_fp8_bmm(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    fp8 = out["after"]["fp8_checkpoint"]
    assert fp8["flags"] == [False, True]
    assert (fp8["W_K"], fp8["W_V"]) == ("torch.float8_e4m3fn", "torch.float8_e4m3fn")


def test_global_off_sets_only_what_the_user_left_unset(run_in_vllm: Any, vllm_version: str) -> None:
    out = _runtime(run_in_vllm, vllm_version)
    assert out["global_off"]["env"] == ["0", "0"]
    assert out["global_off"]["cached"] == [False, False]
    assert out["global_off_user_fp8"]["env"] == ["0", "1"]
    assert out["global_off_user_fp8"]["cached"] == [False, True]
    assert "kept VLLM_ROCM_USE_AITER_FP8BMM=1 (set by the user)" in out["global_off_user_fp8"]["line"]
