"""What the patch plugin's fixes cost at GLM-5.x sizes, measured side by side in one run on the GPU(s).

1. moe-mxfp4-expert-map: the id remap the wrapper adds before each CUTLASS MXFP4 MoE call, against a bf16
   stand-in for the expert computation of one MoE layer on one EP rank (the real kernel is MXFP4 and faster, so
   the ratio printed is a lower bound of the remap's share; the absolute time is printed too).
2. dsa-pp-topk-handoff: one pipeline hand-off (send/recv of hidden_states + residual) with and without the
   int32 top-k rows, over NCCL between two GPUs (gloo on CPUs).

Run: `torchrun --nproc-per-node 2 bench/patch_overhead.py [--out FILE]` (rank 0 also runs part 1); with one GPU
(`--nproc-per-node 1`) part 2 is skipped, saying so. Prints one JSON line and writes it to FILE (default
`bench/results/patch_overhead-<GPUs>x<device>.json`), with what it ran on: device name and count, driver, CUDA and
torch versions, the git commit and the command, so a figure can be traced to the run that made it.
Shapes (GLM-5.x): hidden 6144, MoE intermediate 2048, 256 routed experts, top-8, index_topk 2048.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
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


REPO = Path(__file__).resolve().parents[1]


def _run(*argv: str) -> str | None:
    """A command's output, or None where it fails or is not installed."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(cuda: bool, world: int) -> dict[str, object]:
    """What the run ran on, and how to run it again."""
    commit = _run("git", "-C", str(REPO), "rev-parse", "HEAD")
    dirty = _run("git", "-C", str(REPO), "status", "--porcelain", "--", "bench", "images") if commit else None
    out: dict[str, object] = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "devices": torch.cuda.device_count() if cuda else 0,
        "ranks": world,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "host_cpu": platform.processor() or platform.machine(),
        # Where the tree travels without its own history (a lent GPU machine: a copy of the working tree on another
        # base), the caller names the commit it is.
        "commit": os.environ.get("GLMOPS_BENCH_COMMIT") or commit,
        "tree_changed": None if dirty is None or os.environ.get("GLMOPS_BENCH_COMMIT") else bool(dirty),
        "command": f"torchrun --nproc-per-node {world} bench/patch_overhead.py",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if cuda:
        driver = _run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
        out["driver"] = driver.splitlines()[0].strip() if driver else None
    return out


def default_out(info: dict[str, object]) -> Path:
    name = re.sub(r"[^A-Za-z0-9]+", "", str(info["device"]).removeprefix("NVIDIA ")) or "device"
    return (
        Path(__file__).resolve().parent / "results" / f"patch_overhead-{info['devices'] or info['ranks']}x{name}.json"
    )


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--out", type=Path, help="where rank 0 writes the JSON (default: results/, named by device)")
    opts = args.parse_args(argv)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    out: dict[str, object] = provenance(cuda, world)
    # On CPUs (gloo) only a small smoke run: the numbers that matter come from the GPUs.
    if world >= 2:
        out["handoff"] = [handoff(device, n) for n in ((512, 8192) if cuda else (16,))] if rank < 2 else []
    else:
        out["handoff"] = {"skipped": "the hand-off is timed between two ranks: torchrun --nproc-per-node 2"}
    if rank == 0:
        sizes = [(8192, 8), (8192, 2), (512, 8)] if cuda else [(16, 8)]
        out["moe_remap"] = [moe_remap(device, n, ep) for n, ep in sizes]
        line = json.dumps(out)
        print(line)
        target = opts.out or default_out(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(line + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
