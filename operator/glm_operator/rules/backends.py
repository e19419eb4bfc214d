"""vLLM backend names per version (`catalog/vllm_facts.py`, read from each release's config Literals) and platform."""

from __future__ import annotations

from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.versions import Version


def _every_version(fact: facts.Fact[frozenset[str]]) -> frozenset[str]:
    """An unknown version accepts any name some supported version accepts (its own check is vLLM's)."""
    return frozenset().union(*(names for _first, names in fact.since))


def moe_backends(version: Version | None) -> set[str]:
    return set(facts.MOE_BACKENDS.at(version) if version else _every_version(facts.MOE_BACKENDS))


def all2all_backends(version: Version | None) -> set[str]:
    names = facts.ALL2ALL_BACKENDS.at(version) if version else _every_version(facts.ALL2ALL_BACKENDS)
    return set(names - facts.ALL2ALL_CLI_REMOVED.at(version)) | {"auto"}


def kv_cache_dtypes(version: Version | None) -> set[str]:
    return set(facts.KV_CACHE_DTYPES.at(version) if version else _every_version(facts.KV_CACHE_DTYPES))


def attention_backends(version: Version | None) -> set[str]:
    """Upper-case names (vLLM upper-cases what it is given); `auto` is not among them."""
    return set(facts.ATTENTION_BACKENDS.at(version) if version else _every_version(facts.ATTENTION_BACKENDS))


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
