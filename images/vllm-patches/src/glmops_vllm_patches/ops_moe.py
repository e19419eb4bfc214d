"""Pure torch logic of the `moe-mxfp4-expert-map` patch, and the small MoE the proofs check it with.

Under expert parallelism a rank holds only its local experts; `expert_map[global_id]` is that expert's local slot on
this rank, or -1 where another rank holds it. A grouped-GEMM MoE kernel indexes its (local) weights by the ids it is
given, so it must get local slots. `remap_routes_to_local` turns a routing into one such a kernel computes correctly:
local routes get their slot, every other route gets a valid dummy slot and weight 0, so it adds nothing. Summing the
rank outputs (the all-reduce / reduce-scatter vLLM does after the experts) then gives the dense MoE.

The second half (`dense_moe`, `grouped_local_moe`, ...) is a float32 reference MoE for the proofs, never used by the
wrapper: SwiGLU experts with vLLM's weight layout (`w13` [E, 2I, H] gate rows then up rows, `w2` [E, H, I]).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class LocalRoutes(NamedTuple):
    """A routing rewritten for one rank: local slots, weights with non-local routes zeroed, and which were local."""

    ids: torch.Tensor
    weights: torch.Tensor
    is_local: torch.Tensor


def remap_routes_to_local(
    topk_ids: torch.Tensor, topk_weights: torch.Tensor, expert_map: torch.Tensor, dummy_slot: int = 0
) -> LocalRoutes:
    """Map global expert ids to this rank's slots; routes to other ranks (or ids < 0) get `dummy_slot` and weight 0.

    Returns new tensors (the inputs are shared with the rest of the MoE layer and stay untouched); ids keep the
    dtype of `topk_ids`, weights the dtype of `topk_weights`.
    """
    if topk_ids.shape != topk_weights.shape:
        raise ValueError(f"topk_ids {tuple(topk_ids.shape)} and topk_weights {tuple(topk_weights.shape)} differ")
    valid = topk_ids >= 0
    # Clamp before indexing so an invalid id (-1 padding) cannot index the map from the end.
    local = expert_map.to(topk_ids.device)[topk_ids.clamp(min=0).long()]
    is_local = valid & (local >= 0)
    ids = torch.where(is_local, local.to(topk_ids.dtype), torch.full_like(topk_ids, dummy_slot))
    weights = torch.where(is_local, topk_weights, torch.zeros_like(topk_weights))
    return LocalRoutes(ids, weights, is_local)


def zero_rows_without_local_route(output: torch.Tensor, is_local: torch.Tensor) -> None:
    """In place: rows whose routes are all on other ranks become 0.

    Needed where the router weight is applied to the kernel's input instead of its output (vLLM allows it for
    top-1 only): there a zero weight zeroes the input, and the row must not keep whatever the expert makes of 0.
    """
    keep = is_local.any(dim=-1, keepdim=True)
    output.mul_(keep.to(output.dtype))


# ---- reference MoE for the proofs (tests/plugin, proof/moe_ep_dist.py); the patch itself does not use it ----


def contiguous_expert_map(
    num_experts: int, ep_size: int, ep_rank: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Experts split in contiguous blocks over ranks (the first `num_experts % ep_size` ranks get one more)."""
    base, extra = divmod(num_experts, ep_size)
    start = ep_rank * base + min(ep_rank, extra)
    count = base + (1 if ep_rank < extra else 0)
    expert_map = torch.full((num_experts,), -1, dtype=torch.int32, device=device)
    expert_map[start : start + count] = torch.arange(count, dtype=torch.int32, device=device)
    return expert_map


def expert_map_from_owner(owner: torch.Tensor, ep_rank: int) -> torch.Tensor:
    """The expert map of `ep_rank` when `owner[e]` is the rank that holds expert e (any placement)."""
    mine = owner == ep_rank
    expert_map = torch.full(owner.shape, -1, dtype=torch.int32, device=owner.device)
    expert_map[mine] = torch.arange(int(mine.sum()), dtype=torch.int32, device=owner.device)
    return expert_map


def local_weights(weights: torch.Tensor, expert_map: torch.Tensor) -> torch.Tensor:
    """The slice of a stacked [E, ...] expert weight that the rank of `expert_map` holds, in slot order."""
    experts = torch.nonzero(expert_map >= 0).flatten()
    order = torch.argsort(expert_map[experts])
    return weights[experts[order]]


def swiglu_expert(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert: down(silu(gate(x)) * up(x)) with `w13` [2I, H] (gate rows first) and `w2` [H, I]."""
    gate, up = (x @ w13.t()).chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up) @ w2.t()


def dense_moe(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor
) -> torch.Tensor:
    """The reference: every expert on one device, out[t] = sum_k w[t, k] * expert_{id[t, k]}(x[t])."""
    out = torch.zeros_like(x)
    for k in range(topk_ids.shape[1]):
        for e in torch.unique(topk_ids[:, k]).tolist():
            rows = topk_ids[:, k] == e
            out[rows] += topk_weights[rows, k, None] * swiglu_expert(x[rows], w13[e], w2[e])
    return out


def grouped_local_moe(
    x: torch.Tensor,
    w13_local: torch.Tensor,
    w2_local: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    strict: bool = True,
) -> torch.Tensor:
    """A stand-in for a grouped-GEMM expert kernel (as CUTLASS's): it indexes its LOCAL weights by the ids it gets.

    `strict`: an id outside [0, local experts) raises (what a correct caller must never pass). Not strict: such
    routes are dropped, the most favourable reading of what the real kernel does with them (undefined there).
    """
    num_local = w13_local.shape[0]
    out_of_range = (ids < 0) | (ids >= num_local)
    if strict and bool(out_of_range.any()):
        bad = ids[out_of_range].unique().tolist()
        raise IndexError(f"expert ids {bad} are not local slots (0..{num_local - 1})")
    out = torch.zeros_like(x)
    for slot in range(num_local):
        hit = ids == slot
        rows = hit.any(dim=-1)
        if bool(rows.any()):
            weight = (weights * hit.to(weights.dtype)).sum(dim=-1)[rows, None]
            out[rows] += weight * swiglu_expert(x[rows], w13_local[slot], w2_local[slot])
    return out


def random_moe(
    num_tokens: int,
    num_experts: int,
    top_k: int,
    hidden: int,
    intermediate: int,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, w13, w2, topk_ids, topk_weights of a random float32 MoE (distinct experts per token, softmax weights)."""

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device)

    x = randn(num_tokens, hidden)
    w13 = randn(num_experts, 2 * intermediate, hidden) / hidden**0.5
    w2 = randn(num_experts, hidden, intermediate) / intermediate**0.5
    logits = randn(num_tokens, num_experts)
    values, topk_ids = logits.topk(top_k, dim=-1)
    topk_weights = torch.softmax(values, dim=-1)
    return x, w13, w2, topk_ids.to(torch.int32), topk_weights
