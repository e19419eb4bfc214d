"""Admission and the simulator decide the same, each from its own table.

The rules (`rules/`, reading `catalog/vllm_facts.py`) and the simulator's fault table (`sim/faults.py`) are written
apart on purpose: the simulator stands for vLLM and must catch what the rules miss. This is the one test that
holds them to each other: for every deployment of the grid, what admission refuses is what the simulator, launched
with the command line and environment glmops renders, fails on (at start-up or with a fault signature), and what
admission lets through serves cleanly.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from glm_operator.api import GLMDeployment
from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.plan import build_plan
from glm_operator.rules.engine import admit
from glm_operator.rules.known_issues import KNOWN_ISSUES
from glm_operator.sim.faults import fault_of, parse_serve_args, startup_error
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()
# The rules this grid exercises: every known-issue rule (a new one needs its rows here), and the feasibility checks
# the same failures reach; a refusal for any other reason means the grid itself is wrong.
KNOWN = {rule.id for rule in KNOWN_ISSUES} | {"feasibility/format", "feasibility/moe-layout"}
KNOWN |= {"startup/mxfp4-oracle-experts", "startup/moe-backend-all2all"}  # the oracle's experts (mxfp4_grid)
STOCK = {"cuda": "vllm/vllm-openai:v{}", "rocm": "vllm/vllm-openai-rocm:v{}"}


def _image(b: B, platform: str, version: str, patched: bool) -> B:
    return b.vllm(version) if patched else b.image(STOCK[platform].format(version))


def mxfp4_grid() -> list[tuple[str, B]]:
    out = []
    layouts = [
        ("dp8", lambda b: b.accelerator("GB200").data(8)),
        ("tp8", lambda b: b.accelerator("B200", 8).tensor(8)),
        ("h200-dp8", lambda b: b.accelerator("H200").data(8)),  # no CUTLASS MXFP4 kernel: vLLM runs Marlin
    ]
    backends = ["auto", "pplx", "deepep_high_throughput", "deepep_low_latency", "nixl_ep"]
    backends += ["flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "deepep_v2"]
    images = [("0.26.0", False, False), ("0.30.0", False, False), ("0.32.0", False, False), ("0.33.0", False, False)]
    images += [("0.30.0", True, False), ("0.33.0", True, False), ("0.30.0", True, True), ("0.33.0", True, True)]
    images += [("0.34.0", False, False), ("0.34.0", True, False), ("0.34.0", True, True)]  # DeepEP v2 pads rows
    images += [("0.26.0", True, True)]  # 0.26.0's Marlin experts refuse FlashInfer one-sided too
    for (lname, layout), backend, (version, patched, marlin) in itertools.product(layouts, backends, images):
        b = layout(B().model("RedHatAI/GLM-5.3-MXFP4").expert().set("spec.engine.all2allBackend", backend))
        b = _image(b, "cuda", version, patched)
        if marlin:
            b = b.env("GLMOPS_MOE_MXFP4_BACKEND", "marlin")
        out.append((f"mxfp4-{lname}-{backend}-{version}-{'patched' if patched else 'stock'}{'-marlin' * marlin}", b))
    # --moe-backend values the MXFP4 method hands to the oracle (ct-mxfp4-moe-backends-read) leave the Cutlass experts
    oracle = [("deep_gemm", "0.31.0"), ("flashinfer_moe_ep_cutedsl", "0.32.0")]
    oracle += [("flashinfer_moe_ep_cutedsl", "0.34.0"), ("deep_gemm", "0.33.0"), ("deep_gemm", "0.34.0")]
    for moe, version in oracle:
        b = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("GB200").data(8).expert().set("spec.engine.moeBackend", moe)
        out.append((f"mxfp4-dp8-moe-{moe}-{version}-stock", _image(b, "cuda", version, False)))
    # The experts the oracle picks, on and off their device and parallel config (startup/mxfp4-oracle-experts)
    fits = [
        ("b12x", "RTX-PRO-6000", "tp8", "auto", "0.30.0"),
        ("b12x", "RTX-PRO-6000", "ep-dp8", "auto", "0.34.0"),
        ("b12x", "GB200", "tp8", "auto", "0.32.0"),
        ("flashinfer_moe_ep_cutedsl", "H200", "ep-dp8", "auto", "0.32.0"),
        ("flashinfer_moe_ep_cutedsl", "B200", "tp8", "auto", "0.33.0"),
        ("flashinfer_moe_ep_cutedsl", "GB200", "ep-dp8", "deepep_low_latency", "0.33.0"),
        ("flashinfer_moe_ep_cutedsl", "GB200", "ep-tp8", "auto", "0.34.0"),
        ("deep_gemm", "H200", "tp8", "auto", "0.34.0"),
        ("deep_gemm", "RTX-PRO-6000", "tp8", "auto", "0.34.0"),
        ("deep_gemm", "GB200", "ep-dp8", "flashinfer_nvlink_two_sided", "0.34.0"),
        ("deep_gemm", "GB200", "ep-dp8", "deepep_high_throughput", "0.34.0"),
    ]
    shapes = {
        "tp8": lambda b: b.tensor(8),
        "ep-tp8": lambda b: b.tensor(8).expert(),
        "ep-dp8": lambda b: b.data(8).expert(),
    }
    for moe, acc, shape, a2a, version in fits:
        b = shapes[shape](B().model("RedHatAI/GLM-5.3-MXFP4").accelerator(acc)).set("spec.engine.moeBackend", moe)
        b = _image(b.set("spec.engine.all2allBackend", a2a), "cuda", version, False)
        out.append((f"mxfp4-oracle-{moe}-{acc}-{shape}-{a2a}-{version}", b))
    for version in ("0.30.0", "0.33.0"):
        out.append(
            (
                f"mxfp4-mi355x-{version}",
                B()
                .model("RedHatAI/GLM-5.3-MXFP4")
                .accelerator("MI355X")
                .tensor(8)
                .image(STOCK["rocm"].format(version)),
            )
        )
    return out


def mtp_grid() -> list[tuple[str, B]]:
    out = []
    models = ["amd/GLM-5.2-MXFP4", "zai-org/GLM-5.3-BF16", "zai-org/GLM-5.2-FP8"]
    envs: list[dict[str, str]] = [
        {},
        {"VLLM_ROCM_USE_AITER_FP4BMM": "false", "VLLM_ROCM_USE_AITER_FP8BMM": "no"},
        {"VLLM_ROCM_USE_AITER_FP4BMM": "0"},
        {"VLLM_ROCM_USE_AITER": "0"},
        {"VLLM_ROCM_USE_AITER_FP4BMM": "TRUE"},
    ]
    images = [("0.26.0", False), ("0.27.1", False), ("0.32.0", False), ("0.33.0", False), ("0.30.0", True)]
    for model, (i, env), (version, patched) in itertools.product(models, enumerate(envs), images):
        b = B().model(model).accelerator("MI355X").tensor(8).data(2).expert().mtp(3)
        b = _image(b, "rocm", version, patched)
        for name, value in env.items():
            b = b.env(name, value)
        out.append((f"mtp-{model}-env{i}-{version}-{'patched' if patched else 'stock'}", b))
    gfx942 = ["zai-org/GLM-5.2", "zai-org/GLM-5.3-BF16", "zai-org/GLM-5.2-FP8"]  # quark MXFP4 needs gfx950
    for model, version in itertools.product(gfx942, ("0.32.0", "0.33.0")):  # gfx942: warned on, serves
        b = B().model(model).accelerator("MI300X").tensor(8).data(2).expert().mtp(3)
        out.append((f"mtp-mi300x-{model}-{version}-stock", _image(b, "rocm", version, False)))
    return out


def pp_grid() -> list[tuple[str, B]]:
    out = []
    accelerators = [("H200", "cuda"), ("MI355X", "rocm")]
    versions = ["0.30.0", "0.33.0", "0.34.0"]
    for partition, version, patched, (acc, platform) in itertools.product(
        [None, "38,40", "39,39"], versions, [False, True], accelerators
    ):
        b = _image(B().model("zai-org/GLM-5.3").accelerator(acc).tensor(4).pipeline(2), platform, version, patched)
        if partition:
            b = b.env("VLLM_PP_LAYER_PARTITION", partition)
        out.append((f"pp2-{acc}-{partition}-{version}-{'patched' if patched else 'stock'}", b))
    return out


GRID = mxfp4_grid() + mtp_grid() + pp_grid()


def simulate(obj: dict[str, Any]) -> str:
    """What the simulator does when launched as the sim fleet launches it for this deployment's pods."""
    glmd = GLMDeployment.model_validate(obj)
    plan = build_plan(glmd, CATALOGS)
    env = {e["name"]: e["value"] for e in plan.env}
    launch = parse_serve_args(plan.leader_args, env, plan.accelerator, plan.vllm_version or "", set(plan.patches))
    return startup_error(launch) or fault_of(launch)


@pytest.mark.parametrize("name, builder", GRID, ids=[n for n, _ in GRID])
def test_admission_refuses_exactly_what_the_simulator_fails_on(name: str, builder: B) -> None:
    obj = builder.remediation("Reject").namespace("ns").build()
    result = admit(obj, CATALOGS)
    refused_by = {e.rule for e in result.errors}
    assert refused_by <= KNOWN, f"{name}: refused for reasons outside this grid: {result.rejection()}"
    outcome = simulate(obj)
    if result.allowed:
        assert outcome == "none", f"{name}: admitted, but the simulator shows {outcome!r}"
    else:
        assert outcome != "none", f"{name}: refused ({sorted(refused_by)}) but the simulator serves cleanly"


def test_the_grid_has_both_outcomes_for_every_rule() -> None:
    refused: dict[str, int] = {}
    admitted = 0
    for _name, builder in GRID:
        result = admit(builder.remediation("Reject").namespace("ns").build(), CATALOGS)
        admitted += result.allowed
        for e in result.errors:
            refused[e.rule] = refused.get(e.rule, 0) + 1
    never = sorted(KNOWN - set(refused))
    assert not never, (
        f"no deployment of the grid is refused by {never}: add rows for it to GRID in "
        "tests/unit/test_rules_agree_with_simulator.py"
    )
    assert admitted > 0, refused
