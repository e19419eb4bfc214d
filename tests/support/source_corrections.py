"""The admission decisions corrected from vLLM's source (docs/rules.md): (id, manifest, refusal or None).

Shared by the webhook test on the real API server and the `glmctl validate` test, so both decide the same cases.
"""

from __future__ import annotations

from tests.support.builders import GLMDeploymentBuilder as B

SOURCE_CORRECTIONS = [
    (
        "batched-a2a",
        B("batched")
        .model("RedHatAI/GLM-5.3-MXFP4")
        .accelerator("GB200")
        .data(8)
        .expert()
        .vllm("0.33.0")
        .set("spec.engine.all2allBackend", "deepep_low_latency"),
        "batched activation format",
    ),
    (
        "ct-mxfp4-rocm",
        B("rocm-mxfp4").model("RedHatAI/GLM-5.3-MXFP4").accelerator("MI355X").tensor(8).vllm("0.33.0"),
        "falls back to the Marlin experts, which need CUDA",
    ),
    (
        "tensor-only-ep",
        B("tp-ep")
        .model("RedHatAI/GLM-5.3-MXFP4")
        .accelerator("B200", 8)
        .tensor(8)
        .expert()
        .image("vllm/vllm-openai:v0.33.0")
        .set("spec.engine.all2allBackend", "deepep_high_throughput"),
        None,
    ),
    (
        "aiter-false",
        B("aiter-false")
        .model("amd/GLM-5.2-MXFP4")
        .accelerator("MI355X")
        .tensor(8)
        .expert()
        .mtp(3)
        .image("vllm/vllm-openai-rocm:v0.27.1")
        .remediation("Reject")
        .env("VLLM_ROCM_USE_AITER_FP4BMM", "false")
        .env("VLLM_ROCM_USE_AITER_FP8BMM", "False"),
        None,
    ),
    (
        "bf16-mtp",
        B("bf16-mtp")
        .model("zai-org/GLM-5.3-BF16")
        .accelerator("MI355X")
        .tensor(8)
        .data(2)
        .expert()
        .mtp(3)
        .image("vllm/vllm-openai-rocm:v0.32.0")
        .remediation("Reject"),
        "re-quantizes the BF16 kv_b_proj of zai-org/GLM-5.3-BF16",
    ),
    (
        "marlin-one-sided-0.26",
        B("marlin-1s")
        .model("RedHatAI/GLM-5.3-MXFP4")
        .accelerator("GB200")
        .data(8)
        .expert()
        .vllm("0.26.0")
        .set("spec.engine.all2allBackend", "flashinfer_nvlink_one_sided")
        .env("GLMOPS_MOE_MXFP4_BACKEND", "marlin"),
        "neither the Cutlass nor the Marlin MXFP4 MoE experts take this all-to-all layout",
    ),
    (
        "marlin-one-sided-0.27",
        B("marlin-1s-027")
        .model("RedHatAI/GLM-5.3-MXFP4")
        .accelerator("GB200")
        .data(8)
        .expert()
        .vllm("0.27.1")
        .set("spec.engine.all2allBackend", "flashinfer_nvlink_one_sided")
        .env("GLMOPS_MOE_MXFP4_BACKEND", "marlin"),
        None,
    ),
    (
        "batched-triton-0.26",
        B("bt-026").accelerator("H200").tensor(8).vllm("0.26.0").set("spec.engine.moeBackend", "batched_triton"),
        "batched_triton: not a value vLLM 0.26.0 accepts",
    ),
]
