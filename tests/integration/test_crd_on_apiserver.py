"""The CRD on the real API server: samples are accepted, malformed objects refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from glm_operator.cli.main import main
from glm_operator.render.workloads import serving_selector
from tests.support.builders import GLMDeploymentBuilder
from tests.support.cluster import REPO, Kubectl, eventually

pytestmark = pytest.mark.cluster
# Samples the rules admit; the broken ones are refused by admission (tests/integration/test_admission.py).
SAMPLES = sorted(p for p in (REPO / "samples").glob("*.yaml") if "broken" not in p.name)


def test_kubectl_explain_prints_the_models_field_descriptions(kubectl: Kubectl, crd_installed: None) -> None:
    out = kubectl.run("explain", "glmdeployment.spec.parallelism.expert").stdout
    assert "--enable-expert-parallel" in out
    out = kubectl.run("explain", "glmd.spec.accelerator.type").stdout
    assert "GPU model" in out


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_each_sample_is_accepted(kubectl: Kubectl, operator: object, namespace: str, path: Path) -> None:
    result = kubectl.run("apply", "-n", namespace, "-f", str(path))
    assert "created" in result.stdout
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    stored = kubectl.get("glmd", name, namespace)
    assert stored["spec"]["parallelism"]["tensor"] >= 1, "schema defaults are applied by the API server"
    assert stored["spec"]["validation"]["remediation"] in ("Auto", "Reject")


def test_kubectl_get_shows_the_columns_and_the_operator_fills_them(
    kubectl: Kubectl, operator: object, namespace: str
) -> None:
    kubectl.apply(
        GLMDeploymentBuilder("dp8ep").accelerator("GB200").data(8).expert().vllm("0.32.0").build(), "-n", namespace
    )
    header = kubectl.run("get", "glmd", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "MODEL", "ACCELERATOR", "PARALLELISM", "READY", "REASON", "VALIDATED", "AGE"]

    def row() -> list[str]:
        line = kubectl.run("get", "glmd", "dp8ep", "-n", namespace, "--no-headers").stdout
        assert "TP1 PP1 DP8 EP" in line, line
        return line.split()

    cells = eventually(row, timeout=60, what="the operator to write status.parallelism")
    assert cells[:3] == ["dp8ep", "zai-org/GLM-5.3", "GB200"]
    wide = kubectl.run("get", "glmd", "dp8ep", "-n", namespace, "-o", "wide").stdout.splitlines()[0]
    assert "REPLICAS" in wide


def test_status_is_a_subresource_so_spec_writers_cannot_set_it(
    kubectl: Kubectl, operator: object, namespace: str
) -> None:
    obj = GLMDeploymentBuilder("st").tensor(8).build()
    obj["status"] = {"parallelism": "forged"}
    kubectl.apply(obj, "-n", namespace)
    assert "status" not in kubectl.get("glmd", "st", namespace) or (
        kubectl.get("glmd", "st", namespace)["status"].get("parallelism") != "forged"
    )


MALFORMED = [
    pytest.param(lambda b: b.drop("spec.model"), ["spec.model", "Required value"], id="missing-model"),
    pytest.param(
        lambda b: b.drop("spec.accelerator"), ["spec.accelerator", "Required value"], id="missing-accelerator"
    ),
    pytest.param(lambda b: b.tensor(0), ["spec.parallelism.tensor", "greater than or equal to 1"], id="zero-tensor"),
    pytest.param(
        lambda b: b.pipeline(-2), ["spec.parallelism.pipeline", "greater than or equal to 1"], id="negative-pp"
    ),
    pytest.param(lambda b: b.data(0), ["spec.parallelism.data", "greater than or equal to 1"], id="zero-data"),
    pytest.param(
        lambda b: b.set("spec.parallelism.tensor", "two"), ["spec.parallelism.tensor", "integer"], id="tp-string"
    ),
    pytest.param(
        lambda b: b.set("spec.parallelism.expert", "yes"), ["spec.parallelism.expert", "boolean"], id="ep-string"
    ),
    pytest.param(
        lambda b: b.set("spec.replicas", -1), ["spec.replicas", "greater than or equal to 0"], id="neg-replicas"
    ),
    pytest.param(
        lambda b: b.accelerator("A100"),
        ["spec.accelerator.type", "Unsupported value", '"A100"', '"GB200"', '"MI355X"', '"RTX-PRO-6000"'],
        id="unknown-accelerator-lists-known-types",
    ),
    pytest.param(lambda b: b.model("GLM-5.3"), ["spec.model.name", "should match"], id="model-not-org-slash-name"),
    pytest.param(lambda b: b.vllm("v0.30.0"), ["spec.engine.vllmVersion", "should match"], id="version-with-v"),
    pytest.param(
        lambda b: b.env("VLLM_X", "1").env("VLLM_X", "2"), ["spec.engine.env[1]", "Duplicate value"], id="duplicate-env"
    ),
    pytest.param(lambda b: b.set("spec.parallelism.tensr", 2), ["spec.parallelism.tensr", "unknown field"], id="typo"),
    pytest.param(
        lambda b: b.set("spec.canary", {"gsm8k": {"max_questions": 5}}),
        ["spec.canary.gsm8k.max_questions", "unknown field"],
        id="snake-case",
    ),
    pytest.param(
        lambda b: b.set("spec.canary", {"gsm8K": {"maxQuestions": 5}}),
        ["spec.canary.gsm8K", "unknown field"],
        id="old-generated-spelling",
    ),
]


@pytest.mark.parametrize("mutate, expected", MALFORMED)
def test_malformed_object_is_refused_with_the_field_named(
    kubectl: Kubectl, operator: object, namespace: str, mutate, expected: list[str]
) -> None:
    obj = mutate(GLMDeploymentBuilder("bad")).build()
    result = kubectl.apply(obj, "-n", namespace, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    for fragment in expected:
        assert fragment in result.stderr, f"{fragment!r} not in: {result.stderr}"
    assert kubectl.run("get", "glmd", "bad", "-n", namespace, check=False).returncode != 0, "nothing stored"


@pytest.mark.parametrize("mutate, expected", MALFORMED)
def test_glmctl_validate_refuses_what_strict_field_validation_refuses_naming_the_same_field(
    kubectl: Kubectl,
    operator: object,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mutate,
    expected: list[str],
) -> None:
    obj = mutate(GLMDeploymentBuilder("bad")).build()
    server = kubectl.apply(obj, "-n", namespace, "--dry-run=server", "--validate=strict", check=False)
    assert server.returncode != 0 and expected[0] in server.stderr, server.stderr
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(obj))
    assert main(["validate", "-o", "json", str(tmp_path / "bad.yaml")]) == 1
    (verdict,) = json.loads(capsys.readouterr().out)
    assert expected[0] in [f["field"] for f in verdict["findings"] if f["severity"] == "error"]


def test_the_gsm8k_field_is_kept_by_the_api_server_and_admitted_by_glmctl(
    kubectl: Kubectl, operator: object, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    obj = GLMDeploymentBuilder("g").tensor(8).set("spec.canary", {"gsm8k": {"maxQuestions": 50}}).build()
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(obj))
    assert main(["validate", str(tmp_path / "g.yaml")]) == 0, capsys.readouterr().out
    result = kubectl.apply(obj, "-n", namespace, "--dry-run=server", "--validate=strict", "-o", "json")
    assert json.loads(result.stdout)["spec"]["canary"]["gsm8k"]["maxQuestions"] == 50


def test_the_scale_subresource_reports_the_selector_the_operator_writes(
    kubectl: Kubectl, operator: object, namespace: str
) -> None:
    kubectl.apply(GLMDeploymentBuilder("sc").tensor(8).vllm("0.32.0").build(), "-n", namespace)

    def selector() -> str:
        scale = json.loads(
            kubectl.run("get", "glmd", "sc", "-n", namespace, "--subresource=scale", "-o", "json").stdout
        )
        assert scale["status"].get("selector"), scale
        return str(scale["status"]["selector"])

    got = eventually(selector, timeout=60, what="the operator to write status.selector")
    assert got == serving_selector("sc")
