"""Proof of the `dsa-pp-topk-handoff` patch over a real process group: `torchrun --nproc-per-node 2 dsa_pp_dist.py`.

A small stack of index-sharing attention layers (GLM-5.x rule: index_topk_freq 4, offset 3; 12 layers compute top-k
on 0, 1, 2, 6, 10 and reuse on the others) runs as one stage (the reference, on every rank) and split into two
pipeline stages, stage 1 on the first half of the ranks and stage 2 on the second. The stages exchange the tensor
dict as vLLM's runners do: metadata over a gloo group, tensors over the device group (NCCL on CUDA, gloo on CPU)
into fresh receive tensors, then `copy_` into the buffers `make_empty_intermediate_tensors` pre-allocated. With 4
processes the stages are TP=2 and every key is split across TP ranks and all-gathered back, as vLLM's
`isend_tensor_dict(all_gather_group=tp)` does.

Checks (exit 0 only when all hold; numbers are printed):
- split [4, 8] (stage 2 starts on reuse layer 4), with the hand-off: stage-2 output equals the reference exactly;
- the same split without the hand-off (stage 2 reads a stale buffer): the output differs;
- split [6, 6] (stage 2 starts on computing layer 6): the hand-off sends nothing extra and the output equals;
- GLM-5.x-sized rows, int32 [512, 2048] with indices up to 2**20, cross the boundary bit-exact.
The hand-off steps are the functions of glmops_vllm_patches.ops_dsa that the vLLM wrappers call.
"""

from __future__ import annotations

import math
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from glmops_vllm_patches import ops_dsa  # noqa: E402

GLM5_RULE = {"freq": 4, "offset": 3, "pattern": None}


class IndexSharingStack:
    """Tiny DSA-like decoder: computing layers run an indexer into a shared top-k buffer; every layer attends
    only to the keys its buffer row selects (reuse layers read what the last computing layer wrote)."""

    def __init__(
        self,
        num_layers: int = 12,
        hidden: int = 32,
        index_topk: int = 4,
        rule: dict | None = None,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        self.num_layers, self.hidden, self.index_topk = num_layers, hidden, index_topk
        self.rule = dict(GLM5_RULE if rule is None else rule)
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(seed)

        def weight() -> torch.Tensor:
            w = torch.randn(hidden, hidden, generator=gen, dtype=torch.float64) / math.sqrt(hidden)
            return w.to(torch.float32).to(self.device)

        self.attn = [[weight() for _ in range(4)] for _ in range(num_layers)]  # q, k, v, o
        self.indexer = [[weight(), weight()] if not self.reuses(i) else None for i in range(num_layers)]

    def reuses(self, layer_id: int) -> bool:
        return ops_dsa.is_reuse_layer(layer_id, **self.rule)

    def new_buffer(self, max_tokens: int) -> torch.Tensor:
        return torch.zeros((max_tokens, self.index_topk), dtype=ops_dsa.TOPK_DTYPE, device=self.device)

    def embed(self, num_tokens: int, seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(num_tokens, self.hidden, generator=gen).to(self.device)

    def run(
        self, start: int, end: int, hidden: torch.Tensor, residual: torch.Tensor | None, topk_buffer: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Layers [start, end) on `hidden`/`residual` (vLLM's pair), reading and writing `topk_buffer`."""
        n = hidden.shape[0]
        for layer_id in range(start, end):
            residual = hidden if residual is None else hidden + residual
            x = residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + 1e-6)
            if not self.reuses(layer_id):
                topk_buffer[:n] = self._select(layer_id, x)
            hidden = self._attend(layer_id, x, topk_buffer[:n])
        assert residual is not None
        return hidden, residual

    def _select(self, layer_id: int, x: torch.Tensor) -> torch.Tensor:
        wq, wk = self.indexer[layer_id]
        scores = (x @ wq) @ (x @ wk).T
        n = x.shape[0]
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        values, idx = scores.topk(min(self.index_topk, n), dim=-1)
        return torch.where(torch.isinf(values), -1, idx).to(ops_dsa.TOPK_DTYPE)

    def _attend(self, layer_id: int, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        wq, wk, wv, wo = self.attn[layer_id]
        q, k, v = x @ wq, x @ wk, x @ wv
        n = x.shape[0]
        valid = (rows >= 0) & (rows < n)
        sel = rows.clamp(0, n - 1).long()
        logits = (q.unsqueeze(1) * k[sel]).sum(-1) / math.sqrt(self.hidden)
        probs = logits.masked_fill(~valid, float("-inf")).softmax(-1).nan_to_num(0.0)
        return (probs.unsqueeze(-1) * v[sel]).sum(1) @ wo

    def reference(self, x: torch.Tensor, max_tokens: int) -> torch.Tensor:
        hidden, residual = self.run(0, self.num_layers, x, None, self.new_buffer(max_tokens))
        return hidden + residual


def preallocate(model: IndexSharingStack, plan: ops_dsa.HandoffPlan, max_tokens: int, handoff: bool) -> dict:
    """What make_empty_intermediate_tensors gives the receiving runner (patched: plus the int32 key)."""
    tensors = {k: torch.zeros(max_tokens, model.hidden, device=model.device) for k in ("hidden_states", "residual")}
    if handoff and plan.receives:
        tensors[ops_dsa.TOPK_KEY] = ops_dsa.empty_rows(max_tokens, model.index_topk, model.device)
    return tensors


def runner_copy(preallocated: dict, received: dict, num_tokens: int) -> dict:
    """The runner's sync of received keys into its pre-allocated buffers (KeyError for a key not pre-allocated)."""
    for key, value in received.items():
        preallocated[key][:num_tokens].copy_(value[:num_tokens])
    return {k: v[:num_tokens] for k, v in preallocated.items()}


def run_stage(
    model: IndexSharingStack,
    bounds: tuple[int, int],
    x: torch.Tensor | None,
    received: dict | None,
    topk_buffer: torch.Tensor,
    handoff: bool,
) -> tuple[dict, ops_dsa.HandoffPlan]:
    """One stage as the patched forward runs it: copy received rows in, run the layers, attach rows out."""
    start, end = bounds
    plan = ops_dsa.handoff_plan(start, end, model.num_layers, **model.rule)
    if received is None:
        assert x is not None
        hidden, residual = x, None
    else:
        if handoff and plan.receives:
            ops_dsa.receive_rows(received, topk_buffer)
        hidden, residual = received["hidden_states"], received["residual"]
    hidden, residual = model.run(start, end, hidden, residual, topk_buffer)
    out = {"hidden_states": hidden, "residual": residual}
    if handoff and plan.sends:
        ops_dsa.attach_rows(out, topk_buffer, hidden.shape[0])
    return out, plan


def stale_buffer(model: IndexSharingStack, max_tokens: int, num_tokens: int, seed: int) -> torch.Tensor:
    """A stage buffer as a previous step leaves it: the last computing layer's rows of another batch."""
    buf = model.new_buffer(max_tokens)
    model.run(0, model.num_layers, model.embed(num_tokens, seed), None, buf)
    return buf


# ----------------------------------------------------------------------------------------------- distributed


def _send_dict(tensors: dict, dst_stage_rank: int, meta_group, tp_rank: int, tp_size: int) -> None:
    meta = [(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    dist.send_object_list([meta], dst=dst_stage_rank, group=meta_group)
    for value in tensors.values():
        part = value.contiguous()
        if part.numel() % tp_size == 0:  # vLLM's default: split every key that divides by the TP size
            part = part.reshape(tp_size, -1)[tp_rank].contiguous()
        dist.send(part, dst=dst_stage_rank)


def _recv_dict(src_stage_rank: int, meta_group, tp_group, tp_size: int, device: torch.device) -> dict:
    box: list = [None]
    dist.recv_object_list(box, src=src_stage_rank, group=meta_group)
    out = {}
    for key, shape, dtype in box[0]:
        full = torch.empty(shape, dtype=dtype, device=device)
        if full.numel() % tp_size == 0:
            part = torch.empty(full.numel() // tp_size, dtype=dtype, device=device)
            dist.recv(part, src=src_stage_rank)
            if tp_size > 1:
                gathered = [torch.empty_like(part) for _ in range(tp_size)]
                dist.all_gather(gathered, part, group=tp_group)
                part = torch.cat(gathered)
            full = part.reshape(shape)
        else:
            dist.recv(full, src=src_stage_rank)
        out[key] = full
    return out


def _case(ctx: dict, name: str, partition: list[int], handoff: bool, expect_equal: bool) -> bool:
    model, device, rank, tp = ctx["model"], ctx["device"], ctx["rank"], ctx["tp"]
    stage, tp_rank = divmod(rank, tp)
    bounds = ops_dsa.stage_bounds(partition)[stage]
    num_tokens, max_tokens = 24, 32
    x = model.embed(num_tokens, seed=1)
    if stage == 0:
        out, plan = run_stage(model, bounds, x, None, stale_buffer(model, max_tokens, num_tokens, 7), handoff)
        sent_key = ops_dsa.TOPK_KEY in out
        _send_dict(out, rank + tp, ctx["meta_group"], tp_rank, tp)
        ok = sent_key == (handoff and plan.sends)
        print(f"[rank {rank}] {name}: stage 1 layers {bounds} sends top-k rows: {sent_key}", flush=True)
        return ok
    received = _recv_dict(rank - tp, ctx["meta_group"], ctx["tp_group"], tp, device)
    plan = ops_dsa.handoff_plan(*bounds, model.num_layers, **model.rule)
    synced = runner_copy(preallocate(model, plan, max_tokens, handoff), received, num_tokens)
    out, _ = run_stage(model, bounds, None, synced, stale_buffer(model, max_tokens, num_tokens, 7), handoff)
    got = out["hidden_states"] + out["residual"]
    ref = model.reference(x, max_tokens)
    diff = (got - ref).abs().max().item()
    equal = torch.equal(got, ref)
    ok = equal == expect_equal
    keys = sorted(received)
    print(
        f"[rank {rank}] {name}: stage 2 layers {bounds} starts on {'reuse' if plan.receives else 'computing'} layer, "
        f"received {keys}, max |stage2 - reference| = {diff:.3e}, equal={equal} "
        f"(expected {'equal' if expect_equal else 'different'}) -> {'OK' if ok else 'MISMATCH'}",
        flush=True,
    )
    return ok


def _glm_rows_case(ctx: dict) -> bool:
    """GLM-5.x-sized rows: int32 [512, 2048], values up to 2**20, through the same transport, bit-exact."""
    rank, tp, device = ctx["rank"], ctx["tp"], ctx["device"]
    stage, tp_rank = divmod(rank, tp)
    gen = torch.Generator().manual_seed(3)
    rows = torch.randint(-1, 2**20, (512, 2048), generator=gen, dtype=torch.int32).to(device)
    if stage == 0:
        _send_dict({ops_dsa.TOPK_KEY: rows}, rank + tp, ctx["meta_group"], tp_rank, tp)
        return True
    received = _recv_dict(rank - tp, ctx["meta_group"], ctx["tp_group"], tp, device)
    pre = {ops_dsa.TOPK_KEY: ops_dsa.empty_rows(1024, 2048, device)}
    synced = runner_copy(pre, received, 512)
    buf = ops_dsa.empty_rows(1024, 2048, device)
    ops_dsa.receive_rows(synced, buf)
    wrong = int((buf[:512] != rows).sum().item())
    print(f"[rank {rank}] glm-rows: int32 [512, 2048] received, {wrong} of {rows.numel()} entries differ", flush=True)
    return wrong == 0 and buf.dtype == torch.int32


def main() -> int:
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world not in (2, 4):
        print("run with 2 processes (PP=2) or 4 (PP=2 x TP=2)", flush=True)
        return 2
    tp = world // 2
    meta_group = dist.new_group(backend="gloo")
    tp_groups = [dist.new_group(list(range(s * tp, (s + 1) * tp))) for s in range(2)]
    ctx = {
        "model": IndexSharingStack(device=device),
        "device": device,
        "rank": rank,
        "tp": tp,
        "meta_group": meta_group,
        "tp_group": tp_groups[rank // tp],
    }
    if rank == 0:
        backend = dist.get_backend()
        print(f"backend={backend} world={world} (PP=2 x TP={tp}) device={device}", flush=True)
    results = [
        _case(ctx, "split [4,8] with hand-off", [4, 8], handoff=True, expect_equal=True),
        _case(ctx, "split [4,8] without hand-off", [4, 8], handoff=False, expect_equal=False),
        _case(ctx, "split [6,6] with hand-off", [6, 6], handoff=True, expect_equal=True),
        _glm_rows_case(ctx),
    ]
    ok = torch.tensor([int(all(results))], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("PASS" if ok.item() else "FAIL", flush=True)
    return 0 if ok.item() else 1


if __name__ == "__main__":
    sys.exit(main())
