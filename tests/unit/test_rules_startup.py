"""Start-up refusals (rule startup/...): what vLLM refuses while starting is refused at admission."""

from __future__ import annotations

import pytest

from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import admit, evaluate
from glm_operator.rules.findings import Finding
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()


def errors(obj: dict) -> dict[str, Finding]:
    return {f.rule: f for f in evaluate(obj, CATALOGS) if f.severity == "error"}


def pp(n: int, version: str = "0.32.0") -> B:
    return (
        B()
        .model("zai-org/GLM-5.3")
        .accelerator("H200")
        .pipeline(n)
        .tensor(8 // n)
        .image(f"vllm/vllm-openai:v{version}")
    )


@pytest.mark.parametrize(
    "value, why",
    [
        ("38,40", "has 2 entries but pipeline parallel size is 1"),
        ("77", "sums to 77 but the model has 78 layers"),
        ("a", "must be 1 comma-separated integers"),
        ("", "must be 1 comma-separated integers"),
        ("78.0", "must be 1 comma-separated integers"),
    ],
)
def test_pipeline_1_partition_vllm_refuses_is_refused(value: str, why: str) -> None:
    hit = errors(pp(1).env("VLLM_PP_LAYER_PARTITION", value).build())
    finding = hit["startup/pp-partition"]
    assert finding.field == "spec.engine.env[0].value"
    assert why in finding.message
    assert "vllm/distributed/utils.py:126 get_pp_indices" in finding.message
    assert "Remove VLLM_PP_LAYER_PARTITION" in finding.message
    assert "vllm-63170" not in hit


def test_pipeline_1_partition_equal_to_the_layer_count_is_clean() -> None:
    assert errors(pp(1).env("VLLM_PP_LAYER_PARTITION", "78").build()) == {}


def test_pipeline_1_without_a_partition_is_clean() -> None:
    assert "startup/pp-partition" not in errors(pp(1).build())


def test_pipeline_2_malformed_partition_is_reported_once_by_63170() -> None:
    hit = errors(pp(2).env("VLLM_PP_LAYER_PARTITION", "38").build())
    assert "vllm-63170" in hit and "startup/pp-partition" not in hit


@pytest.mark.parametrize("version, line", [("0.26.0", 127), ("0.31.0", 128), ("0.33.0", 198)])
def test_the_message_cites_the_version_s_own_line(version: str, line: int) -> None:
    finding = errors(pp(1, version).env("VLLM_PP_LAYER_PARTITION", "1,77").build())["startup/pp-partition"]
    assert f"vllm/distributed/utils.py:{line} get_pp_indices" in finding.message


def moe(backend: str, version: str = "0.32.0", all2all: str | None = None) -> dict:
    b = B().model("zai-org/GLM-5.3").accelerator("B200").image(f"vllm/vllm-openai:v{version}")
    b = b.set("spec.engine.moeBackend", backend)
    return (b.set("spec.engine.all2allBackend", all2all) if all2all else b).build()


@pytest.mark.parametrize(
    "backend, version, refused",
    [
        ("flashinfer_moe_ep_mega_deep_gemm", "0.30.0", True),
        ("flashinfer_moe_ep_mega_cutedsl", "0.31.0", True),
        ("flashinfer_moe_ep_mega_deep_gemm", "0.32.0", True),
        ("flashinfer_moe_ep_mega_deep_gemm", "0.33.0", True),
        ("flashinfer_moe_ep_cutedsl", "0.32.0", False),
        ("flashinfer_cutlass", "0.32.0", False),
    ],
)
def test_moe_backend_restricted_to_deepseek_v4_is_refused_for_glm5(backend: str, version: str, refused: bool) -> None:
    hit = errors(moe(backend, version))
    assert ("startup/moe-backend-model" in hit) == refused
    if refused:
        finding = hit["startup/moe-backend-model"]
        assert finding.field == "spec.engine.moeBackend"
        assert "only for DeepSeek-V4" in finding.message and "vllm/config/kernel.py:" in finding.message


def test_self_dispatching_moe_backend_refuses_an_explicit_all2all() -> None:
    hit = errors(moe("flashinfer_moe_ep_cutedsl", "0.32.0", "deepep_low_latency"))
    finding = hit["startup/moe-backend-all2all"]
    assert finding.field == "spec.engine.all2allBackend"
    assert "vllm/config/kernel.py:210" in finding.message and "Leave all2allBackend at auto" in finding.message


def test_self_dispatching_moe_backend_with_the_default_all2all_is_clean() -> None:
    assert "startup/moe-backend-all2all" not in errors(
        moe("flashinfer_moe_ep_cutedsl", "0.32.0", "allgather_reducescatter")
    )


def extra(*args: str) -> dict:
    return B().model("zai-org/GLM-5.3").accelerator("H200").tensor(8).set("spec.engine.extraArgs", list(args)).build()


@pytest.mark.parametrize(
    "args, field",
    [
        (["--kernel-config", '{"moe_backend": "triton"}'], "spec.engine.moeBackend"),
        (['--kernel-config={"moe_backend": "triton"}'], "spec.engine.moeBackend"),
        (["--kernel_config", '{"moe_backend": "triton"}'], "spec.engine.moeBackend"),
        (["--kernel-conf", '{"moe_backend": "triton"}'], "spec.engine.moeBackend"),
        (["--kernel-config.moe_backend=triton"], "spec.engine.moeBackend"),
        (["--kernel-config.moe_backend", "triton"], "spec.engine.moeBackend"),
        (["--kernel_config.moe_backend=triton"], "spec.engine.moeBackend"),
        (["-ac", '{"backend": "FLASHMLA"}'], "spec.engine.attentionBackend"),
        (["--attention-config.backend=FLASHMLA"], "spec.engine.attentionBackend"),
        (["-sc.method=mtp"], "spec.engine.speculative"),
        (["--speculative-config.num_speculative_tokens", "2"], "spec.engine.speculative"),
    ],
)
def test_managed_knob_through_a_json_config_flag_is_refused(args: list[str], field: str) -> None:
    finding = errors(extra(*args))["startup/extra-args-json"]
    assert finding.field == "spec.engine.extraArgs[0]"
    assert f"Set {field} instead" in finding.message


@pytest.mark.parametrize(
    "args",
    [
        ["--kernel-config", '{"enable_flashinfer_autotune": false}'],
        ["--kernel-config.enable_flashinfer_autotune=false"],
        ["--attention-config.use_prefill_decode_attention=true"],
        ["--max-model-len", "8192"],
    ],
)
def test_unmanaged_keys_of_json_config_flags_pass(args: list[str]) -> None:
    assert "startup/extra-args-json" not in errors(extra(*args))


def test_whole_speculative_config_is_refused_once_by_the_managed_flag_check() -> None:
    hit = {f.rule for f in evaluate(extra("-sc", '{"method": "mtp"}'), CATALOGS) if f.severity == "error"}
    assert "feasibility/extra-args" in hit and "startup/extra-args-json" not in hit


def speculative(method: str, tokens: int | None = None, model: str = "zai-org/GLM-5.3", version: str = "0.32.0") -> B:
    config: dict[str, object] = {"method": method}
    if tokens is not None:
        config["numSpeculativeTokens"] = tokens
    return B().model(model).accelerator("H200").tensor(8).vllm(version).set("spec.engine.speculative", config)


@pytest.mark.parametrize("method", ["mtp", "ngram"])
def test_speculative_without_a_draft_count_is_refused(method: str) -> None:
    finding = errors(speculative(method).remediation("Reject").build())["startup/speculative-tokens"]
    assert finding.field == "spec.engine.speculative.numSpeculativeTokens"
    assert "vllm/config/speculative.py:1820" in finding.message
    assert "Set spec.engine.speculative.numSpeculativeTokens" in finding.message


def test_mtp_without_a_draft_count_is_repaired_to_the_checkpoint_s_mtp_layers() -> None:
    admission = admit(speculative("mtp").build(), CATALOGS)
    assert admission.allowed
    assert admission.patched["spec"]["engine"]["speculative"]["numSpeculativeTokens"] == 1
    assert [c.path for c in admission.changes] == ["spec.engine.speculative.numSpeculativeTokens"]


def test_ngram_without_a_draft_count_is_not_repaired() -> None:
    admission = admit(speculative("ngram").build(), CATALOGS)
    assert not admission.allowed
    assert "startup/speculative-tokens" in admission.rejection()


@pytest.mark.parametrize("method", ["mtp", "ngram"])
def test_speculative_with_a_draft_count_is_clean(method: str) -> None:
    hit = errors(speculative(method, 3).build())
    assert "startup/speculative-tokens" not in hit and "startup/speculative-draft" not in hit


@pytest.mark.parametrize("method", ["eagle", "eagle3", "draft_model"])
@pytest.mark.parametrize("tokens", [None, 3])
def test_methods_that_need_a_draft_checkpoint_are_refused(method: str, tokens: int | None) -> None:
    hit = errors(speculative(method, tokens).build())
    finding = hit["startup/speculative-draft"]
    assert finding.field == "spec.engine.speculative.method"
    assert "vllm/config/speculative.py:1188" in finding.message
    assert "startup/speculative-tokens" not in hit  # one finding: the method is what to change


def test_draft_checkpoint_refusal_cites_the_speculator_config_from_0_34_0() -> None:
    finding = errors(speculative("eagle", 3, version="0.34.0").build())["startup/speculative-draft"]
    assert "vllm/v1/worker/gpu/spec_decode/speculator_config.py:173" in finding.message


def all2all(name: str, model: str, version: str = "0.32.0") -> dict:
    spec = B().model(model).accelerator("H200").tensor(8).vllm(version)
    return spec.set("spec.engine.all2allBackend", name).build()


@pytest.mark.parametrize("model", ["zai-org/GLM-5.3", "zai-org/GLM-5.2-FP8"])
def test_moonep_with_a_quantized_checkpoint_is_refused(model: str) -> None:
    finding = errors(all2all("moonep", model))["startup/moonep-quantized"]
    assert finding.field == "spec.engine.all2allBackend"
    assert "fp8 checkpoint" in finding.message and "vllm/config/vllm.py:2035" in finding.message


def test_moonep_with_the_bf16_checkpoint_passes_this_check() -> None:
    assert "startup/moonep-quantized" not in errors(all2all("moonep", "zai-org/GLM-5.3-BF16"))


def test_moonep_before_0_31_0_is_refused_as_an_unknown_name_only() -> None:
    hit = errors(all2all("moonep", "zai-org/GLM-5.3", "0.30.0"))
    assert "startup/moonep-quantized" not in hit and "feasibility/backend" in hit


@pytest.mark.parametrize(
    "dtype, refused", [("nvfp4", True), ("nvfp4_4over6", True), ("nvfp4_ds_mla", False), ("fp8", False)]
)
def test_plain_nvfp4_kv_cache_is_refused_for_mla(dtype: str, refused: bool) -> None:
    obj = B().model("zai-org/GLM-5.3").accelerator("H200").tensor(8).vllm("0.32.0")
    hit = errors(obj.set("spec.engine.kvCacheDtype", dtype).build())
    assert ("startup/kv-nvfp4-mla" in hit) == refused
    if refused:
        assert hit["startup/kv-nvfp4-mla"].field == "spec.engine.kvCacheDtype"
        assert "vllm/config/vllm.py:3296" in hit["startup/kv-nvfp4-mla"].message


def mxfp4(moe: str, acc: str, version: str, all2all: str = "auto") -> B:
    """The compressed-tensors MXFP4 checkpoint with an explicit moeBackend, on one node of `acc`."""
    b = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator(acc).vllm(version)
    return b.set("spec.engine.moeBackend", moe).set("spec.engine.all2allBackend", all2all)


ORACLE = "startup/mxfp4-oracle-experts"
PARALLEL = {
    "tp": lambda b: b.tensor(8),
    "dp": lambda b: b.data(8),
    "ep-tp": lambda b: b.tensor(8).expert(),
    "ep-dp": lambda b: b.data(8).expert(),
}


@pytest.mark.parametrize(
    "moe, acc, version, parallel, all2all, experts, line",
    [
        ("b12x", "GB200", "0.30.0", "tp", "auto", "B12xExperts", "oracle/mxfp4.py:455"),
        ("b12x", "H200", "0.31.0", "tp", "auto", "B12xExperts", "oracle/mxfp4.py:464"),
        ("b12x", "RTX-PRO-6000", "0.32.0", "ep-tp", "auto", "B12xExperts", "oracle/mxfp4.py:542"),
        ("b12x", "RTX-PRO-6000", "0.34.0", "ep-dp", "auto", "B12xExperts", "oracle/base.py:236"),
        ("flashinfer_moe_ep_cutedsl", "H200", "0.32.0", "ep-dp", "auto", "FlashInferMoeEpExperts", ":542"),
        ("flashinfer_moe_ep_cutedsl", "RTX-PRO-6000", "0.33.0", "ep-dp", "auto", "FlashInferMoeEpExperts", ":611"),
        ("flashinfer_moe_ep_cutedsl", "B200", "0.33.0", "tp", "auto", "FlashInferMoeEpExperts", ":611"),
        ("flashinfer_moe_ep_mega_deep_gemm", "GB200", "0.34.0", "tp", "auto", "FlashInferMoeEpExperts", ":236"),
        ("flashinfer_moe_ep_cutedsl", "GB200", "0.32.0", "ep-dp", "deepep_low_latency", "FlashInferMoeEpExperts", ""),
        ("deep_gemm", "H200", "0.34.0", "ep-dp", "auto", "DeepGemmFP4Experts", "oracle/base.py:236"),
        ("deep_gemm", "GB200", "0.34.0", "ep-dp", "flashinfer_nvlink_two_sided", "DeepGemmFP4Experts", ":236"),
        ("deep_gemm", "B200", "0.34.0", "ep-dp", "flashinfer_nvlink_one_sided", "DeepGemmFP4Experts", ":236"),
    ],
)
def test_mxfp4_oracle_experts_refused_for_the_device_or_parallel_config(
    moe: str, acc: str, version: str, parallel: str, all2all: str, experts: str, line: str
) -> None:
    b = PARALLEL[parallel](mxfp4(moe, acc, version, all2all))
    finding = errors(b.build())[ORACLE]
    assert finding.field == "spec.engine.moeBackend" and finding.value == moe
    assert experts in finding.message and "MXFP4 oracle" in finding.message
    assert line in finding.message and "(vllm/model_executor/layers/fused_moe/oracle/" in finding.message
    assert "Use moeBackend auto" in finding.message


@pytest.mark.parametrize(
    "moe, acc, version, parallel, all2all",
    [
        ("b12x", "RTX-PRO-6000", "0.30.0", "tp", "auto"),  # SM120, no expert parallelism
        ("b12x", "RTX-PRO-6000", "0.34.0", "dp", "auto"),  # data parallel without expert parallelism
        ("b12x", "GB200", "0.27.1", "tp", "auto"),  # before 0.30.0 the method does not read b12x
        ("flashinfer_moe_ep_cutedsl", "GB200", "0.32.0", "ep-dp", "auto"),
        ("flashinfer_moe_ep_cutedsl", "B300", "0.34.0", "ep-tp", "auto"),
        ("flashinfer_moe_ep_cutedsl", "H200", "0.31.0", "tp", "auto"),  # not read before 0.32.0
        ("deep_gemm", "GB200", "0.34.0", "ep-dp", "auto"),
        ("deep_gemm", "RTX-PRO-6000", "0.34.0", "tp", "auto"),
        ("deep_gemm", "B200", "0.34.0", "ep-dp", "deepep_high_throughput"),
        ("deep_gemm", "H200", "0.33.0", "tp", "auto"),  # not read before 0.34.0: Cutlass or Marlin, unchecked
        ("marlin", "H200", "0.34.0", "tp", "auto"),
        ("auto", "GB200", "0.34.0", "tp", "auto"),
    ],
)
def test_mxfp4_oracle_experts_clean_where_they_may_run(
    moe: str, acc: str, version: str, parallel: str, all2all: str
) -> None:
    b = PARALLEL[parallel](mxfp4(moe, acc, version, all2all))
    assert ORACLE not in errors(b.build())


def test_mxfp4_oracle_experts_only_for_the_compressed_tensors_mxfp4_checkpoint() -> None:
    for model in ("zai-org/GLM-5.3", "zai-org/GLM-5.2-FP8"):
        b = B().model(model).accelerator("H200").tensor(8).vllm("0.34.0").set("spec.engine.moeBackend", "b12x")
        assert ORACLE not in errors(b.build())


def test_mxfp4_oracle_experts_not_on_rocm() -> None:
    b = B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("MI355X").tensor(8).vllm("0.34.0")
    assert ORACLE not in errors(b.set("spec.engine.moeBackend", "b12x").build())
