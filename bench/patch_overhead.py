"""What the patch plugin's fixes cost at GLM-5.x sizes, measured side by side in one run on the GPU(s).

1. moe-mxfp4-expert-map: the id remap the wrapper adds before each CUTLASS MXFP4 MoE call, against a bf16
   stand-in for the expert computation of one MoE layer on one EP rank (the real kernel is MXFP4 and faster, so
   the ratio printed is a lower bound of the remap's share; the absolute time is printed too).
2. dsa-pp-topk-handoff: one pipeline hand-off (send/recv of hidden_states + residual) with and without the
   int32 top-k rows, over NCCL between two GPUs (gloo on CPUs).

Run: `torchrun --nproc-per-node 2 bench/patch_overhead.py` (rank 0 also runs part 1). Prints one JSON line.
Shapes (GLM-5.x): hidden 6144, MoE intermediate 2048, 256 routed experts, top-8, index_topk 2048.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "images" / "vllm-patches" / "src"))

from glmops_vllm_patches.ops_dsa import attach_rows, receive_rows  # noqa: E402
from glmops_vllm_patches.ops_moe import contiguous_expert_map, remap_routes_to_local  # noqa: E402

HIDDEN, INTER, EXPERTS, TOP_K, INDEX_TOPK = 6144, 2048, 256, 8, 2048


def timed(fn, device: torch.device, repeat: int = 20) -> float:
    """Median seconds of fn() after warm-up, synchronising the device around each call."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - t)
    return sorted(samples)[len(samples) // 2]


def moe_remap(device: torch.device, tokens: int, ep: int) -> dict[str, float]:
    g = torch.Generator(device="cpu").manual_seed(0)
    local = EXPERTS // ep
    ids = torch.randint(0, EXPERTS, (tokens, TOP_K), generator=g).to(device, torch.int32)
    weights = torch.rand(tokens, TOP_K, generator=g).to(device)
    expert_map = contiguous_expert_map(EXPERTS, ep, 0).to(device)
    x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16)
    w13 = torch.randn(local, 2 * INTER, HIDDEN, device=device, dtype=torch.bfloat16) * 0.01
    w2 = torch.randn(local, HIDDEN, INTER, device=device, dtype=torch.bfloat16) * 0.01
    routes = remap_routes_to_local(ids, weights, expert_map)
    order = torch.argsort(routes.ids.flatten())
    counts = torch.bincount(routes.ids.flatten().long(), minlength=local).tolist()

    def experts() -> None:
        # bf16 stand-in for the grouped GEMMs: each local expert on the (token, route) pairs sent to it.
        rows = x[order // TOP_K]
        start = 0
        for e, n in enumerate(counts):
            h = rows[start : start + n] @ w13[e].T
            gate, up = h.chunk(2, dim=-1)
            (torch.nn.functional.silu(gate) * up) @ w2[e].T
            start += n

    remap = timed(lambda: remap_routes_to_local(ids, weights, expert_map), device)
    layer = timed(experts, device, repeat=10)
    out = {"tokens": tokens, "ep": ep, "remap_s": remap, "experts_bf16_s": layer, "remap_over_experts": remap / layer}
    if device.type == "cuda":
        # vLLM replays decode steps from CUDA graphs: there the remap costs its kernels, not their launches.
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        with torch.cuda.stream(stream):
            remap_routes_to_local(ids, weights, expert_map)  # warm-up on the capture stream
        torch.cuda.current_stream(device).wait_stream(stream)
        with torch.cuda.graph(graph):
            remap_routes_to_local(ids, weights, expert_map)
        graph.replay()
        torch.cuda.synchronize(device)
        t = time.perf_counter()
        for _ in range(200):  # back to back, as the graph's kernels run inside a replayed step
            graph.replay()
        torch.cuda.synchronize(device)
        out["remap_graph_s"] = (time.perf_counter() - t) / 200
        out["remap_graph_over_experts"] = out["remap_graph_s"] / layer
    return out


def handoff(device: torch.device, tokens: int) -> dict[str, float]:
    rank = dist.get_rank()
    hidden = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16)
    residual = torch.randn_like(hidden)
    buffer = torch.randint(0, tokens, (tokens, INDEX_TOPK), device=device, dtype=torch.int32)

    def exchange(with_rows: bool) -> None:
        tensors = {"hidden_states": hidden, "residual": residual}
        if with_rows:
            attach_rows(tensors, buffer, tokens)
        if rank == 0:
            for t in tensors.values():
                dist.send(t.contiguous(), dst=1)
        else:
            received = {k: torch.empty_like(v) for k, v in tensors.items()}
            for t in received.values():
                dist.recv(t, src=0)
            if with_rows:
                receive_rows(received, buffer)

    plain = timed(lambda: exchange(False), device)
    with_rows = timed(lambda: exchange(True), device)
    sent = 2 * tokens * HIDDEN * 2
    return {
        "tokens": tokens,
        "plain_s": plain,
        "with_rows_s": with_rows,
        "ratio": with_rows / plain,
        "extra_bytes_over_plain": tokens * INDEX_TOPK * 4 / sent,
    }


def main() -> int:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    out: dict[str, object] = {"device": torch.cuda.get_device_name(device) if cuda else "cpu"}
    # On CPUs (gloo) only a small smoke run: the numbers that matter come from the GPUs.
    out["handoff"] = [handoff(device, n) for n in ((512, 8192) if cuda else (16,))]
    if rank == 0:
        sizes = [(8192, 8), (8192, 2), (512, 8)] if cuda else [(16, 8)]
        out["moe_remap"] = [moe_remap(device, n, ep) for n, ep in sizes]
        print(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
