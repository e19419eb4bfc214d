"""The three known-issue rules: version boundaries, hardware, explicit vs default values."""

from __future__ import annotations

import pytest

from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import admit, evaluate
from glm_operator.rules.findings import Finding
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()


def rules_hit(obj: dict) -> dict[str, Finding]:
    return {f.rule: f for f in evaluate(obj, CATALOGS) if f.severity == "error"}


def mxfp4_ep(image: str | None = "vllm/vllm-openai:v0.30.0", acc: str = "GB200") -> B:
    b = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator(acc).data(8).expert()
    return b.image(image) if image else b


# --- vllm-58729 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, broken",
    [
        ("0.26.0", True),
        ("0.27.1", True),
        ("0.30.0", True),
        ("0.31.0", True),
        ("0.32.0", False),
        ("0.33.0", False),
        ("0.34.0", False),
    ],
)
def test_58729_stock_image_is_broken_only_before_0_32(version: str, broken: bool) -> None:
    hit = rules_hit(mxfp4_ep(f"vllm/vllm-openai:v{version}").build())
    assert ("vllm-58729" in hit) == broken
    if broken:
        assert hit["vllm-58729"].field == "spec.parallelism.expert"


@pytest.mark.parametrize(
    "acc, broken",
    [("GB200", True), ("B200", True), ("B300", True), ("GB300", True), ("H200", False), ("RTX-PRO-6000", False)],
)
def test_58729_applies_to_the_sm100_family_only(acc: str, broken: bool) -> None:
    obj = mxfp4_ep(acc=acc).build()
    if acc in ("B200", "B300", "H200", "RTX-PRO-6000"):
        obj["spec"]["accelerator"]["gpusPerNode"] = 8
    assert ("vllm-58729" in rules_hit(obj)) == broken


def test_58729_patched_image_of_the_same_version_is_clean() -> None:
    assert "vllm-58729" not in rules_hit(mxfp4_ep(image=None).vllm("0.30.0").build())


def test_58729_tensor_instead_of_expert_parallelism_is_clean() -> None:
    obj = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("GB200").tensor(4).image("vllm/vllm-openai:v0.30.0")
    assert rules_hit(obj.build()) == {}


@pytest.mark.parametrize("version, refused", [("0.33.0", False), ("0.34.0", True)])
def test_58729_deepep_v2_pads_rows_from_0_34_so_the_stock_image_fails_after_loading(
    version: str, refused: bool
) -> None:
    hit = rules_hit(mxfp4_ep(f"vllm/vllm-openai:v{version}").set("spec.engine.all2allBackend", "deepep_v2").build())
    assert ("vllm-58729" in hit) == refused
    if refused:
        assert "padded rows" in hit["vllm-58729"].message and "after loading every weight" in hit["vllm-58729"].message


@pytest.mark.parametrize("version, refused", [("0.33.0", False), ("0.34.0", True)])
def test_marlin_off_sm100_takes_no_padded_rows_from_0_34(version: str, refused: bool) -> None:
    obj = mxfp4_ep(f"vllm/vllm-openai:v{version}", acc="H200").set("spec.engine.all2allBackend", "deepep_v2")
    hit = rules_hit(obj.build())
    assert ("feasibility/moe-layout" in hit) == refused
    if refused:
        assert "cannot take the padded rows" in hit["feasibility/moe-layout"].message


def test_58729_other_checkpoint_formats_are_not_affected() -> None:
    obj = mxfp4_ep().model("nvidia/GLM-5.3-NVFP4").build()
    assert "vllm-58729" not in rules_hit(obj)


def test_58729_marlin_backend_does_not_avoid_it_and_the_message_says_so() -> None:
    obj = mxfp4_ep().set("spec.engine.moeBackend", "marlin").build()
    assert "marlin does not move this checkpoint off Cutlass" in rules_hit(obj)["vllm-58729"].message


@pytest.mark.parametrize(
    "backend, broken",
    [
        ("auto", False),
        ("allgather_reducescatter", False),
        ("pplx", False),
        ("deepep_low_latency", True),
        ("nixl_ep", True),
        ("deepep_high_throughput", True),
        ("flashinfer_nvlink_two_sided", True),
        ("flashinfer_all2allv", True),
        ("flashinfer_nvlink_one_sided", True),
    ],
)
def test_58729_from_0_32_only_layouts_the_experts_cannot_take_break(backend: str, broken: bool) -> None:
    obj = mxfp4_ep("vllm/vllm-openai:v0.32.0").set("spec.engine.all2allBackend", backend).build()
    hit = rules_hit(obj)
    assert ("vllm-58729" in hit) == broken
    if broken:
        assert hit["vllm-58729"].field == "spec.engine.all2allBackend"


@pytest.mark.parametrize(
    "version, backend, marlin, refused",
    [
        ("0.30.0", "allgather_reducescatter", False, False),
        ("0.30.0", "deepep_high_throughput", False, True),
        ("0.30.0", "deepep_high_throughput", True, False),
        ("0.33.0", "deepep_high_throughput", False, True),
        ("0.33.0", "deepep_high_throughput", True, False),
        ("0.33.0", "flashinfer_nvlink_one_sided", True, False),
        ("0.33.0", "flashinfer_nvlink_two_sided", True, True),
        ("0.33.0", "flashinfer_all2allv", True, True),
        ("0.30.0", "deepep_low_latency", False, True),
        ("0.30.0", "nixl_ep", True, True),
        ("0.33.0", "deepep_low_latency", True, True),
        ("0.33.0", "nixl_ep", False, True),
        ("0.33.0", "deepep_v2", True, False),
        ("0.33.0", "deepep_v2", False, False),
        ("0.34.0", "deepep_v2", False, True),  # padded rows from 0.34.0: neither experts take them
        ("0.34.0", "deepep_v2", True, True),
        ("0.34.0", "deepep_high_throughput", True, False),
    ],
)
def test_58729_patched_image_admits_layouts_its_plugin_serves_and_refuses_those_it_would_stop(
    version: str, backend: str, marlin: bool, refused: bool
) -> None:
    b = mxfp4_ep(None).vllm(version).set("spec.engine.all2allBackend", backend)
    if marlin:
        b = b.env("GLMOPS_MOE_MXFP4_BACKEND", "marlin")
    hit = rules_hit(b.build())
    assert ("vllm-58729" in hit) == refused
    if refused:
        finding = hit["vllm-58729"]
        assert finding.field == "spec.engine.all2allBackend"
        assert "glmops' patch refuses to start the server" in finding.message
        marlin_takes = backend in ("deepep_high_throughput", "flashinfer_nvlink_one_sided")
        assert ("GLMOPS_MOE_MXFP4_BACKEND=marlin" in finding.message) == marlin_takes


def test_58729_stock_0_33_with_deepep_ht_says_vllm_fails_after_loading_and_names_the_fix() -> None:
    obj = mxfp4_ep("vllm/vllm-openai:v0.33.0").set("spec.engine.all2allBackend", "deepep_high_throughput").build()
    message = rules_hit(obj)["vllm-58729"].message
    assert "vLLM fails only after loading every weight" in message
    assert "Use all2allBackend auto (allgather_reducescatter)" in message
    assert "GLMOPS_MOE_MXFP4_BACKEND=marlin" in message


def test_58729_unknown_image_version_is_assumed_affected_with_a_warning() -> None:
    obj = mxfp4_ep("registry.example/vllm:latest").build()
    findings = evaluate(obj, CATALOGS)
    assert any(f.rule == "vllm-58729" and f.severity == "error" for f in findings)
    assert any(f.rule == "feasibility/version" and f.severity == "warning" for f in findings)


def test_58729_message_names_field_rule_upstream_and_fix() -> None:
    msg = rules_hit(mxfp4_ep().build())["vllm-58729"].message
    assert msg.startswith("spec.parallelism.expert: true: on vLLM 0.30.0 the Cutlass MXFP4")
    assert "(rule vllm-58729, https://github.com/vllm-project/vllm/issues/58729)." in msg
    assert "vLLM >= 0.32.0" in msg and "expert: false" in msg


# --- vllm-63170 ---------------------------------------------------------------------------------


def pp(n: int, model: str = "zai-org/GLM-5.3", acc: str = "H200") -> B:
    return B().model(model).accelerator(acc).pipeline(n).image("vllm/vllm-openai:v0.30.0")


@pytest.mark.parametrize(
    "stages, affected",
    [(2, "39-41"), (4, "19-21; 39-41; 59-61"), (8, "9; 19-21; 29; 39-41; 49; 59-61; 69")],
)
def test_63170_default_split_lists_the_affected_layers(stages: int, affected: str) -> None:
    obj = pp(stages).set("spec.parallelism.tensor", 8 // stages if stages < 8 else 1).build()
    finding = rules_hit(obj)["vllm-63170"]
    assert f"layers {affected} of zai-org/GLM-5.3" in finding.message
    assert finding.field == "spec.parallelism.pipeline"


@pytest.mark.parametrize("stages, split", [(2, "38,40"), (4, "18,20,20,20"), (8, "10,8,8,8,8,12,12,12")])
def test_63170_auto_sets_the_balanced_partition(stages: int, split: str) -> None:
    obj = pp(stages).set("spec.parallelism.tensor", max(1, 8 // stages)).build()
    result = admit(obj, CATALOGS)
    assert result.allowed
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": split} in result.patched["spec"]["engine"]["env"]


def test_63170_explicit_bad_partition_is_rejected_not_overridden() -> None:
    obj = pp(2).tensor(4).env("VLLM_PP_LAYER_PARTITION", "39,39").build()
    result = admit(obj, CATALOGS)
    assert not result.allowed
    assert result.patched["spec"]["engine"]["env"] == [{"name": "VLLM_PP_LAYER_PARTITION", "value": "39,39"}]
    assert result.errors[0].field == "spec.engine.env[0].value"
    assert "Set VLLM_PP_LAYER_PARTITION=38,40" in result.errors[0].message


def test_63170_explicit_good_partition_on_a_stock_image_is_clean() -> None:
    assert rules_hit(pp(2).tensor(4).env("VLLM_PP_LAYER_PARTITION", "38,40").build()) == {}


@pytest.mark.parametrize(
    "value, why, outcome",
    [
        ("38", "has 1 entries", "so vLLM refuses to start"),
        ("38,41", "sums to 79", "so vLLM refuses to start"),
        ("a,b", "integers", "so vLLM refuses to start"),
        ("", "integers", "so vLLM refuses to start"),
        ("0,78", "fewer than one layer", "vLLM checks only the count and the sum, so it starts loading and then fails"),
        ("-1,79", "fewer than one layer", "a negative size makes stages overlap"),
    ],
)
def test_63170_malformed_partition_says_what_vllm_then_does(value: str, why: str, outcome: str) -> None:
    finding = rules_hit(pp(2).tensor(4).env("VLLM_PP_LAYER_PARTITION", value).build())["vllm-63170"]
    assert why in finding.message and outcome in finding.message
    if value in ("0,78", "-1,79"):
        assert "refuses to start" not in finding.message


def test_63170_patched_image_is_clean_with_the_default_split() -> None:
    obj = pp(2).tensor(4).drop("spec.engine.image").vllm("0.30.0").build()
    assert "vllm-63170" not in rules_hit(obj)


def test_63170_glm5_computes_topk_on_every_layer_so_any_split_is_clean() -> None:
    assert "vllm-63170" not in rules_hit(pp(2, model="zai-org/GLM-5-FP8").tensor(4).build())


def test_63170_still_present_in_0_33() -> None:
    obj = pp(2).tensor(4).image("vllm/vllm-openai:v0.33.0").build()
    assert "vllm-63170" in rules_hit(obj)


@pytest.mark.parametrize(
    "acc, image",
    [("H200", "vllm/vllm-openai:v0.34.0"), ("MI355X", "vllm/vllm-openai-rocm:v0.34.0"), ("H200", None)],
)
def test_63170_0_34_hands_the_top_k_across_stages_on_cuda_and_rocm(acc: str, image: str | None) -> None:
    b = pp(2, acc=acc).tensor(4)
    b = b.image(image) if image else b.drop("spec.engine.image").vllm("0.34.0")
    result = admit(b.build(), CATALOGS)
    assert result.allowed and not [f for f in result.findings if f.rule == "vllm-63170"]
    assert "VLLM_PP_LAYER_PARTITION" not in str(result.patched["spec"]["engine"].get("env", []))


def test_63170_0_34_still_refuses_a_partition_vllm_refuses() -> None:
    finding = rules_hit(pp(2).tensor(4).image("vllm/vllm-openai:v0.34.0").env("VLLM_PP_LAYER_PARTITION", "38").build())
    assert "has 1 entries" in finding["vllm-63170"].message


def test_63170_on_0_33_offers_the_0_33_patched_image_and_0_34() -> None:
    fix = rules_hit(pp(2).tensor(4).image("vllm/vllm-openai:v0.33.0").build())["vllm-63170"].fix
    assert 'patched image (drop spec.engine.image, set spec.engine.vllmVersion: "0.33.0")' in fix
    assert 'vLLM 0.34.0 (spec.engine.vllmVersion: "0.34.0" without spec.engine.image)' in fix


def test_63170_unknown_version_offers_only_images_the_catalog_builds_with_the_patch() -> None:
    fix = rules_hit(pp(2).tensor(4).image("registry.example.com/vllm:latest").build())["vllm-63170"].fix
    assert 'patched image of vLLM 0.33.0 (drop spec.engine.image, set spec.engine.vllmVersion: "0.33.0")' in fix
    assert 'vllmVersion: "0.34.0" without spec.engine.image), which hands the top-k' in fix


@pytest.mark.parametrize(
    "acc, image", [("H200", "vllm/vllm-openai:v0.35.0"), ("MI355X", "vllm/vllm-openai-rocm:v0.35.0")]
)
def test_63170_unchecked_newer_version_is_warned_on_by_the_newest_checked_not_refused(acc: str, image: str) -> None:
    result = admit(pp(2, acc=acc).tensor(4).image(image).build(), CATALOGS)
    assert result.allowed, result.rejection()
    (warning,) = [f for f in result.findings if f.rule == "vllm-63170"]
    assert warning.severity == "warning" and not warning.changes
    assert "has not read vLLM 0.35.0's source, and judges it by vLLM 0.34.0" in warning.message
    assert "models/deepseek_v32/nvidia/model.py:233" in warning.message
    assert "glmops-patched" not in warning.message and "patched image" not in warning.message
    assert "VLLM_PP_LAYER_PARTITION=38,40" in warning.message


def test_63170_unchecked_version_between_checked_ones_is_judged_by_the_older_and_refused() -> None:
    finding = rules_hit(pp(2).tensor(4).image("vllm/vllm-openai:v0.28.0").build())["vllm-63170"]
    assert 'patched image of vLLM 0.33.0 (drop spec.engine.image, set spec.engine.vllmVersion: "0.33.0")' in finding.fix
    assert "0.28.0-glmops" not in finding.message


# --- vllm-52833 ---------------------------------------------------------------------------------


def mi355(version: str = "0.27.1") -> B:
    return (
        B()
        .model("amd/GLM-5.2-MXFP4")
        .accelerator("MI355X")
        .tensor(8)
        .expert()
        .image(f"vllm/vllm-openai-rocm:v{version}")
        .mtp(3)
    )


@pytest.mark.parametrize(
    "version, broken",
    [
        ("0.26.0", True),
        ("0.27.1", True),
        ("0.30.0", True),
        ("0.31.0", True),
        ("0.32.0", True),
        ("0.33.0", False),
        ("0.34.0", False),
    ],
)
def test_52833_affects_versions_before_0_33(version: str, broken: bool) -> None:
    assert ("vllm-52833" in rules_hit(mi355(version).build())) == broken


def test_52833_needs_mtp_gfx950_and_bf16_mla_weights() -> None:
    assert "vllm-52833" not in rules_hit(mi355().drop("spec.engine.speculative").build())
    assert "vllm-52833" not in rules_hit(mi355().accelerator("MI300X").build())
    assert "vllm-52833" not in rules_hit(mi355().model("RedHatAI/GLM-5.3-MXFP4").build())


def test_52833_repairs_only_the_switch_left_unset() -> None:
    obj = mi355().env("VLLM_ROCM_USE_AITER_FP4BMM", "0").build()
    result = admit(obj, CATALOGS)
    assert result.allowed
    assert result.patched["spec"]["engine"]["env"] == [
        {"name": "VLLM_ROCM_USE_AITER_FP4BMM", "value": "0"},
        {"name": "VLLM_ROCM_USE_AITER_FP8BMM", "value": "0"},
    ]
    assert [c.env_name for c in result.changes] == ["VLLM_ROCM_USE_AITER_FP8BMM"]


def test_52833_explicit_switch_on_is_rejected_naming_it() -> None:
    obj = mi355().env("VLLM_ROCM_USE_AITER_FP8BMM", "1").build()
    result = admit(obj, CATALOGS)
    assert not result.allowed
    assert result.errors[0].message.startswith("spec.engine.env[0].value: VLLM_ROCM_USE_AITER_FP4BMM unset")


def test_52833_without_expert_parallelism_warns_of_the_unexplained_crash() -> None:
    obj = mi355().expert(False).env("VLLM_ROCM_USE_AITER_FP4BMM", "0").env("VLLM_ROCM_USE_AITER_FP8BMM", "0")
    findings = evaluate(obj.build(), CATALOGS)
    warning = next(f for f in findings if f.rule == "vllm-52833")
    assert warning.severity == "warning" and "hipErrorIllegalAddress" in warning.message


# --- Decisions corrected from vLLM's source (catalog/vllm_facts.py) ------------------------------------------------


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
@pytest.mark.parametrize("backend", ["deepep_high_throughput", "deepep_low_latency", "flashinfer_nvlink_two_sided"])
def test_58729_tensor_only_expert_parallelism_builds_no_all_to_all_so_the_backend_is_not_refused(
    version: str, backend: str
) -> None:
    obj = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("B200", 8).tensor(8).expert()
    obj = obj.image(f"vllm/vllm-openai:v{version}").set("spec.engine.all2allBackend", backend)
    assert "vllm-58729" not in rules_hit(obj.build())


def test_58729_tensor_only_expert_parallelism_still_misroutes_below_0_32() -> None:
    obj = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("B200", 8).tensor(8).expert()
    hit = rules_hit(obj.image("vllm/vllm-openai:v0.31.0").build())
    assert hit["vllm-58729"].field == "spec.parallelism.expert"


@pytest.mark.parametrize("version", ["0.27.1", "0.33.0"])
@pytest.mark.parametrize("marlin", [False, True])
@pytest.mark.parametrize("backend", ["deepep_low_latency", "nixl_ep"])
def test_58729_batched_layouts_are_refused_on_stock_and_patched_images_alike(
    version: str, marlin: bool, backend: str
) -> None:
    patched = mxfp4_ep(None).vllm(version).set("spec.engine.all2allBackend", backend)
    if marlin:
        patched = patched.env("GLMOPS_MOE_MXFP4_BACKEND", "marlin")
    finding = rules_hit(patched.build())["vllm-58729"]
    assert "batched activation format" in finding.message and "GLMOPS_MOE_MXFP4_BACKEND=marlin" not in finding.message
    stock = rules_hit(mxfp4_ep(f"vllm/vllm-openai:v{version}").set("spec.engine.all2allBackend", backend).build())
    assert "vllm-58729" in stock


@pytest.mark.parametrize("gpu", ["MI355X", "MI300X"])
def test_compressed_tensors_mxfp4_is_refused_on_rocm_because_marlin_needs_cuda(gpu: str) -> None:
    obj = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator(gpu).tensor(8).build()
    errors = [f for f in evaluate(obj, CATALOGS) if f.severity == "error" and f.rule == "feasibility/format"]
    assert len(errors) == 1 and errors[0].field == "spec.accelerator.type"
    if gpu == "MI355X":
        assert "falls back to the Marlin experts, which need CUDA" in errors[0].message


@pytest.mark.parametrize("value", ["0", "false", "False", "FALSE", "no", ""])
@pytest.mark.parametrize("mode", ["Auto", "Reject"])
def test_52833_an_explicit_off_in_any_spelling_vllm_reads_as_off_is_accepted(value: str, mode: str) -> None:
    obj = mi355().remediation(mode).env("VLLM_ROCM_USE_AITER_FP4BMM", value).env("VLLM_ROCM_USE_AITER_FP8BMM", value)
    result = admit(obj.build(), CATALOGS)
    assert result.allowed, [e.message for e in result.errors]
    assert not result.changes


@pytest.mark.parametrize("value", ["1", "true", "TRUE"])
def test_52833_an_explicit_on_in_any_spelling_is_refused(value: str) -> None:
    obj = mi355().env("VLLM_ROCM_USE_AITER_FP4BMM", "0").env("VLLM_ROCM_USE_AITER_FP8BMM", value)
    result = admit(obj.build(), CATALOGS)
    assert not result.allowed and result.errors[0].field == "spec.engine.env[1].value"


@pytest.mark.parametrize("master", ["0", "false", "off"])
def test_52833_does_not_fire_with_the_aiter_master_switch_off(master: str) -> None:
    assert "vllm-52833" not in rules_hit(mi355().env("VLLM_ROCM_USE_AITER", master).build())


def test_52833_fires_with_the_master_switch_on_explicitly_or_left_to_glmops() -> None:
    assert "vllm-52833" in rules_hit(mi355().env("VLLM_ROCM_USE_AITER", "True").build())
    assert "vllm-52833" in rules_hit(mi355().build())


def test_52833_on_0_33_only_a_switch_turned_on_brings_it_back() -> None:
    assert "vllm-52833" not in rules_hit(mi355("0.33.0").build())
    hit = rules_hit(mi355("0.33.0").env("VLLM_ROCM_USE_AITER_FP4BMM", "1").build())
    assert "AITER's FP4 BMM" in hit["vllm-52833"].message


@pytest.mark.parametrize(
    "model, broken",
    [
        ("zai-org/GLM-5.2", True),
        ("zai-org/GLM-5.3-BF16", True),
        ("zai-org/GLM-5.1", True),
        ("zai-org/GLM-5.2-FP8", False),
        ("zai-org/GLM-5.3", False),
    ],
)
def test_52833_bf16_checkpoints_take_the_same_requantisation_fp8_ones_do_not(model: str, broken: bool) -> None:
    obj = mi355().model(model).data(2).build()  # BF16 weights need 16 GPUs
    assert ("vllm-52833" in rules_hit(obj)) == broken


def test_52833_patched_image_is_clean_unless_a_switch_is_turned_on_explicitly() -> None:
    patched = mi355().drop("spec.engine.image").vllm("0.30.0")
    assert "vllm-52833" not in rules_hit(patched.build())
    assert "vllm-52833" in rules_hit(patched.env("VLLM_ROCM_USE_AITER_FP8BMM", "1").build())


# --- what ct-mxfp4-moe-backends-read moves off the Cutlass experts (vllm-58729) ------------------------------------


@pytest.mark.parametrize(
    "moe, version, misroutes",
    [
        ("auto", "0.30.0", True),
        ("marlin", "0.31.0", True),
        ("deep_gemm", "0.31.0", True),  # read by the method only from 0.34.0
        ("b12x", "0.27.1", True),  # read only from 0.30.0
        ("b12x", "0.30.0", False),
        ("b12x", "0.31.0", False),
    ],
)
def test_58729_below_0_32_only_backends_the_mxfp4_method_reads_leave_the_cutlass_experts(
    moe: str, version: str, misroutes: bool
) -> None:
    obj = mxfp4_ep(f"vllm/vllm-openai:v{version}").set("spec.engine.moeBackend", moe).build()
    assert ("vllm-58729" in rules_hit(obj)) == misroutes


@pytest.mark.parametrize(
    "moe, version, refused",
    [
        ("auto", "0.33.0", True),
        ("deep_gemm", "0.33.0", True),  # not read in 0.33.0: still the Cutlass experts
        ("deep_gemm", "0.34.0", False),  # the oracle's DeepGEMM experts, checked while the model is built
        ("flashinfer_moe_ep_cutedsl", "0.32.0", False),
    ],
)
def test_58729_from_0_32_the_layout_is_judged_only_for_the_cutlass_experts(
    moe: str, version: str, refused: bool
) -> None:
    obj = (
        mxfp4_ep(f"vllm/vllm-openai:v{version}")
        .set("spec.engine.moeBackend", moe)
        .set("spec.engine.all2allBackend", "deepep_high_throughput")
        .build()
    )
    assert ("vllm-58729" in rules_hit(obj)) == refused


# --- index_topk_pattern (dsa-topk-pattern) ------------------------------------------------------------------------


def _with_pattern(pattern: str) -> Catalogs:
    """A GLM-5.3-shaped checkpoint whose config.json carries index_topk_pattern besides freq 4 / offset 3."""
    return CATALOGS.extend(
        "models:\n"
        "  example/GLM-5.3-Patterned:\n"
        "    family: GLM-5.3\n    architecture: GlmMoeDsaForCausalLM\n    format: bf16\n    layers: 78\n"
        "    firstKDenseReplace: 3\n    indexTopk: 2048\n    indexTopkFreq: 4\n    indexSkipTopkOffset: 3\n"
        f"    indexTopkPattern: {pattern}\n    mtpLayers: 1\n    weightGB: 1500\n    expertFraction: 0.9\n"
    )


@pytest.mark.parametrize(
    "pattern, pipeline, affected",
    [
        ("F" * 78, 2, None),  # every layer computes: freq 4 / offset 3 would have refused PP2
        ("F" * 39 + "S" + "F" * 38, 2, "39"),  # only the pattern's S layers reuse
        ("F" * 39 + "SS", 2, "39-40"),  # layers past the pattern's end compute
        ("F" * 19 + "S" * 59, 4, "19-77"),
    ],
)
def test_63170_index_topk_pattern_takes_precedence_over_frequency_and_offset(
    pattern: str, pipeline: int, affected: str | None
) -> None:
    catalogs = _with_pattern(pattern)
    obj = B().model("example/GLM-5.3-Patterned").accelerator("H200").pipeline(pipeline)
    obj = obj.tensor(8 // pipeline).image("vllm/vllm-openai:v0.33.0").build()
    hit = {f.rule: f for f in evaluate(obj, catalogs) if f.severity == "error"}
    if affected is None:
        assert "vllm-63170" not in hit
    else:
        assert f"layers {affected} of example/GLM-5.3-Patterned" in hit["vllm-63170"].message


def test_63170_index_topk_pattern_with_other_letters_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="indexTopkPattern: 'FX'"):
        _with_pattern("FX")


# --- gfx942: the FP8 BMM only (aiter-bmm-arch), warned on -----------------------------------------------------------


def _warnings(obj: dict) -> dict[str, Finding]:
    return {f.rule: f for f in evaluate(obj, CATALOGS) if f.severity == "warning"}


@pytest.mark.parametrize(
    "model, version, env, warned",
    [
        ("zai-org/GLM-5.3-BF16", "0.32.0", {}, True),  # FP8 BMM on by default below 0.33.0
        ("zai-org/GLM-5.2", "0.30.0", {}, True),
        ("zai-org/GLM-5.3-BF16", "0.33.0", {}, False),  # off by default from 0.33.0
        ("zai-org/GLM-5.3-BF16", "0.33.0", {"VLLM_ROCM_USE_AITER_FP8BMM": "1"}, True),
        ("zai-org/GLM-5.3-BF16", "0.32.0", {"VLLM_ROCM_USE_AITER_FP8BMM": "0"}, False),
        ("zai-org/GLM-5.3-BF16", "0.32.0", {"VLLM_ROCM_USE_AITER_FP4BMM": "0"}, True),  # FP4 never runs on gfx942
        ("zai-org/GLM-5.3-BF16", "0.32.0", {"VLLM_ROCM_USE_AITER": "0"}, False),
        ("zai-org/GLM-5.2-FP8", "0.32.0", {}, False),  # an FP8 kv_b_proj is the designed FP8 BMM path
    ],
)
def test_52833_on_mi300x_the_fp8_bmm_of_a_bf16_kv_b_proj_is_warned_on_never_refused(
    model: str, version: str, env: dict[str, str], warned: bool
) -> None:
    b = B().model(model).accelerator("MI300X").tensor(8).data(2).expert().mtp(3)
    b = b.image(f"vllm/vllm-openai-rocm:v{version}")
    for name, value in env.items():
        b = b.env(name, value)
    obj = b.build()
    assert not rules_hit(obj), rules_hit(obj)  # nothing refused: the deployment is otherwise sound
    assert ("vllm-52833" in _warnings(obj)) == warned
    if warned:
        assert "VLLM_ROCM_USE_AITER_FP8BMM=0" in _warnings(obj)["vllm-52833"].message
