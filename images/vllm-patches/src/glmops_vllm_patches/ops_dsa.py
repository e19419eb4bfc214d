"""Pure torch logic of the `dsa-pp-topk-handoff` patch: which layers reuse top-k rows, and the hand-off itself.

GLM-5.x sparse attention (DSA) computes top-k key indices only on some layers; the others read the rows the last
computing layer left in a per-rank buffer. Under pipeline parallelism a stage whose first layer is a reuse layer
must get those rows from the previous stage. These functions are what the vLLM wrappers call, and what the numeric
tests and the distributed proof (proof/dsa_pp_dist.py) run, so the proof covers the code that runs in vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

# The extra IntermediateTensors key. Our own name, so it can never collide with a key a later vLLM adds itself.
TOPK_KEY = "glmops_topk_indices"
TOPK_DTYPE = torch.int32


def is_reuse_layer(layer_id: int, *, freq: int = 1, offset: int = 2, pattern: str | None = None) -> bool:
    """True when `layer_id` skips the indexer and reads the top-k rows an earlier layer wrote.

    vLLM's rule: without a pattern a layer skips when max(layer_id - offset + 1, 0) % freq != 0; a pattern string
    of "F" (compute) / "S" (skip) overrides it for the layers it covers, layers past its end compute.
    """
    if pattern is None:
        return max(layer_id - offset + 1, 0) % max(freq, 1) != 0
    if 0 <= layer_id < len(pattern):
        return pattern[layer_id] == "S"
    return False


def reuse_rule_of(config: Any) -> dict[str, Any]:
    """The rule's inputs from a Hugging Face config, with vLLM's defaults (freq 1, offset 2, no pattern)."""
    return {
        "freq": int(getattr(config, "index_topk_freq", 1) or 1),
        "offset": int(getattr(config, "index_skip_topk_offset", 2)),
        "pattern": getattr(config, "index_topk_pattern", None),
    }


def pp_partition(num_layers: int, pp_size: int, override: str | None = None) -> list[int]:
    """Layers per pipeline stage as vLLM splits them (get_pp_indices; VLLM_PP_LAYER_PARTITION overrides)."""
    if override is not None:
        parts = [int(p) for p in override.split(",")]
        if len(parts) != pp_size or sum(parts) != num_layers:
            raise ValueError(f"partition {override!r} does not split {num_layers} layers into {pp_size} stages")
        return parts
    parts = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        parts[-i] += 1
    return parts


def stage_bounds(partition: list[int]) -> list[tuple[int, int]]:
    """(start_layer, end_layer) of each stage, end exclusive."""
    bounds, start = [], 0
    for size in partition:
        bounds.append((start, start + size))
        start += size
    return bounds


@dataclass(frozen=True)
class HandoffPlan:
    """What one stage does: copy received rows in before its first layer, send its rows on after its last."""

    start_layer: int
    end_layer: int
    receives: bool
    sends: bool


def handoff_plan(start_layer: int, end_layer: int, num_layers: int, **rule: Any) -> HandoffPlan:
    """A stage receives when it is not first and starts on a reuse layer; it sends when the next one does."""
    receives = start_layer > 0 and is_reuse_layer(start_layer, **rule)
    sends = end_layer < num_layers and is_reuse_layer(end_layer, **rule)
    return HandoffPlan(start_layer, end_layer, receives, sends)


def empty_rows(batch_size: int, index_topk: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The receive buffer the runner pre-allocates for the key: int32 [batch_size, index_topk].

    The runners copy_ every received key into a buffer of this shape; a buffer in the activation dtype (bf16)
    would round indices above 256 to other tokens.
    """
    return torch.zeros((batch_size, index_topk), dtype=TOPK_DTYPE, device=device)


def attach_rows(tensors: MutableMapping[str, torch.Tensor], topk_buffer: torch.Tensor, num_tokens: int) -> None:
    """Add this batch's top-k rows (a view of the buffer's first `num_tokens` rows) to the outgoing tensors."""
    tensors[TOPK_KEY] = topk_buffer[:num_tokens]


def receive_rows(tensors: Mapping[str, torch.Tensor], topk_buffer: torch.Tensor) -> int:
    """Copy the received rows into this stage's buffer before its first layer; return how many rows."""
    rows = tensors.get(TOPK_KEY)
    if rows is None:
        raise KeyError(
            f"{TOPK_KEY} missing from the intermediate tensors: the previous pipeline stage did not send the top-k "
            "rows this stage's first (reuse) layer needs (is the glmops plugin off on that stage?)"
        )
    if rows.dtype != topk_buffer.dtype or rows.shape[1:] != topk_buffer.shape[1:]:
        raise ValueError(
            f"{TOPK_KEY}: got {tuple(rows.shape)} {rows.dtype}, the buffer holds "
            f"[*, {topk_buffer.shape[1]}] {topk_buffer.dtype}"
        )
    n = rows.shape[0]
    topk_buffer[:n].copy_(rows)
    return n
