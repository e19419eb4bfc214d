"""What vLLM 0.26.0 does differently from 0.27.1, as admission decides it (catalog/vllm_facts.py, read from 0.26.0's
source by tests/vllm_source): its Marlin MXFP4 experts also refuse the FlashInfer NVLink one-sided all-to-all, it has
no `batched_triton` MoE backend, and vllm-63170 (GlmMoeDsaForCausalLM in deepseek_v2) is present."""

from __future__ import annotations

import pytest

from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import admit, evaluate
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()
ONE_SIDED = "flashinfer_nvlink_one_sided"


def errors(b: B) -> dict[str, str]:
    return {f.rule: f.message for f in evaluate(b.build(), CATALOGS) if f.severity == "error"}


def mxfp4_dp8(version: str, backend: str) -> B:
    b = B().model("RedHatAI/GLM-5.3-MXFP4").data(8).expert().set("spec.engine.all2allBackend", backend)
    return b.vllm(version)


@pytest.mark.parametrize(("version", "refused"), [("0.26.0", True), ("0.27.1", False)])
def test_the_marlin_switch_takes_flashinfer_one_sided_from_0_27_1_only(version: str, refused: bool) -> None:
    got = errors(mxfp4_dp8(version, ONE_SIDED).accelerator("GB200").env("GLMOPS_MOE_MXFP4_BACKEND", "marlin"))
    assert ("vllm-58729" in got) is refused
    if refused:
        assert "glmops' patch refuses to start the server" in got["vllm-58729"]


@pytest.mark.parametrize(("version", "offers_marlin"), [("0.26.0", False), ("0.27.1", True)])
def test_the_cutlass_refusal_of_one_sided_offers_marlin_only_where_marlin_takes_it(
    version: str, offers_marlin: bool
) -> None:
    message = errors(mxfp4_dp8(version, ONE_SIDED).accelerator("GB200"))["vllm-58729"]
    assert ("GLMOPS_MOE_MXFP4_BACKEND=marlin" in message) is offers_marlin


@pytest.mark.parametrize(("version", "refused"), [("0.26.0", True), ("0.27.1", False)])
def test_hopper_runs_mxfp4_on_marlin_which_refuses_one_sided_on_0_26(version: str, refused: bool) -> None:
    got = errors(mxfp4_dp8(version, ONE_SIDED).accelerator("H200"))
    assert ("feasibility/moe-layout" in got) is refused
    if refused:
        assert "cannot take the FlashInfer one-sided layout" in got["feasibility/moe-layout"]


@pytest.mark.parametrize(("version", "refused"), [("0.26.0", True), ("0.27.1", False)])
def test_moe_backend_batched_triton_arrives_in_0_27_1(version: str, refused: bool) -> None:
    got = errors(B().accelerator("H200").tensor(8).vllm(version).set("spec.engine.moeBackend", "batched_triton"))
    assert ("feasibility/backend" in got) is refused


def test_63170_is_present_in_0_26_and_auto_sets_the_partition_the_rule_proposes() -> None:
    b = B().model("zai-org/GLM-5.3").accelerator("H200").tensor(4).pipeline(2).image("vllm/vllm-openai:v0.26.0")
    assert "layers 39-41 of zai-org/GLM-5.3" in errors(b)["vllm-63170"]
    result = admit(b.build(), CATALOGS)
    assert result.allowed
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": "38,40"} in result.patched["spec"]["engine"]["env"]


def test_the_patched_0_26_image_carries_the_dsa_hand_off() -> None:
    b = B().model("zai-org/GLM-5.3").accelerator("H200").tensor(4).pipeline(2).vllm("0.26.0")
    assert "vllm-63170" not in errors(b)
