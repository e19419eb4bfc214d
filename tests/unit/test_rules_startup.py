"""Start-up refusals (rule startup/...): what vLLM refuses while starting is refused at admission."""

from __future__ import annotations

import pytest

from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import evaluate
from glm_operator.rules.findings import Finding
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()


def errors(obj: dict) -> dict[str, Finding]:
    return {f.rule: f for f in evaluate(obj, CATALOGS) if f.severity == "error"}


def pp(n: int, version: str = "0.32.0") -> B:
    return (
        B()
        .model("zai-org/GLM-5.3")
        .accelerator("H200")
        .pipeline(n)
        .tensor(8 // n)
        .image(f"vllm/vllm-openai:v{version}")
    )


@pytest.mark.parametrize(
    "value, why",
    [
        ("38,40", "has 2 entries but pipeline parallel size is 1"),
        ("77", "sums to 77 but the model has 78 layers"),
        ("a", "must be 1 comma-separated integers"),
        ("", "must be 1 comma-separated integers"),
        ("78.0", "must be 1 comma-separated integers"),
    ],
)
def test_pipeline_1_partition_vllm_refuses_is_refused(value: str, why: str) -> None:
    hit = errors(pp(1).env("VLLM_PP_LAYER_PARTITION", value).build())
    finding = hit["startup/pp-partition"]
    assert finding.field == "spec.engine.env[0].value"
    assert why in finding.message
    assert "vllm/distributed/utils.py:126 get_pp_indices" in finding.message
    assert "Remove VLLM_PP_LAYER_PARTITION" in finding.message
    assert "vllm-63170" not in hit


def test_pipeline_1_partition_equal_to_the_layer_count_is_clean() -> None:
    assert errors(pp(1).env("VLLM_PP_LAYER_PARTITION", "78").build()) == {}


def test_pipeline_1_without_a_partition_is_clean() -> None:
    assert "startup/pp-partition" not in errors(pp(1).build())


def test_pipeline_2_malformed_partition_is_reported_once_by_63170() -> None:
    hit = errors(pp(2).env("VLLM_PP_LAYER_PARTITION", "38").build())
    assert "vllm-63170" in hit and "startup/pp-partition" not in hit


@pytest.mark.parametrize("version, line", [("0.26.0", 127), ("0.31.0", 128), ("0.33.0", 198)])
def test_the_message_cites_the_version_s_own_line(version: str, line: int) -> None:
    finding = errors(pp(1, version).env("VLLM_PP_LAYER_PARTITION", "1,77").build())["startup/pp-partition"]
    assert f"vllm/distributed/utils.py:{line} get_pp_indices" in finding.message
