"""The patch registry: every patch this plugin knows, in the order they are applied."""

from __future__ import annotations

from glmops_vllm_patches import (
    patch_dsa_pp_topk_handoff,
    patch_moe_mxfp4_expert_map,
    patch_null_content_metrics,
    patch_rocm_mla_bf16_bmm,
)
from glmops_vllm_patches.base import Patch

PATCHES: tuple[Patch, ...] = (
    patch_moe_mxfp4_expert_map.PATCH,
    patch_dsa_pp_topk_handoff.PATCH,
    patch_rocm_mla_bf16_bmm.PATCH,
    patch_null_content_metrics.PATCH,
)


def by_name(name: str) -> Patch:
    for patch in PATCHES:
        if patch.info.name == name:
            return patch
    raise KeyError(f"no glmops patch named {name!r}; known: {', '.join(p.info.name for p in PATCHES)}")
