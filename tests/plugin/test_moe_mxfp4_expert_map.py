"""Patch `moe-mxfp4-expert-map` (vllm-58729): targets in every proven vLLM, guard, the real wrapped objects, numbers.

The EP numbers: a float32 SwiGLU MoE split over ranks, each rank's experts computed by a stand-in for the CUTLASS
grouped kernel (it indexes LOCAL weights by the ids it gets), partial outputs summed as vLLM's all-reduce does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from glmops_vllm_patches import patch_moe_mxfp4_expert_map as moe_patch
from glmops_vllm_patches import static
from glmops_vllm_patches.base import Context, Target
from glmops_vllm_patches.ops_moe import (
    contiguous_expert_map,
    dense_moe,
    expert_map_from_owner,
    grouped_local_moe,
    local_weights,
    random_moe,
    remap_routes_to_local,
    zero_rows_without_local_route,
)
from glmops_vllm_patches.version import PROVEN_VERSIONS, Version
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.plugin.conftest import run_each_version, vllm_source

REPO = Path(__file__).resolve().parents[2]
PATCH = moe_patch.PATCH
KERNEL_REMAPS_FROM = "0.32.0"
INC_METHOD_FROM = "0.27.1"  # INC's W4A4 MXFP4 MoE method
MARLIN_TAKES_ONE_SIDED_FROM = "0.27.1"  # 0.26.0's Marlin experts refuse FlashInfer NVLink one-sided too
LAYOUT_ON_MOE_CONFIG_FROM = "0.34.0"  # FusedMoEConfig.activation_format; DeepEP v2 hands padded rows


def _before(version: str, first: str) -> bool:
    return Version.parse(version) < Version.parse(first)


def _ctx(version: str, platform: str = "cuda", **env: str) -> Context:
    return Context(Version.parse(version), platform, env)


# ---- static: every target exists in the real sources of every proven version ----


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_every_target_the_patch_needs_exists_in_the_real_sources(version: str) -> None:
    root = vllm_source(version)
    problems = [static.find_problem(root, t) for t in PATCH.targets(_ctx(version))]
    assert [p for p in problems if p] == []


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_the_apply_wrapper_is_used_exactly_where_the_kernel_does_not_remap_itself(version: str) -> None:
    root = vllm_source(version)
    kernel_takes_map = static.find_problem(root, moe_patch.RUN_CUTLASS_REMAPS) is None
    wraps_apply = moe_patch.CUTLASS_APPLY in PATCH.targets(_ctx(version))
    assert kernel_takes_map == (Version.parse(version) >= Version.parse(KERNEL_REMAPS_FROM))
    assert wraps_apply == (not kernel_takes_map)


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_the_fields_the_method_guard_reads_exist_and_newer_vllm_fails_closed_only_at_kernel_build(
    version: str,
) -> None:
    root = vllm_source(version)
    config = "vllm.model_executor.layers.fused_moe.config"
    assert static.find_problem(root, Target(config, "FusedMoEConfig.moe_parallel_config")) is None
    assert static.find_problem(root, Target(config, "FusedMoEParallelConfig.all2all_backend")) is None
    # 0.32.0+ checks the experts' parallel config when it builds the kernel, after the weights are loaded; before,
    # nothing checks it. This is what the refusal message says for each version.
    validates = Target("vllm.model_executor.layers.fused_moe.oracle.mxfp4", "_validate_mxfp4_experts_config")
    newer = Version.parse(version) >= Version.parse(KERNEL_REMAPS_FROM)
    assert (static.find_problem(root, validates) is None) is newer


def test_a_target_missing_from_a_source_tree_is_named(tmp_path: Path) -> None:
    mod = tmp_path / "vllm" / "model_executor" / "layers" / "fused_moe" / "experts"
    mod.mkdir(parents=True)
    (mod / "cutlass_moe.py").write_text("class CutlassExpertsMxfp4:\n    def apply(self, output): pass\n")
    problem = static.find_problem(tmp_path, moe_patch.CUTLASS_APPLY)
    assert problem is not None and "topk_ids" in problem


# ---- the guard: version x platform x switches ----


@pytest.mark.parametrize(
    ("version", "platform", "env", "applies"),
    [
        ("0.27.1", "cuda", {}, True),
        ("0.30.0", "cuda", {}, True),
        ("0.31.0", "cuda", {}, True),
        ("0.32.0", "cuda", {}, True),
        ("0.33.0", "cuda", {}, True),
        ("0.31.0", "rocm", {}, False),
        ("0.31.0", "cpu", {}, False),
        ("0.25.0", "cuda", {}, False),
        ("0.31.0", "cuda", {"GLMOPS_PATCH_MOE_MXFP4_EXPERT_MAP": "off"}, False),
        ("0.31.0", "cuda", {"GLMOPS_MOE_MXFP4_BACKEND": "marlin"}, True),
    ],
)
def test_the_guard_applies_on_cuda_in_the_supported_range_unless_switched_off(
    version: str, platform: str, env: dict[str, str], applies: bool
) -> None:
    assert PATCH.decide(_ctx(version, platform, **env)).apply is applies


@pytest.mark.parametrize(
    ("value", "choice"), [("", "cutlass"), ("auto", "cutlass"), ("CUTLASS", "cutlass"), (" marlin ", "marlin")]
)
def test_the_backend_switch_reads_cutlass_or_marlin(value: str, choice: str) -> None:
    assert moe_patch.backend_choice({moe_patch.BACKEND_ENV: value}) == choice


def test_an_unknown_backend_switch_value_refuses_to_start() -> None:
    with pytest.raises(ValueError, match="GLMOPS_MOE_MXFP4_BACKEND: 'triton'"):
        moe_patch.backend_choice({moe_patch.BACKEND_ENV: "triton"})


def test_the_registry_entry_is_filled_in() -> None:
    info = PATCH.info
    assert info.issue == "vllm-58729" and info.issue_url.endswith("/issues/58729")
    assert all(getattr(info, f) and "TODO" not in str(getattr(info, f)) for f in ("why", "how", "remove_when", "prs"))
    assert info.env_switch == "GLMOPS_PATCH_MOE_MXFP4_EXPERT_MAP"


# ---- the remap itself ----


def test_remap_gives_local_slots_and_zero_weight_to_routes_on_other_ranks() -> None:
    expert_map = torch.tensor([-1, -1, -1, -1, 0, 1, 2, 3], dtype=torch.int32)  # rank 1 of 2
    ids = torch.tensor([[0, 5], [7, 4], [3, 1], [-1, 6]], dtype=torch.int32)
    weights = torch.tensor([[0.6, 0.4], [0.7, 0.3], [0.5, 0.5], [0.9, 0.1]])
    before = (ids.clone(), weights.clone())
    routes = remap_routes_to_local(ids, weights, expert_map)
    assert routes.ids.tolist() == [[0, 1], [3, 0], [0, 0], [0, 2]]
    assert torch.equal(routes.weights, torch.tensor([[0.0, 0.4], [0.7, 0.3], [0.0, 0.0], [0.0, 0.1]]))
    assert routes.is_local.tolist() == [[False, True], [True, True], [False, False], [False, True]]
    assert routes.ids.dtype == ids.dtype and routes.weights.dtype == weights.dtype
    assert torch.equal(ids, before[0]) and torch.equal(weights, before[1])  # the layer's tensors stay untouched


def test_rows_with_no_local_route_are_zeroed_when_weights_go_on_the_input() -> None:
    output = torch.ones(3, 4)
    zero_rows_without_local_route(output, torch.tensor([[True], [False], [True]]))
    assert output.sum(dim=1).tolist() == [4.0, 0.0, 4.0]


def _ep_outputs(ep_size: int, owner: torch.Tensor | None, seed: int, tokens: int = 64) -> dict[str, float]:
    """Max abs errors against the dense MoE of the EP sum with and without the remap (8 experts, top-2, hidden 16)."""
    generator = torch.Generator().manual_seed(seed)
    x, w13, w2, ids, weights = random_moe(tokens, 8, 2, 16, 8, generator)
    reference = dense_moe(x, w13, w2, ids, weights)
    remapped = torch.zeros_like(x)
    unpatched = torch.zeros_like(x)
    for rank in range(ep_size):
        expert_map = contiguous_expert_map(8, ep_size, rank) if owner is None else expert_map_from_owner(owner, rank)
        w13_local, w2_local = local_weights(w13, expert_map), local_weights(w2, expert_map)
        routes = remap_routes_to_local(ids, weights, expert_map)
        remapped += grouped_local_moe(x, w13_local, w2_local, routes.ids, routes.weights, strict=True)
        unpatched += grouped_local_moe(x, w13_local, w2_local, ids, weights, strict=False)
    return {
        "scale": reference.abs().max().item(),
        "remapped": (remapped - reference).abs().max().item(),
        "unpatched": (unpatched - reference).abs().max().item(),
    }


def test_ep2_sum_of_rank_outputs_with_the_remap_equals_the_dense_moe_and_without_it_does_not() -> None:
    errors = _ep_outputs(ep_size=2, owner=None, seed=0)
    print(f"EP=2 8 experts top-2 hidden 16 float32: {errors}")
    assert errors["remapped"] <= 1e-5
    assert errors["unpatched"] > 0.1 * errors["scale"]


def test_without_ep_the_remap_is_the_identity_and_matches_the_dense_moe() -> None:
    errors = _ep_outputs(ep_size=1, owner=None, seed=1)
    assert errors["remapped"] <= 1e-5 and errors["unpatched"] <= 1e-5


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), ep_size=st.sampled_from([2, 4]), shuffled=st.booleans())
def test_any_routing_and_any_expert_placement_sums_to_the_dense_moe(seed: int, ep_size: int, shuffled: bool) -> None:
    owner = None
    if shuffled:  # experts placed on ranks in any order (as EPLB or a custom placement may)
        g = torch.Generator().manual_seed(seed)
        owner = torch.arange(8).remainder(ep_size)[torch.randperm(8, generator=g)]
    errors = _ep_outputs(ep_size=ep_size, owner=owner, seed=seed, tokens=24)
    assert errors["remapped"] <= 1e-5


def test_the_stand_in_kernel_refuses_ids_outside_its_local_slots() -> None:
    x, w13, w2, ids, weights = random_moe(4, 8, 2, 16, 8, torch.Generator().manual_seed(3))
    expert_map = contiguous_expert_map(8, 2, 1)
    with pytest.raises(IndexError, match="not local slots"):
        grouped_local_moe(x, local_weights(w13, expert_map), local_weights(w2, expert_map), ids + 4, weights)


# ---- EP=2 over torch.distributed (gloo here; the lead runs the same script with NCCL on two GPUs) ----


def _torchrun(*args: str) -> subprocess.CompletedProcess[str]:
    script = REPO / "images" / "vllm-patches" / "proof" / "moe_ep_dist.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script), *args]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)


def test_the_distributed_ep2_proof_matches_the_dense_moe_with_the_remap_and_not_without() -> None:
    # The script fails itself when the remapped sum differs from the dense MoE or the unpatched sum does not
    # (`--skip-remap` shows it: exit 1, MISMATCH); one launch here keeps the suite fast.
    proc = _torchrun("--trials", "2", "--tokens", "128")
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count(" OK") == 2 and "backend=gloo" in proc.stdout


# ---- runtime: the real vLLM of every proven version, in one subprocess per version (run side by side) ----

RUNTIME = r"""
import types, torch
from glmops_vllm_patches import plugin, patch_moe_mxfp4_expert_map as P
from glmops_vllm_patches.base import Context, PatchTargetMissing
from glmops_vllm_patches.version import Version
from glmops_vllm_patches.ops_moe import (contiguous_expert_map, dense_moe, grouped_local_moe, local_weights,
    random_moe)
import vllm
from vllm.model_executor.layers.fused_moe.experts import cutlass_moe as cm
from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts
from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig, FusedMoEParallelConfig
from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
    compressed_tensors_moe_w4a4_mxfp4 as ct)
try:
    from vllm.model_executor.layers.quantization.inc.schemes import inc_mxfp4_moe as inc
except ImportError:  # 0.26.0: INC has no MXFP4 MoE method
    inc = None

import logging
LINES = []
class Grab(logging.Handler):
    def emit(self, record): LINES.append(record.getMessage())
grab = logging.getLogger("vllm.glmops_patches")  # vLLM >= 0.31 configures logging only when a server starts
grab.addHandler(Grab())
grab.setLevel(logging.INFO)
result["log_lines"] = LINES

V = Version.parse(vllm.__version__)
Cut = cm.CutlassExpertsMxfp4
def ctx(platform="cuda", **env): return Context(V, platform, env)
def run(c):
    plugin._outcomes.pop(P.INFO.name, None)
    o = plugin.apply_patches(c, patches=(P.PATCH,))[P.INFO.name]
    return {"applied": o.applied, "message": o.message}
def marked(obj): return getattr(obj, "__glmops_patch__", None) == P.INFO.name
result["version"] = str(V)

# the switch and the platform guard leave vLLM untouched
result["off"] = run(ctx(GLMOPS_PATCH_MOE_MXFP4_EXPERT_MAP="off"))
result["rocm"] = run(ctx("rocm"))
CT, INC = ct.CompressedTensorsW4A4Mxfp4MoEMethod, (inc.INCMxfp4MoEMethod if inc else None)
result["inc_method"] = INC is not None
result["untouched_after_skips"] = not marked(Cut.__dict__["apply"]) and not marked(CT.__init__)

# a target missing in a supported version refuses loudly, before anything is changed
def missing(owner, name):
    saved = owner.__dict__[name]
    delattr(owner, name)
    try:
        run(ctx()); return "no error"
    except PatchTargetMissing as exc:
        return str(exc)
    finally:
        setattr(owner, name, saved)
saved = cm.run_cutlass_moe_mxfp4
result["missing"] = missing(cm, "run_cutlass_moe_mxfp4")
LAYOUT_ON_MOE_CONFIG = V >= P.LAYOUT_ON_MOE_CONFIG  # 0.34.0: the MoE config's activation_format says the layout
result["missing_batched"] = (missing(FusedMoEConfig, "activation_format") if LAYOUT_ON_MOE_CONFIG
                             else missing(FusedMoEParallelConfig, "use_batched_activation_format"))
result["untouched_after_missing"] = not marked(CT.__init__)
try:
    run(ctx(GLMOPS_MOE_MXFP4_BACKEND="triton")); result["bad_backend"] = "no error"
except ValueError as exc:
    result["bad_backend"] = str(exc)

def pc(backend, dp=2, ep=2):
    return FusedMoEParallelConfig(tp_size=1, pcp_size=1, dp_size=dp, ep_size=ep, tp_rank=0, pcp_rank=0, dp_rank=0,
        ep_rank=0, sp_size=1, use_ep=ep > 1, all2all_backend=backend, enable_eplb=False)
BACKENDS = ["allgather_reducescatter", "deepep_high_throughput", "flashinfer_nvlink_one_sided",
            "flashinfer_nvlink_two_sided", "deepep_low_latency", "nixl_ep", "deepep_v2"]
BATCHED = ["deepep_low_latency", "nixl_ep"]
def moe_config(backend, dp=2):
    moe = types.SimpleNamespace(moe_parallel_config=pc(backend, dp=dp), moe_backend="auto")
    if LAYOUT_ON_MOE_CONFIG:  # vLLM's own property, read on the stand-in config
        moe.activation_format = FusedMoEConfig.activation_format.fget(moe)
    return moe
def layout(backend, dp):
    moe = moe_config(backend, dp)
    if LAYOUT_ON_MOE_CONFIG:
        return moe.activation_format.name
    return "BatchedExperts" if moe.moe_parallel_config.use_batched_activation_format else "Standard"
# vLLM's own reading: the token layout each all-to-all hands the experts, and which format the experts take
result["layout"] = {f"{b}/dp{dp}": layout(b, dp) for b in BACKENDS for dp in (1, 2)}
result["experts_format"] = [Cut.activation_format().name, MarlinExperts.activation_format().name]
result["parallel_before"] = {b: bool(Cut._supports_parallel_config(pc(b))) for b in BACKENDS}

# apply, then apply again: no second wrapper
result["applied"] = run(ctx())
first = Cut.__dict__["apply"]
result["again"] = run(ctx())
result["wrapped_once"] = Cut.__dict__["apply"] is first and not marked(getattr(first, "__wrapped__", None))
result["apply_marked"] = marked(Cut.__dict__["apply"])
result["inits_marked"] = [marked(CT.__init__), *([marked(INC.__init__)] if INC else [])]
result["parallel_after"] = {b: bool(Cut._supports_parallel_config(pc(b))) for b in BACKENDS}

# the wrapped apply, EP=2, with a recorder standing in for the CUTLASS kernel call
seen = []
def recorder(strict):
    def fake(*, output, a, w1_fp4, w2_fp4, topk_weights, topk_ids, apply_router_weight_on_input=False, **kw):
        seen.append((topk_ids.clone(), topk_weights.clone()))
        if apply_router_weight_on_input:
            a = a * topk_weights.to(a.dtype)
            topk_weights = torch.ones_like(topk_weights)
        output.copy_(grouped_local_moe(a, w1_fp4, w2_fp4, topk_ids, topk_weights, strict=strict))
    return fake
inst = object.__new__(Cut)
inst.quant_config = types.SimpleNamespace(w1_scale=None, w2_scale=None)
inst.activation_config = None
def ep_sum(fn, top_k, on_input, strict):
    cm.run_cutlass_moe_mxfp4 = recorder(strict)
    x, w13, w2, ids, w = random_moe(32, 8, top_k, 16, 8, torch.Generator().manual_seed(7))
    ids0, w0 = ids.clone(), w.clone()
    total = torch.zeros_like(x)
    for rank in range(2):
        em = contiguous_expert_map(8, 2, rank)
        out = torch.full_like(x, float("nan"))
        fn(inst, output=out, hidden_states=x.clone(), w1=local_weights(w13, em), w2=local_weights(w2, em),
           topk_weights=w, topk_ids=ids, activation=None, global_num_experts=8, expert_map=em, a1q_scale=None,
           a2_scale=None, workspace13=None, workspace2=None, expert_tokens_meta=None,
           apply_router_weight_on_input=on_input)
        total += out
    if on_input:
        ref = dense_moe(x * w, w13, w2, ids, torch.ones_like(w))
    else:
        ref = dense_moe(x, w13, w2, ids, w)
    cm.run_cutlass_moe_mxfp4 = saved
    return {"err": (total - ref).abs().max().item(), "scale": ref.abs().max().item(),
            "inputs_untouched": torch.equal(ids, ids0) and torch.equal(w, w0)}
if result["apply_marked"]:
    seen.clear()
    result["ep_patched"] = ep_sum(Cut.apply, 2, False, strict=True)
    rank1_ids, rank1_w = seen[1]
    _, _, _, ids, w = random_moe(32, 8, 2, 16, 8, torch.Generator().manual_seed(7))
    result["rank1_ids_local"] = bool(((rank1_ids >= 0) & (rank1_ids < 4)).all())
    result["rank1_zero_where_remote"] = bool((rank1_w[ids < 4] == 0).all())
    result["rank1_weights_kept_where_local"] = bool(torch.equal(rank1_w[ids >= 4], w[ids >= 4]))
    result["rank1_ids_match"] = bool(torch.equal(rank1_ids[ids >= 4], ids[ids >= 4] - 4))
    result["ep_unpatched"] = ep_sum(Cut.apply.__wrapped__, 2, False, strict=False)
    result["ep_patched_on_input"] = ep_sum(Cut.apply, 1, True, strict=True)

# the methods' choice: a CUTLASS-capable GPU is simulated; the all-to-all backend and the switch decide
Cut._supports_current_device = staticmethod(lambda: True)
def build(cls, backend, dp=2):
    moe = moe_config(backend, dp)
    try:
        m = cls(moe)
    except P.UnsupportedMoEDeployment as exc:
        return {"refused": str(exc)}
    marlin_backend = m.mxfp4_backend == Mxfp4MoeBackend.MARLIN
    return {"experts": m.experts_cls.__name__, "cutlass": m.use_cutlass_mxfp4, "marlin_backend": marlin_backend}
METHODS = {"ct": CT, **({"inc": INC} if INC else {})}
def choices():  # EP=2 with DP=2 (all-to-all kernels built), and DP=1 (tensor-only EP) for the batched layouts
    out = {f"{k}/{b}": build(c, b) for k, c in METHODS.items() for b in BACKENDS}
    out.update({f"{k}/{b}/dp1": build(c, b, dp=1) for k, c in METHODS.items() for b in BATCHED})
    return out
result["choice_cutlass"] = choices()
run(ctx(GLMOPS_MOE_MXFP4_BACKEND="marlin"))
result["choice_marlin"] = choices()
Cut._supports_current_device = staticmethod(lambda: False)
result["choice_no_cutlass_gpu"] = build(METHODS["ct"], "deepep_high_throughput")
"""


@pytest.fixture(scope="module")
def runtime() -> dict[str, dict[str, Any]]:
    """Each proven version's runtime results (the vLLM imports are slow: the versions run side by side)."""
    for version in PROVEN_VERSIONS:
        vllm_source(version)

    return run_each_version(RUNTIME)


def _result(runtime: dict[str, dict[str, Any]], version: str) -> dict[str, Any]:
    res = runtime[version]
    assert not res.get("error"), res
    assert res["version"] == version
    return res


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_real_vllm_switch_off_and_rocm_skip_and_leave_vllm_untouched(runtime: dict, version: str) -> None:
    res = _result(runtime, version)
    assert res["off"] == {"applied": False, "message": "turned off by GLMOPS_PATCH_MOE_MXFP4_EXPERT_MAP"}
    assert res["rocm"]["applied"] is False and "platform rocm" in res["rocm"]["message"]
    assert res["untouched_after_skips"] is True


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_real_vllm_missing_target_or_bad_switch_refuses_to_start(runtime: dict, version: str) -> None:
    res = _result(runtime, version)
    assert "run_cutlass_moe_mxfp4" in res["missing"] and "not found" in res["missing"]
    batched = res["missing_batched"]
    owner = (
        "FusedMoEConfig.activation_format"
        if not _before(version, LAYOUT_ON_MOE_CONFIG_FROM)
        else ("FusedMoEParallelConfig.use_batched_activation_format")
    )
    assert owner in batched and "not found" in batched
    assert res["untouched_after_missing"] is True
    assert "GLMOPS_MOE_MXFP4_BACKEND: 'triton'" in res["bad_backend"]


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_real_vllm_applies_once_and_logs_one_line(runtime: dict, version: str) -> None:
    res = _result(runtime, version)
    assert res["applied"]["applied"] is True and res["again"]["applied"] is True
    assert res["wrapped_once"] is True
    assert res["inc_method"] is not _before(version, INC_METHOD_FROM)
    assert res["inits_marked"] == [True] * (1 + res["inc_method"])
    lines = [line for line in res["log_lines"] if line.startswith("glmops patch moe-mxfp4-expert-map (vllm-58729)")]
    # One line per apply_patches call that applied it: cutlass, again, and the marlin switch later in the script.
    assert sum(" applied: " in line for line in lines) == 3
    assert any("skipped: turned off by GLMOPS_PATCH_MOE_MXFP4_EXPERT_MAP" in line for line in lines)


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_real_vllm_cutlass_apply_is_wrapped_only_where_the_kernel_ignores_the_expert_map(
    runtime: dict, version: str
) -> None:
    res = _result(runtime, version)
    old = Version.parse(version) < Version.parse(KERNEL_REMAPS_FROM)
    assert res["apply_marked"] is old
    assert ("maps expert ids through expert_map" in res["applied"]["message"]) is old
    rejected = {"deepep_high_throughput", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"}
    # After the patch, old and new versions agree on what the kernel takes (new ones: vLLM's own check).
    assert res["parallel_after"] == {b: b not in rejected for b in res["parallel_after"]}
    if old:
        assert res["parallel_before"]["allgather_reducescatter"] is False  # stock: "ep_size == 1"


@pytest.mark.parametrize("version", [v for v in PROVEN_VERSIONS if Version.parse(v) < Version.parse("0.32.0")])
def test_real_vllm_wrapped_apply_hands_local_ids_and_zero_weights_to_the_kernel(runtime: dict, version: str) -> None:
    res = _result(runtime, version)
    print(f"{version}: patched {res['ep_patched']}, unpatched {res['ep_unpatched']}")
    assert res["rank1_ids_local"] and res["rank1_ids_match"]
    assert res["rank1_zero_where_remote"] and res["rank1_weights_kept_where_local"]
    assert res["ep_patched"]["err"] <= 1e-5 and res["ep_patched"]["inputs_untouched"]
    assert res["ep_unpatched"]["err"] > 0.1 * res["ep_unpatched"]["scale"]
    assert res["ep_patched_on_input"]["err"] <= 1e-5


BATCHED = ("deepep_low_latency", "nixl_ep")
CUTLASS = {"experts": "CutlassExpertsMxfp4", "cutlass": True, "marlin_backend": True}  # vLLM's initial backend
MARLIN = {"experts": "MarlinExperts", "cutlass": False, "marlin_backend": True}
LAYOUT = "cannot take this all-to-all layout"  # the CUTLASS refusal (the switch names Marlin as the way out)
NEITHER = "neither the CUTLASS nor the Marlin"  # no experts choice helps: only another all-to-all backend does
# What a W4A4 MXFP4 method built on a CUTLASS-capable GPU ends up with, per GLMOPS_MOE_MXFP4_BACKEND and
# --all2all-backend, with EP=2 and DP=2 (all-to-all kernels built) or, for "/dp1", DP=1 (tensor-only EP).
_EXPECTED_CHOICE: dict[str, dict[str, dict[str, Any] | str]] = {
    "cutlass": {
        "allgather_reducescatter": CUTLASS,
        "deepep_v2": CUTLASS,
        "deepep_high_throughput": LAYOUT,
        "flashinfer_nvlink_one_sided": LAYOUT,
        "flashinfer_nvlink_two_sided": LAYOUT,
        **{backend: NEITHER for backend in BATCHED},
        **{f"{backend}/dp1": CUTLASS for backend in BATCHED},
    },
    "marlin": {
        "allgather_reducescatter": MARLIN,
        "deepep_v2": MARLIN,
        "deepep_high_throughput": MARLIN,
        "flashinfer_nvlink_one_sided": MARLIN,
        "flashinfer_nvlink_two_sided": NEITHER,
        **{backend: NEITHER for backend in BATCHED},
        **{f"{backend}/dp1": MARLIN for backend in BATCHED},
    },
}


def expected_choice(switch: str, version: str) -> dict[str, dict[str, Any] | str]:
    expected = dict(_EXPECTED_CHOICE[switch])
    if not _before(version, LAYOUT_ON_MOE_CONFIG_FROM):  # DeepEP v2 hands padded rows: neither experts takes them
        expected["deepep_v2"] = NEITHER
    if switch == "marlin" and _before(version, MARLIN_TAKES_ONE_SIDED_FROM):
        expected["flashinfer_nvlink_one_sided"] = NEITHER
    return expected


def marlin_rejects(backend: str, version: str) -> bool:
    one_sided = backend == "flashinfer_nvlink_one_sided" and _before(version, MARLIN_TAKES_ONE_SIDED_FROM)
    return backend in ("flashinfer_nvlink_two_sided", "flashinfer_all2allv") or one_sided


@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_real_vllm_reads_deepep_ll_and_nixl_ep_as_batched_only_with_data_parallel_and_both_experts_as_standard(
    runtime: dict, version: str
) -> None:
    # The premise of the layout refusal, read from vLLM itself: those layouts hand the experts per-expert batches
    # only when the all-to-all kernels are built (EP with DP > 1), and neither experts class takes batches; from
    # 0.34.0 DeepEP v2 hands them padded rows, which neither takes either.
    res = _result(runtime, version)
    batched = {key for key, value in res["layout"].items() if value == "BatchedExperts"}
    assert batched == {f"{backend}/dp2" for backend in BATCHED}
    padded = {key for key, value in res["layout"].items() if value not in ("BatchedExperts", "Standard")}
    assert padded == (set() if _before(version, LAYOUT_ON_MOE_CONFIG_FROM) else {"deepep_v2/dp2"})
    assert res["experts_format"] == ["Standard", "Standard"]


@pytest.mark.parametrize("switch", ["cutlass", "marlin"])
@pytest.mark.parametrize("version", PROVEN_VERSIONS)
def test_real_vllm_methods_refuse_layouts_their_experts_cannot_take_and_the_switch_selects_marlin(
    runtime: dict, version: str, switch: str
) -> None:
    res = _result(runtime, version)
    choice = res[f"choice_{switch}"]
    methods = ("ct", "inc") if res["inc_method"] else ("ct",)
    assert {key.split("/")[0] for key in choice} == set(methods)
    for method in methods:
        got = {key.removeprefix(f"{method}/"): value for key, value in choice.items() if key.startswith(f"{method}/")}
        assert got.keys() == expected_choice(switch, version).keys()
        for layout, expected in expected_choice(switch, version).items():
            if isinstance(expected, dict):
                assert got[layout] == expected, (method, layout)
                continue
            assert "refused" in got[layout], (method, layout, got[layout])
            message = got[layout]["refused"]
            backend = layout.split("/")[0]
            assert message.startswith(f"--all2all-backend: {backend}: ") and expected in message, (method, message)
            assert "https://github.com/vllm-project/vllm/issues/58729" in message
            assert "Use --all2all-backend allgather_reducescatter" in message
            if expected == LAYOUT:  # Marlin is suggested only where it takes the layout (not FlashInfer two-sided)
                assert ("GLMOPS_MOE_MXFP4_BACKEND=marlin" in message) != marlin_rejects(backend, version), message
            if backend in BATCHED:
                assert "batched" in message and "after loading every weight" in message
            if backend == "deepep_v2":
                assert "PaddedStandard rows" in message and "after loading every weight" in message
                assert "deepep_high_throughput works with GLMOPS_MOE_MXFP4_BACKEND=marlin" in message
    # A GPU without CUTLASS MXFP4: vLLM picks Marlin itself and the patch stays out of the way.
    assert res["choice_no_cutlass_gpu"] == MARLIN
