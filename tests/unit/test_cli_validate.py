"""`glmctl validate`: exit codes, text and JSON output, stdin."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from glm_operator.cli.main import main
from tests.support.cluster import REPO
from tests.support.source_corrections import SOURCE_CORRECTIONS

SAMPLES = REPO / "samples"


def test_fixed_samples_are_admitted_with_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in SAMPLES.glob("*fixed.yaml")) + sorted(str(p) for p in SAMPLES.glob("baseline*"))
    assert main(["validate", *files]) == 0
    assert capsys.readouterr().out.count(": admitted") == len(files)


def test_a_broken_sample_makes_the_run_fail_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["validate", str(SAMPLES / "baseline-h200-glm53-fp8.yaml"), str(SAMPLES / "vllm-58729-broken.yaml")]) == 1
    )
    out = capsys.readouterr().out
    assert "REFUSED" in out and "rule vllm-58729" in out


def test_json_output_has_one_element_per_object(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = [
        yaml.safe_load((SAMPLES / n).read_text())
        for n in ("vllm-63170-rtx-pp2-broken.yaml", "baseline-h200-glm53-fp8.yaml")
    ]
    docs[0]["spec"]["validation"]["remediation"] = "Auto"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["validate", "-o", "json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in result] == [d["metadata"]["name"] for d in docs]
    first = result[0]
    assert set(first) >= {"kind", "name", "allowed", "findings", "patched"}
    assert first["findings"][0] == {
        "rule": "vllm-63170",
        "severity": "remediated",
        "field": "spec.engine.env",
        "message": first["findings"][0]["message"],
        "upstream": "https://github.com/vllm-project/vllm/issues/63170",
    }
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": "38,40"} in first["patched"]["spec"]["engine"]["env"]


@pytest.mark.parametrize(
    "text, why",
    [
        ("kind: Pod\napiVersion: v1\n", 'skipped "Pod" ("v1"): not a GLMDeployment'),
        ("a: [unclosed\n", "not valid YAML"),
        ("- 1\n", "not a Kubernetes"),
    ],
)
def test_unreadable_input_or_unknown_kind_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str, why: str
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["validate", "-"]) == 2
    assert why in capsys.readouterr().err


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/x.yaml"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_validate_decides_the_source_corrections_as_the_webhook_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name, builder, refusal in SOURCE_CORRECTIONS:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(builder.build()))
        assert main(["validate", str(path)]) == (0 if refusal is None else 1), name
        out = capsys.readouterr().out
        assert refusal is None or refusal in out, out
