"""Admission on the real API server: refusals with the message, warnings, repairs, dry-run, updates."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import REPO, Cluster, Kubectl, eventually
from tests.support.source_corrections import SOURCE_CORRECTIONS

pytestmark = pytest.mark.cluster
SAMPLES = REPO / "samples"


@pytest.fixture(autouse=True)
def _operator(operator: object) -> None:
    """Every test here needs the operator's webhooks."""


def _sample(name: str) -> dict:
    doc: dict = yaml.safe_load((SAMPLES / name).read_text())
    return doc


@pytest.mark.parametrize(
    "sample, fragments",
    [
        (
            "vllm-58729-broken.yaml",
            [
                "spec.parallelism.expert: true:",
                "rule vllm-58729",
                "https://github.com/vllm-project/vllm/issues/58729",
                "vLLM >= 0.32.0",
            ],
        ),
        (
            "vllm-63170-h200-pp8-broken.yaml",
            [
                "spec.parallelism.pipeline: 8:",
                "9; 19-21; 29; 39-41; 49; 59-61; 69",
                "VLLM_PP_LAYER_PARTITION=10,8,8,8,8,12,12,12",
            ],
        ),
        ("vllm-63170-rtx-pp2-broken.yaml", ["layers 39-41", "VLLM_PP_LAYER_PARTITION=38,40"]),
        (
            "vllm-52833-broken.yaml",
            ["spec.engine.env:", "rule vllm-52833", "VLLM_ROCM_USE_AITER_FP4BMM=0 and VLLM_ROCM_USE_AITER_FP8BMM=0"],
        ),
    ],
)
def test_broken_sample_is_refused_with_field_rule_upstream_and_fix(
    kubectl: Kubectl, namespace: str, sample: str, fragments: list[str]
) -> None:
    result = kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / sample), check=False)
    assert result.returncode != 0
    assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} missing from: {result.stderr}"
    name = _sample(sample)["metadata"]["name"]
    assert kubectl.run("get", "glmd", name, "-n", namespace, check=False).returncode != 0, "nothing is stored"


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.yaml") if "broken" not in p.name))
def test_fixed_and_baseline_samples_are_admitted_and_validated(kubectl: Kubectl, namespace: str, sample: str) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / sample))
    name = _sample(sample)["metadata"]["name"]

    def validated() -> str:
        conds = {c["type"]: c for c in kubectl.get("glmd", name, namespace).get("status", {}).get("conditions", [])}
        assert conds.get("Validated", {}).get("status") == "True", conds
        return str(conds["Validated"]["reason"])

    assert eventually(validated, timeout=60, what=f"{name} Validated=True") == "RulesPassed"


def test_auto_repair_is_stored_with_its_annotation_warned_and_reported_in_status(
    kubectl: Kubectl, namespace: str
) -> None:
    result = kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "vllm-63170-rtx-pp2-auto.yaml"))
    assert "Warning: glmops repaired spec.engine.env: 38,40" in result.stderr
    stored = kubectl.get("glmd", "glm53-nvfp4-rtx-pp2tp8-auto", namespace)
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": "38,40"} in stored["spec"]["engine"]["env"]
    record = json.loads(stored["metadata"]["annotations"]["glmops.dev/remediations"])
    assert record == [{"env": "VLLM_PP_LAYER_PARTITION", "rule": "vllm-63170", "value": "38,40"}]

    def remediations() -> list:
        status = kubectl.get("glmd", "glm53-nvfp4-rtx-pp2tp8-auto", namespace).get("status", {})
        assert status.get("remediations"), status
        return list(status["remediations"])

    assert eventually(remediations, timeout=60)[0]["rule"] == "vllm-63170"


def test_explicit_value_is_never_overridden_and_the_field_is_named(kubectl: Kubectl, namespace: str) -> None:
    obj = (
        B("explicit")
        .model("nvidia/GLM-5.3-NVFP4")
        .accelerator("RTX-PRO-6000")
        .tensor(8)
        .pipeline(2)
        .image("vllm/vllm-openai:v0.30.0")
        .env("VLLM_PP_LAYER_PARTITION", "39,39")
        .build()
    )
    result = kubectl.apply(obj, "-n", namespace, check=False)
    assert result.returncode != 0
    assert "spec.engine.env[0].value: 39,39:" in result.stderr and "Set VLLM_PP_LAYER_PARTITION=38,40" in result.stderr


def test_one_rejection_lists_every_problem(kubectl: Kubectl, namespace: str) -> None:
    obj = (
        B("many")
        .model("RedHatAI/GLM-5.3-MXFP4")
        .accelerator("GB200")
        .data(8)
        .expert()
        .image("vllm/vllm-openai:v0.30.0")
        .set("spec.engine.moeBackend", "aiter")
        .set("spec.engine.extraArgs", ["--pipeline-parallel-size=2"])
        .build()
    )
    result = kubectl.apply(obj, "-n", namespace, check=False)
    assert "3 problem(s)" in result.stderr
    for fragment in ("spec.engine.moeBackend: aiter", "spec.engine.extraArgs[0]", "rule vllm-58729"):
        assert fragment in result.stderr


def test_warnings_reach_kubectl(kubectl: Kubectl, namespace: str) -> None:
    obj = B("alias").model("zai-org/GLM-5.3-FP8").accelerator("H200").tensor(8).build()
    result = kubectl.apply(obj, "-n", namespace)
    assert "Warning: spec.model.name: zai-org/GLM-5.3-FP8: no such Hugging Face repository" in result.stderr


def test_server_dry_run_shows_the_repair_and_stores_nothing(kubectl: Kubectl, namespace: str) -> None:
    text = (SAMPLES / "vllm-63170-rtx-pp2-auto.yaml").read_text()
    result = kubectl.run("apply", "--dry-run=server", "-n", namespace, "-f", "-", "-o", "yaml", input=text)
    shown = yaml.safe_load(result.stdout)
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": "38,40"} in shown["spec"]["engine"]["env"]
    assert kubectl.run("get", "glmd", "-n", namespace, "-o", "name").stdout.strip() == ""


def test_updates_are_validated_like_creates_and_a_refused_update_changes_nothing(
    kubectl: Kubectl, namespace: str
) -> None:
    good = B("upd").model("zai-org/GLM-5.3").accelerator("H200").tensor(8).image("vllm/vllm-openai:v0.30.0")
    kubectl.apply(good.build(), "-n", namespace)
    before = kubectl.get("glmd", "upd", namespace)
    bad = good.tensor(1).pipeline(8).remediation("Reject").build()
    result = kubectl.apply(bad, "-n", namespace, check=False)
    assert result.returncode != 0 and "rule vllm-63170" in result.stderr
    after = kubectl.get("glmd", "upd", namespace)
    assert after["spec"] == before["spec"] and after["metadata"]["generation"] == before["metadata"]["generation"]


def test_refusals_are_4xx_never_500(cluster: Cluster, namespace: str) -> None:
    obj = _sample("vllm-58729-broken.yaml")
    certs = cluster.state_dir / "certs"
    server = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    url = f"{server}/apis/glmops.dev/v1alpha1/namespaces/{namespace}/glmdeployments"
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--cacert",
            str(certs / "ca.crt"),
            "--cert",
            str(certs / "admin.crt"),
            "--key",
            str(certs / "admin.key"),
            "-H",
            "Content-Type: application/json",
            "-X",
            "POST",
            "--data",
            json.dumps(obj),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "422"


def test_a_catalog_configmap_extends_what_admission_knows(kubectl: Kubectl, namespace: str) -> None:
    from tests.conftest import CATALOG_NAMESPACE
    from tests.unit.test_catalog_extension import EXTENSION

    obj = B("ft").model("acme/GLM-5.3-ft").accelerator("H200").tensor(8).build()
    before = kubectl.apply(obj, "-n", namespace, "--dry-run=server")
    assert "acme/GLM-5.3-ft: not in the model catalog" in before.stderr
    kubectl.run("create", "namespace", CATALOG_NAMESPACE, check=False)
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "glmops-catalog", "namespace": CATALOG_NAMESPACE},
        "data": {"catalog.yaml": EXTENSION},
    }
    kubectl.apply(cm)
    try:

        def known() -> bool:
            out = kubectl.apply(obj, "-n", namespace, "--dry-run=server")
            assert "not in the model catalog" not in out.stderr, out.stderr
            return True

        eventually(known, timeout=30, what="the operator to read the catalog ConfigMap")
    finally:
        kubectl.run("delete", "configmap", "glmops-catalog", "-n", CATALOG_NAMESPACE, check=False)


@pytest.mark.parametrize(
    "builder, refusal", [c[1:] for c in SOURCE_CORRECTIONS], ids=[c[0] for c in SOURCE_CORRECTIONS]
)
def test_decisions_corrected_from_the_vllm_source_hold_at_the_api_server(
    kubectl: Kubectl, namespace: str, builder: B, refusal: str | None
) -> None:
    result = kubectl.apply(builder.build(), "-n", namespace, check=False)
    if refusal is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0 and refusal in result.stderr, result.stderr
