"""Feasibility checks: the spec can run at all on the hardware and vLLM version it names."""

from __future__ import annotations

import pytest

from glm_operator.catalog import vllm_facts
from glm_operator.catalog.accelerators import ArchFamily
from glm_operator.catalog.versions import Version
from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import evaluate
from glm_operator.rules.findings import redact
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()


def findings(b: B) -> dict[tuple[str, str], str]:
    return {(f.rule, f.severity): f.message for f in evaluate(b.build(), CATALOGS)}


@pytest.mark.parametrize(
    "builder, rule, severity, fragment",
    [
        (
            B().accelerator("H200").tensor(8).expert(False).data(2).tensor(6),
            "feasibility/gpus",
            "error",
            "12 GPUs, which is not a whole number of 8-GPU H200 nodes",
        ),
        (B().accelerator("H200").tensor(8).expert(), "feasibility/memory", None, None),
        (B().accelerator("H200").expert(), "feasibility/expert-parallel", "warning", "turns expert parallelism off"),
        (B().accelerator("H200").expert(), "feasibility/expert-parallel", "error", None),
        (
            B()
            .model("RedHatAI/GLM-5.3-MXFP4")
            .accelerator("H200")
            .data(8)
            .expert()
            .set("spec.engine.all2allBackend", "nixl_ep"),
            "feasibility/moe-layout",
            "error",
            "runs the MXFP4 MoE of RedHatAI/GLM-5.3-MXFP4 on its Marlin experts, which cannot take the batched",
        ),
        (
            B()
            .model("RedHatAI/GLM-5.3-MXFP4")
            .accelerator("H200")
            .tensor(8)
            .expert()
            .set("spec.engine.all2allBackend", "nixl_ep"),
            "feasibility/moe-layout",
            None,
            None,
        ),
        (B().accelerator("H200").tensor(2), "feasibility/memory", "error", "GiB of weights per GPU"),
        (
            B().model("amd/GLM-5.2-MXFP4").accelerator("B200").tensor(8),
            "feasibility/format",
            "error",
            "does not run on sm100",
        ),
        (B().model("nvidia/GLM-5.3-NVFP4").accelerator("H200").tensor(8), "feasibility/format", "warning", "Marlin"),
        (B().model("nvidia/GLM-5.3-NVFP4").accelerator("H200").tensor(8), "feasibility/format", "error", None),
        (B().model("nvidia/GLM-5.3-NVFP4").accelerator("MI355X").tensor(8), "feasibility/format", "error", "CUDA"),
        (
            B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("H200").tensor(8),
            "feasibility/format",
            "warning",
            "no FP4 tensor cores",
        ),
        (
            B().accelerator("H200").tensor(8).set("spec.engine.moeBackend", "aiter"),
            "feasibility/backend",
            "error",
            "runs only on ROCM",
        ),
        (
            B()
            .model("amd/GLM-5.2-MXFP4")
            .accelerator("MI355X")
            .tensor(8)
            .set("spec.engine.attentionBackend", "FLASHMLA_SPARSE"),
            "feasibility/backend",
            "error",
            "runs only on CUDA",
        ),
        (
            B().accelerator("H200").tensor(8).set("spec.engine.moeBackend", "warp_speed"),
            "feasibility/backend",
            "error",
            "Use one of",
        ),
        (
            B().accelerator("H200").tensor(8).vllm("0.32.0").set("spec.engine.attentionBackend", "warp_attn"),
            "feasibility/backend",
            "error",
            "Use auto or one of",
        ),
        (
            # STEP5_DSA is a member of AttentionBackendEnum from 0.33.0 only
            B().accelerator("H200").tensor(8).vllm("0.32.0").set("spec.engine.attentionBackend", "step5_dsa"),
            "feasibility/backend",
            "error",
            "not a value vLLM 0.32.0 accepts",
        ),
        (B().accelerator("H200").tensor(8).vllm("0.29.0"), "feasibility/version", "error", "no patched image"),
        (
            B().accelerator("H200").tensor(8).image("vllm/vllm-openai:v0.35.0"),
            "feasibility/version",
            "warning",
            "judge it by what vLLM 0.34.0 (the newest checked version) does",
        ),
        (
            B().accelerator("H200").tensor(8).image("vllm/vllm-openai:v0.28.0"),
            "feasibility/version",
            "warning",
            "judge it by what vLLM 0.27.1 (the checked version below it) does",
        ),
        (
            B().accelerator("H200").tensor(8).image("vllm/vllm-openai-rocm:v0.30.0"),
            "feasibility/platform",
            "error",
            "ROCM image cannot drive H200",
        ),
        (
            B().accelerator("H200").tensor(8).image("vllm/vllm-openai:v0.30.0").vllm("0.31.0"),
            "feasibility/version",
            "error",
            "contradicts the image",
        ),
        (
            B()
            .accelerator("H200")
            .tensor(8)
            .set("spec.engine.extraArgs", ["--max-model-len=8192", "--tensor-parallel-size=4"]),
            "feasibility/extra-args",
            "error",
            "spec.engine.extraArgs[1]: --tensor-parallel-size=4",
        ),
        (
            B().accelerator("H200").tensor(8).set("spec.engine.speculative", {"method": "mtp", "promptLookupMax": 3}),
            "feasibility/ngram-lookup",
            "error",
            "spec.engine.speculative.promptLookupMax: 3: only the ngram method matches prompt n-grams",
        ),
        (
            B()
            .accelerator("H200")
            .tensor(8)
            .set("spec.engine.speculative", {"method": "ngram", "promptLookupMin": 4, "promptLookupMax": 3}),
            "feasibility/ngram-lookup",
            "error",
            "spec.engine.speculative.promptLookupMin: 4: larger than promptLookupMax (3)",
        ),
        (
            B()
            .accelerator("H200")
            .tensor(8)
            .set("spec.engine.speculative", {"method": "ngram", "promptLookupMin": 3, "promptLookupMax": 3}),
            "feasibility/ngram-lookup",
            None,
            None,
        ),
        (
            B().model("zai-org/GLM-5.3-FP8").accelerator("H200").tensor(8),
            "feasibility/model",
            "warning",
            "common alias of zai-org/GLM-5.3",
        ),
        (
            B().model("someone/GLM-5.3-finetune").accelerator("H200").tensor(8),
            "feasibility/model",
            "warning",
            "not in the model catalog",
        ),
    ],
)
def test_feasibility_finding(builder: B, rule: str, severity: str | None, fragment: str | None) -> None:
    got = findings(builder)
    if severity is None:
        assert not any(r == rule for r, _ in got), got
    elif fragment is None:
        assert (rule, severity) not in got, got
    else:
        assert (rule, severity) in got, got
        assert fragment in got[(rule, severity)]


def test_dp8_ep_on_gb200_spans_two_trays_and_fits() -> None:
    got = findings(B().model("RedHatAI/GLM-5.3-MXFP4").accelerator("GB200").data(8).expert().vllm("0.32.0"))
    assert not any(sev == "error" for _, sev in got), got


def extra_args_errors(b: B) -> list[str]:
    return [f.message for f in evaluate(b.build(), CATALOGS) if f.rule == "feasibility/extra-args"]


@pytest.mark.parametrize(
    "arg, fix",
    [
        ("--port=9000", "Remove it: vLLM serves on port 8000"),
        ("--port 9000", "Remove it: vLLM serves on port 8000"),
        ("--host=127.0.0.1", "Remove it: vLLM listens on every address"),
        ("--served-model-name=glm", "Remove it: the server answers to spec.model.name"),
        ("--served_model_name", "Remove it: the server answers to spec.model.name"),
        ("--served-model", "Remove it: the server answers to spec.model.name"),
        ("--api-key=sk-1", "authenticate clients in front of the Service"),
        ("--api_key", "authenticate clients in front of the Service"),
        ("--uds=/tmp/v.sock", "Remove it"),
        ("--ssl-certfile=/c.pem", "terminate TLS in front of the Service"),
    ],
)
def test_an_extra_arg_that_would_hide_the_server_from_its_gate_is_refused_with_a_fix(arg: str, fix: str) -> None:
    (message,) = extra_args_errors(B().accelerator("H200").tensor(8).set("spec.engine.extraArgs", ["--seed=1", arg]))
    assert message.startswith(f"spec.engine.extraArgs[1]: {redact(arg)}: --")  # --api-key=<redacted>: no secret
    assert fix in message and message.endswith(".")


@pytest.mark.parametrize("arg", ["--tensor-parallel=2", "--tensor_parallel", "--kv-cache-dt fp8"])
def test_an_abbreviated_managed_flag_is_refused_naming_the_flag_vllm_reads(arg: str) -> None:
    (message,) = extra_args_errors(B().accelerator("H200").tensor(8).set("spec.engine.extraArgs", [arg]))
    assert message.startswith(f"spec.engine.extraArgs[0]: {arg}: vLLM reads it as --")
    assert "Set spec." in message


def test_vllm_api_key_in_the_environment_is_refused_as_the_flag_is() -> None:
    (message,) = extra_args_errors(B().accelerator("H200").tensor(8).env("VLLM_API_KEY", "sk-1"))
    assert message.startswith("spec.engine.env[0]: VLLM_API_KEY: sets --api-key: the canary sends no key")
    assert "Remove VLLM_API_KEY; authenticate clients in front of the Service" in message


@pytest.mark.parametrize(
    "arg", ["--max-model-len=8192", "--portable", "--hostname-x", "--p", "--enable-prefix-caching"]
)
def test_flags_that_leave_the_gate_alone_are_admitted(arg: str) -> None:
    assert extra_args_errors(B().accelerator("H200").tensor(8).set("spec.engine.extraArgs", [arg])) == []


# Compute capability of each CUDA family the catalog knows (ArchFamily names them by it).
CUDA_CAPABILITY = {"sm90": 90, "sm100": 100, "sm120": 120}


@pytest.mark.parametrize("version", CATALOGS.images.versions)
@pytest.mark.parametrize("family", sorted(CUDA_CAPABILITY))
def test_nvfp4_is_refused_on_no_cuda_family_vllm_takes_it_on(family: str, version: str) -> None:
    """modelopt-nvfp4-min-capability: vLLM takes NVFP4 from this capability on, with Marlin where no FP4 kernel runs,
    so formats.yaml may warn on such a family but never refuse it."""
    min_capability, marlin = vllm_facts.MODELOPT_NVFP4_HOPPER.at(Version.parse(version))
    fmt = CATALOGS.formats["modelopt-nvfp4"]
    family_enum = ArchFamily(family)
    if CUDA_CAPABILITY[family] >= min_capability and marlin:
        assert family_enum in fmt.supported or family_enum in fmt.warn, f"{family} is refused, vLLM {version} runs it"


@pytest.mark.parametrize("name", ["auto", "AUTO", "flashmla_sparse", "FLASHMLA_SPARSE", "TRITON_MLA"])
def test_attention_backend_names_vllm_knows_pass_in_any_case(name: str) -> None:
    obj = B().accelerator("H200").tensor(8).vllm("0.32.0").set("spec.engine.attentionBackend", name).build()
    assert not [f for f in evaluate(obj, CATALOGS) if f.rule == "feasibility/backend"]
