"""EP=2 proof of the `moe-mxfp4-expert-map` remap: `torchrun --nproc-per-node 2 moe_ep_dist.py`.

Each rank holds half of the experts of a small float32 SwiGLU MoE, runs a grouped-expert stand-in that indexes its
LOCAL weights by the ids it is given (as the CUTLASS MXFP4 kernel does), and the partial outputs are summed with
all_reduce (as vLLM's EP finalize does). With the patch's remap the sum must equal the dense MoE on rank 0; without
it (global ids straight into local weights) it must not. NCCL on GPUs, gloo on CPUs. Exit 0 when both hold, 1 when
not; prints the numbers either way. `--skip-remap` runs the patched path without the remap (a self-check: exits 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from glmops_vllm_patches.ops_moe import (  # noqa: E402
    contiguous_expert_map,
    dense_moe,
    grouped_local_moe,
    local_weights,
    random_moe,
    remap_routes_to_local,
)

TOLERANCE = 1e-4  # float32, no TF32: the EP sum reorders a few additions only
MIN_UNPATCHED_ERROR = 1e-2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--intermediate", type=int, default=32)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--skip-remap", action="store_true", help="sabotage: the test must then fail")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        device = torch.device("cpu")

    ok = True
    for trial in range(args.trials):
        generator = torch.Generator().manual_seed(1000 + trial)  # the same MoE and routing on every rank
        x, w13, w2, topk_ids, topk_weights = random_moe(
            args.tokens, args.experts, args.top_k, args.hidden, args.intermediate, generator, device
        )
        expert_map = contiguous_expert_map(args.experts, world, rank, device)
        w13_local, w2_local = local_weights(w13, expert_map), local_weights(w2, expert_map)

        if args.skip_remap:
            patched = grouped_local_moe(x, w13_local, w2_local, topk_ids, topk_weights, strict=False)
        else:
            routes = remap_routes_to_local(topk_ids, topk_weights, expert_map)
            patched = grouped_local_moe(x, w13_local, w2_local, routes.ids, routes.weights, strict=True)
        unpatched = grouped_local_moe(x, w13_local, w2_local, topk_ids, topk_weights, strict=False)
        dist.all_reduce(patched)
        dist.all_reduce(unpatched)

        if rank == 0:
            reference = dense_moe(x, w13, w2, topk_ids, topk_weights)
            scale = reference.abs().max().item()
            err_patched = (patched - reference).abs().max().item()
            err_unpatched = (unpatched - reference).abs().max().item()
            good = err_patched <= TOLERANCE * max(1.0, scale) and err_unpatched >= MIN_UNPATCHED_ERROR
            ok &= good
            print(
                f"trial {trial} ep={world} backend={dist.get_backend()} device={device.type} "
                f"tokens={args.tokens} experts={args.experts} top_k={args.top_k}: max|ref|={scale:.4f} "
                f"max|remapped-ref|={err_patched:.3e} max|unpatched-ref|={err_unpatched:.3e} "
                f"{'OK' if good else 'MISMATCH'}",
                flush=True,
            )
    verdict = torch.tensor([1 if ok else 0], device=device)
    dist.broadcast(verdict, src=0)
    dist.destroy_process_group()
    return 0 if int(verdict.item()) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
