"""The CRD is generated from the pydantic models and the committed copies match a fresh generation."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from glm_operator.api.crd import build_crd, build_image_crd, render_crd_yaml
from glm_operator.cli.generate import GENERATED
from glm_operator.cli.main import main
from tests.support.cluster import REPO


@pytest.mark.parametrize("path", list(GENERATED), ids=str)
def test_committed_generated_file_matches_a_fresh_generation(path: Any) -> None:
    assert (REPO / path).read_text() == GENERATED[path](REPO), f"{path} is stale: run `glmctl generate`"


def test_generate_check_fails_when_a_committed_copy_drifts(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "charts/glmops/values.yaml"
    values.parent.mkdir(parents=True)
    values.write_text((REPO / "charts/glmops/values.yaml").read_text())
    # The generator's other input: the proof's offline wheel list (its results directory may be empty).
    wheels = tmp_path / "images/vllm-patches/proof/requirements-gpu.txt"
    wheels.parent.mkdir(parents=True)
    wheels.write_text((REPO / "images/vllm-patches/proof/requirements-gpu.txt").read_text())
    assert main(["generate", "--root", str(tmp_path)]) == 0
    assert main(["generate", "--check", "--root", str(tmp_path)]) == 0
    stale = tmp_path / "charts/glmops/crds/glmops.dev_glmdeployments.yaml"
    stale.write_text(stale.read_text().replace("Tensor parallel size", "Tensor size"))
    assert main(["generate", "--check", "--root", str(tmp_path)]) == 1
    assert "charts/glmops/crds" in capsys.readouterr().err


def test_crd_command_prints_the_generated_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == render_crd_yaml()


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        out += _walk(sub, f"{path}.{name}")
    if "items" in node:
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_every_schema_node_is_typed_and_structural() -> None:
    for path, node in _walk(_schema()):
        if node.get("x-kubernetes-int-or-string"):  # a quantity: the one union the API server allows, untyped
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}] and "type" not in node, path
            continue
        assert "type" in node, f"{path or '<root>'} has no type"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "title"):
            assert banned not in node, f"{path}: {banned} is not allowed in a structural schema"
        if "additionalProperties" in node:  # a map: a schema for its values, never beside properties
            assert isinstance(node["additionalProperties"], dict) and "properties" not in node, path


def test_every_spec_field_has_explain_text() -> None:
    spec = _schema()["properties"]["spec"]
    for path, node in _walk(spec, ".spec"):
        if path.endswith("[]") and node["type"] != "object":
            continue  # items of a list of strings are described by the list
        assert node.get("description"), f"{path} has no description for kubectl explain"


@pytest.mark.parametrize(
    "field, keyword, value",
    [
        ("parallelism.tensor", "minimum", 1),
        ("parallelism.pipeline", "minimum", 1),
        ("parallelism.data", "minimum", 1),
        ("parallelism.tensor", "default", 1),
        ("parallelism.expert", "default", False),
        ("engine.moeBackend", "default", "auto"),
        ("validation.remediation", "enum", ["Auto", "Reject"]),
        ("replicas", "default", 1),
    ],
)
def test_spec_field_carries_its_bound_or_default(field: str, keyword: str, value: Any) -> None:
    node = _schema()["properties"]["spec"]
    for part in field.split("."):
        node = node["properties"][part]
    assert node[keyword] == value


def test_required_fields_are_model_and_accelerator() -> None:
    spec = _schema()["properties"]["spec"]
    assert spec["required"] == ["model", "accelerator"]
    assert spec["properties"]["accelerator"]["required"] == ["type"]
    assert spec["properties"]["model"]["required"] == ["name"]


def test_accelerator_enum_lists_every_supported_type() -> None:
    enum = _schema()["properties"]["spec"]["properties"]["accelerator"]["properties"]["type"]["enum"]
    assert enum == ["GB200", "GB300", "B200", "B300", "H100", "H200", "MI300X", "MI355X", "RTX-PRO-6000"]


def test_env_is_a_map_list_keyed_by_name_so_duplicates_are_refused() -> None:
    env = _schema()["properties"]["spec"]["properties"]["engine"]["properties"]["env"]
    assert env["x-kubernetes-list-type"] == "map"
    assert env["x-kubernetes-list-map-keys"] == ["name"]


def test_printer_columns_show_model_accelerator_parallelism_ready_reason_validated_age() -> None:
    columns = [c["name"] for c in build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert [c for c in columns if c != "Replicas"] == [
        "Model",
        "Accelerator",
        "Parallelism",
        "Ready",
        "Reason",
        "Validated",
        "Age",
    ]


def test_the_reason_column_shows_why_the_ready_condition_is_what_it_is() -> None:
    (column,) = [c for c in build_crd()["spec"]["versions"][0]["additionalPrinterColumns"] if c["name"] == "Reason"]
    assert column == {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'}


def test_the_scale_subresource_names_a_status_string_holding_the_pod_selector() -> None:
    scale = build_crd()["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    node = _schema()
    for part in scale["labelSelectorPath"].lstrip(".").split("."):
        node = node["properties"][part]
    assert node["type"] == "string"


def test_crd_names_match_the_api() -> None:
    crd = build_crd()
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == "glmdeployments.glmops.dev"
    assert (names["kind"], names["plural"], names["shortNames"]) == ("GLMDeployment", "glmdeployments", ["glmd"])
    assert crd["spec"]["versions"][0]["subresources"]["status"] == {}


def test_rendered_yaml_round_trips() -> None:
    assert yaml.safe_load(render_crd_yaml()) == build_crd()


def test_a_glmimage_shows_its_build_step_in_the_wide_listing() -> None:
    columns = build_image_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    (step,) = [c for c in columns if c["name"] == "Step"]
    assert step == {"name": "Step", "type": "string", "jsonPath": ".status.step", "priority": 1}
    assert [c["name"] for c in columns if not c.get("priority")] == ["Platform", "vLLM", "Phase", "Age"]
