"""Start-up refusals (glm_operator.rules.startup) held to each supported version's real vLLM source."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from glm_operator.catalog.images import load_images
from glm_operator.rules.partition import parse_partition
from glm_operator.rules.startup import GET_PP_INDICES_LINES
from tests.vllm_source import extract
from tests.vllm_source.test_source_facts import source

VERSIONS = load_images().versions

# Partitions as a person might write them, for pipeline sizes 1-4 on a 78-layer model.
TEXTS = (
    "78",
    "38,40",
    "39,39",
    "26,26,26",
    "18,20,20,20",
    "38,41",
    "0,78",
    "-1,79",
    "",
    "a,b",
    "38, 40",
    "38.0,40",
    "+38,40",
    "38,40,",
    "1_8,20,20,20",
    "78,0",
    "20,20,20,18",
    "77",
)


def test_every_supported_version_has_its_get_pp_indices_lines_read() -> None:
    assert set(VERSIONS) <= set(GET_PP_INDICES_LINES)


@pytest.mark.parametrize("version", VERSIONS)
def test_get_pp_indices_lines_are_where_vllm_refuses(version: str) -> None:
    src = source(version)
    func = src.function("distributed/utils.py", "get_pp_indices")
    lines = Path(src.root / "distributed/utils.py").read_text().splitlines()
    define, parse, count, total = GET_PP_INDICES_LINES[version]
    assert func.lineno == define
    assert "Invalid partition string" in lines[parse - 1]
    assert "len(partitions)" in lines[count - 1] and "pp_size" in lines[count - 1]
    assert "sum(partitions)" in lines[total - 1] and "num_hidden_layers" in lines[total - 1]


@pytest.mark.parametrize("version", VERSIONS)
def test_make_layers_reads_the_partition_at_every_pipeline_size(version: str) -> None:
    """make_layers calls get_pp_indices with no pipeline-size guard, so pipeline 1 reads the variable too."""
    src = source(version)
    func = src.function("model_executor/models/utils.py", "make_layers")
    calls = [n for n in func.body if "get_pp_indices(" in (extract.ast.unparse(n))]
    assert calls, "make_layers no longer calls get_pp_indices at its top level"


@pytest.mark.parametrize("version", VERSIONS)
def test_glmops_refuses_every_partition_vllm_refuses(version: str) -> None:
    """Differential: vLLM's own get_pp_indices against parse_partition over a grid of texts and pipeline sizes."""
    split, _ = extract.pp_split_function(source(version))
    grid = list(itertools.product(TEXTS, range(1, 5)))
    vllm_refused = 0
    for text, pp in grid:
        try:
            split(78, pp, text)
            vllm_ok = True
        except ValueError:
            vllm_ok = False
            vllm_refused += 1
        try:
            sizes = parse_partition(text, 78, pp)
            glmops_ok = True
        except ValueError:
            glmops_ok = False
        if not vllm_ok:
            assert not glmops_ok, f"vLLM {version} refuses {text!r} at pipeline {pp}; glmops accepts it"
        elif glmops_ok:
            assert sizes == split(78, pp, text)
        else:  # glmops is stricter only where a stage gets fewer than one layer
            assert any(s < 1 for s in split(78, pp, text)), f"glmops refuses {text!r} at pipeline {pp}; vLLM runs it"
    assert vllm_refused > len(grid) // 2  # the grid exercises the refusals, not only the accepted splits
