"""The pydantic models accept what the schema accepts and say what is wrong otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from glm_operator.api import GLMDeployment, GLMDeploymentSpec, ParallelismSpec
from glm_operator.api.conditions import set_condition
from tests.support.builders import GLMDeploymentBuilder
from tests.support.cluster import REPO

SAMPLES = sorted((REPO / "samples").glob("*.yaml"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_parses_as_a_glmdeployment(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    parsed = GLMDeployment.model_validate(doc)
    assert parsed.spec.model.name


@pytest.mark.parametrize(
    "tensor, pipeline, data, expert, summary, gpus",
    [
        (1, 1, 8, True, "TP1 PP1 DP8 EP", 8),
        (8, 2, 1, False, "TP8 PP2 DP1", 16),
        (1, 8, 1, False, "TP1 PP8 DP1", 8),
        (4, 1, 1, False, "TP4 PP1 DP1", 4),
    ],
)
def test_parallelism_summary_reads_like_the_printer_column(
    tensor: int, pipeline: int, data: int, expert: bool, summary: str, gpus: int
) -> None:
    p = ParallelismSpec(tensor=tensor, pipeline=pipeline, data=data, expert=expert)
    assert p.summary() == summary
    assert p.gpus() == gpus


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 1024), st.booleans())
def test_summary_always_names_every_dimension(tp: int, pp: int, dp: int, ep: bool) -> None:
    summary = ParallelismSpec(tensor=tp, pipeline=pp, data=dp, expert=ep).summary()
    assert summary.split()[:3] == [f"TP{tp}", f"PP{pp}", f"DP{dp}"]
    assert summary.endswith(" EP") == ep


def test_defaults_fill_an_almost_empty_spec() -> None:
    spec = GLMDeploymentSpec.model_validate(GLMDeploymentBuilder().build()["spec"])
    assert spec.parallelism.summary() == "TP1 PP1 DP1"
    assert spec.engine.moe_backend == "auto"
    assert spec.validation.remediation == "Auto"
    assert spec.replicas == 1


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("spec.parallelism.tensor", 0, "parallelism.tensor"),
        ("spec.parallelism.pipeline", -1, "parallelism.pipeline"),
        ("spec.parallelism.data", "eight", "parallelism.data"),
        ("spec.accelerator.type", "A100", "accelerator.type"),
        ("spec.model.name", "not a hf id", "model.name"),
        ("spec.engine.vllmVersion", "v0.30.0", "engine.vllmVersion"),
        ("spec.engine.unknownField", 1, "engine.unknownField"),
    ],
)
def test_malformed_spec_is_refused_naming_the_field(field: str, value: object, fragment: str) -> None:
    doc = GLMDeploymentBuilder().set(field, value).build()
    with pytest.raises(ValidationError) as err:
        GLMDeployment.model_validate(doc)
    assert f"spec.{fragment}" in str(err.value)


def test_set_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    first = set_condition(None, "Validated", "True", "Ok", "fine", 1, now="2026-01-01T00:00:00Z")
    again = set_condition(first, "Validated", "True", "Ok", "still fine", 2, now="2026-02-01T00:00:00Z")
    assert again[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert again[0]["message"] == "still fine" and again[0]["observedGeneration"] == 2


def test_set_condition_moves_transition_time_and_keeps_other_conditions() -> None:
    conds = set_condition(None, "Ready", "False", "Waiting", "", 1, now="2026-01-01T00:00:00Z")
    conds = set_condition(conds, "Validated", "True", "Ok", "", 1, now="2026-01-01T00:00:00Z")
    conds = set_condition(conds, "Ready", "True", "Serving", "", 1, now="2026-03-01T00:00:00Z")
    assert [c["type"] for c in conds] == ["Ready", "Validated"]
    assert conds[0]["lastTransitionTime"] == "2026-03-01T00:00:00Z"
