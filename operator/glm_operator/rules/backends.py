"""vLLM backend names per version and platform (from each release's config Literals)."""

from __future__ import annotations

from collections.abc import Sequence

from glm_operator.catalog.versions import Version

_MOE_ALL = {
    "auto",
    "triton",
    "batched_triton",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_b12x",
    "marlin",
    "humming",
    "triton_unfused",
    "aiter",
    "flydsl",
    "hpc",
    "emulation",
}
# (first version, last version exclusive or None, names)
_MOE_ADDED = [
    ("0.30.0", None, {"b12x", "aiter_triton_mxfp4_bf16", "rdna3", "flashinfer_moe_ep_mega_deep_gemm"}),
    ("0.30.0", "0.32.0", {"flashinfer_moe_ep_mega_cutedsl"}),
    ("0.32.0", None, {"flashinfer_moe_ep_cutedsl", "aiter_mega_moe"}),
    ("0.33.0", None, {"aiter_triton_mxfp4_mxfp4"}),
]
_A2A_ALL = {
    "naive",
    "pplx",
    "allgather_reducescatter",
    "deepep_high_throughput",
    "deepep_low_latency",
    "deepep_v2",
    "mori_high_throughput",
    "mori_low_latency",
    "nixl_ep",
    "flashinfer_all2allv",
    "flashinfer_nvlink_two_sided",
    "flashinfer_nvlink_one_sided",
}
_A2A_ADDED = [("0.31.0", None, {"moonep"}), ("0.32.0", None, {"passthrough"})]
_KV_ALL = {
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
}
_KV_ADDED = [
    ("0.30.0", None, {"nvfp4_ds_mla", "nvfp4_4over6"}),
    ("0.32.0", None, {"ultraquant_4bit"}),
    ("0.33.0", None, {"octave_k3v4", "octave_k3v3", "octave_k3v3_compact"}),
]


def _names(base: set[str], added: Sequence[tuple[str, str | None, set[str]]], version: Version | None) -> set[str]:
    names = set(base)
    for low, high, extra in added:
        if version is None or (version >= Version.parse(low) and (high is None or version < Version.parse(high))):
            names |= extra
    return names


def moe_backends(version: Version | None) -> set[str]:
    return _names(_MOE_ALL, _MOE_ADDED, version)


def all2all_backends(version: Version | None) -> set[str]:
    return _names(_A2A_ALL, _A2A_ADDED, version) | {"auto"}


def kv_cache_dtypes(version: Version | None) -> set[str]:
    return _names(_KV_ALL, _KV_ADDED, version)


def platform_of_moe_backend(name: str) -> str | None:
    """The only platform a MoE backend runs on, or None when it is portable."""
    if name.startswith(("aiter", "flydsl", "rdna3")):
        return "rocm"
    if name.startswith(("cutlass", "deep_gemm", "flashinfer", "marlin", "b12x")):
        return "cuda"
    return None


def platform_of_all2all(name: str) -> str | None:
    if name.startswith("mori"):
        return "rocm"
    if name.startswith(("deepep", "flashinfer", "nixl", "moonep")):
        return "cuda"
    return None


def platform_of_attention(name: str) -> str | None:
    upper = name.upper()
    if upper.startswith("ROCM_"):
        return "rocm"
    if upper.startswith(("FLASHMLA", "FLASHINFER", "CUTLASS", "FLASH_ATTN", "TRITON_FLASHINFER", "B12X")):
        return "cuda"
    return None
