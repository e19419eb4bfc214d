"""Pipeline-parallel layer partitions for GLM-5.x sparse attention (vllm-63170).

A stage that starts on a layer that reuses top-k indices reads stale ones, because only hidden states
and the residual cross a stage boundary. These functions compute vLLM's default split, the layers a
partition leaves affected, and the most balanced partition whose every stage starts on a layer that
computes its own indices.

Balance is measured as: first the largest stage (fewest layers on the slowest stage), then the spread
between the largest and smallest stage, then the earliest stage starts (a deterministic tie-break).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache


def vllm_default_split(layers: int, pp: int) -> list[int]:
    """vLLM's `get_pp_indices` split: layers // pp each; the remainder goes one each to the
    second-to-last, third-to-last, ... stages (never the last)."""
    if pp < 1 or layers < pp:
        raise ValueError(f"cannot split {layers} layers into {pp} stages")
    sizes = [layers // pp] * pp
    for i in range(layers % pp):
        sizes[pp - 2 - i] += 1
    return sizes


def parse_partition(text: str, layers: int, pp: int) -> list[int]:
    """Parse VLLM_PP_LAYER_PARTITION as vLLM's `get_pp_indices` does; raise ValueError saying what is wrong and
    what vLLM then does (it checks the count and the sum only: vllm_facts.PP_DEFAULT_SPLIT)."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"must be {pp} comma-separated integers, so vLLM refuses to start") from None
    if len(sizes) != pp:
        raise ValueError(f"has {len(sizes)} entries but pipeline parallel size is {pp}, so vLLM refuses to start")
    if sum(sizes) != layers:
        raise ValueError(f"sums to {sum(sizes)} but the model has {layers} layers, so vLLM refuses to start")
    if any(s < 1 for s in sizes):
        raise ValueError(
            "gives a stage fewer than one layer; vLLM checks only the count and the sum, so it starts loading and "
            "then fails (an empty stage breaks KV-cache sizing or the first request; a negative size makes stages "
            "overlap)"
        )
    return sizes


def stage_starts(sizes: Sequence[int]) -> list[int]:
    starts, at = [], 0
    for size in sizes:
        starts.append(at)
        at += size
    return starts


def affected_layers(sizes: Sequence[int], computes: Callable[[int], bool]) -> list[int]:
    """Layers that read stale top-k indices: from each non-first stage start on a reuse layer up to
    (not including) the next layer that computes, within that stage."""
    out: list[int] = []
    for start, size in zip(stage_starts(sizes)[1:], sizes[1:], strict=True):
        layer = start
        while layer < start + size and not computes(layer):
            out.append(layer)
            layer += 1
    return out


def format_layers(layers: Sequence[int]) -> str:
    """[9, 19, 20, 21] -> '9; 19-21'."""
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    return "; ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def balanced_partition(layers: int, pp: int, computes: Callable[[int], bool]) -> list[int] | None:
    """The most balanced split whose every stage starts on a computing layer, or None if none exists."""
    cuts = tuple(i for i in range(1, layers) if computes(i))
    return _balanced(layers, pp, cuts)


@cache
def _balanced(layers: int, pp: int, cuts: tuple[int, ...]) -> list[int] | None:
    if pp == 1:
        return [layers]
    if len(cuts) < pp - 1:
        return None
    points = (0, *cuts, layers)
    for biggest in range(-(-layers // pp), layers + 1):
        for smallest in range(min(biggest, layers // pp), 0, -1):
            starts = _earliest_starts(points, pp, smallest, biggest)
            if starts is not None:
                return [b - a for a, b in zip(starts, [*starts[1:], layers], strict=True)]
    return None


def _earliest_starts(points: tuple[int, ...], pp: int, lo: int, hi: int) -> list[int] | None:
    """Stage starts (from `points`) with every stage size in [lo, hi], earliest first, or None."""
    end = points[-1]
    # can[k][j]: from points[j], exactly k more stages can reach the end.
    n = len(points)
    can = [[False] * n for _ in range(pp + 1)]
    can[0][n - 1] = True
    for k in range(1, pp + 1):
        for j in range(n - 1):
            can[k][j] = any(lo <= points[m] - points[j] <= hi and can[k - 1][m] for m in range(j + 1, n))
    if not can[pp][0]:
        return None
    starts, j = [0], 0
    for k in range(pp, 1, -1):
        j = next(m for m in range(j + 1, n - 1) if lo <= points[m] - points[j] <= hi and can[k - 1][m])
        starts.append(points[j])
    assert end - starts[-1] >= lo
    return starts
