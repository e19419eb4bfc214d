"""Pipeline partitions: vLLM's default split and the balanced split that avoids stale top-k reads."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glm_operator.rules.partition import (
    affected_layers,
    balanced_partition,
    format_layers,
    stage_starts,
    vllm_default_split,
)


def glm(freq: int = 4, offset: int = 3):  # noqa: ANN201
    return lambda i: max(i - offset + 1, 0) % freq == 0


@pytest.mark.parametrize(
    "layers, stages, split",
    [(78, 2, [39, 39]), (78, 4, [19, 20, 20, 19]), (78, 8, [9, 10, 10, 10, 10, 10, 10, 9]), (45, 4, [11, 11, 12, 11])],
)
def test_default_split_gives_the_remainder_to_stages_before_the_last(
    layers: int, stages: int, split: list[int]
) -> None:
    assert vllm_default_split(layers, stages) == split


@pytest.mark.parametrize(
    "stages, expected",
    [
        (2, [38, 40]),
        (3, [26, 24, 28]),
        (4, [18, 20, 20, 20]),
        (5, [14, 16, 16, 16, 16]),
        (6, [14, 12, 12, 12, 12, 16]),
        (7, [10, 8, 12, 12, 12, 12, 12]),
        (8, [10, 8, 8, 8, 8, 12, 12, 12]),
    ],
)
def test_pp_split_on_78_layers_starts_every_stage_on_a_computing_layer(stages: int, expected: list[int]) -> None:
    split = balanced_partition(78, stages, glm())
    assert split == expected
    assert affected_layers(split, glm()) == []


def test_pp8_default_split_starts_stages_on_thirteen_reuse_layers() -> None:
    affected = affected_layers(vllm_default_split(78, 8), glm())
    assert len(affected) == 13
    assert format_layers(affected) == "9; 19-21; 29; 39-41; 49; 59-61; 69"


def test_more_stages_than_computing_layers_has_no_safe_split() -> None:
    assert balanced_partition(78, 22, glm()) is None
    assert balanced_partition(78, 21, glm()) is not None


def _brute_force(layers: int, stages: int, computes) -> list[int] | None:  # noqa: ANN001
    cuts = [i for i in range(1, layers) if computes(i)]
    best = None
    for starts in itertools.combinations(cuts, stages - 1):
        bounds = [0, *starts, layers]
        sizes = [b - a for a, b in itertools.pairwise(bounds)]
        key = (max(sizes), max(sizes) - min(sizes), starts)
        if best is None or key < best[0]:
            best = (key, sizes)
    return best[1] if best else None


@settings(max_examples=150, deadline=None)
@given(layers=st.integers(4, 60), stages=st.integers(2, 6), freq=st.integers(1, 5), offset=st.integers(0, 4))
def test_balanced_split_equals_exhaustive_search_on_other_layer_counts(
    layers: int, stages: int, freq: int, offset: int
) -> None:
    computes = glm(freq, offset)
    split = balanced_partition(layers, stages, computes)
    assert split == _brute_force(layers, stages, computes)
    if split is not None:
        assert sum(split) == layers and len(split) == stages
        assert all(computes(s) for s in stage_starts(split)[1:])
