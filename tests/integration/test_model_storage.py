"""The shared model cache on the real control plane: claim, download Job, then the workload; a failed Job degrades.

The local cluster has no storage provisioner, so each test makes the PersistentVolume the claim binds to (a
hostPath volume pre-bound to the claim's name, as an administrator would for static provisioning). kwok plays the
download pod and ends it as the operator's test-only GLMOPS_MODEL_DOWNLOAD_POD_ANNOTATIONS says: after a few
seconds with exit code 0, or with exit code 1 so the Job runs out of retries (cluster/kwok-stages.yaml).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import OperatorProcess
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.builders import gate_patch
from tests.support.cluster import REPO, Cluster, Kubectl, eventually
from tests.support.volumes import prebound_volume

pytestmark = pytest.mark.cluster
SAMPLE = REPO / "samples/pvc-cached.yaml"
CACHED = "glm53-fp8-h200-cached"
FAILING = "download-fails"
FAKE_DOWNLOADS = {
    CACHED: {"glmops.dev/fake-run-ms": "15000"},  # long enough to see the deployment wait, on a loaded machine
    FAILING: {"glmops.dev/fake-exit-code": "1", "glmops.dev/fake-termination-message": "401 Client Error"},
}


@pytest.fixture(scope="module")
def download_operator(cluster: Cluster, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The operator with the fake download outcomes, in place of the session's (two operators would fight)."""
    env = {"GLMOPS_MODEL_DOWNLOAD_POD_ANNOTATIONS": json.dumps(FAKE_DOWNLOADS)}
    operator.stop()
    downloads = OperatorProcess(cluster, extra_env=env, name="operator-model-storage")
    try:
        downloads.start()
        yield downloads
    finally:
        downloads.stop()
        operator.start()


@pytest.fixture
def volume(kubectl: Kubectl, namespace: str, request: pytest.FixtureRequest) -> Iterator[None]:
    with prebound_volume(kubectl, namespace, f"{request.param}-model-cache"):
        yield


def _condition(kubectl: Kubectl, namespace: str, name: str, type_: str) -> dict[str, Any]:
    conds = kubectl.get("glmd", name, namespace).get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == type_), {})


def _items(kubectl: Kubectl, kind: str, namespace: str, name: str) -> list[dict[str, Any]]:
    out = kubectl.run("get", kind, "-n", namespace, "-l", f"glmops.dev/deployment={name}", "-o", "json").stdout
    items: list[dict[str, Any]] = yaml.safe_load(out)["items"]
    return items


def _job_done(kubectl: Kubectl, namespace: str, name: str, type_: str) -> bool:
    jobs = _items(kubectl, "jobs", namespace, name)
    return any(
        c["type"] == type_ and c["status"] == "True"
        for j in jobs
        for c in (j.get("status") or {}).get("conditions", [])
    )


@pytest.mark.parametrize("volume", [CACHED], indirect=True)
def test_the_sample_downloads_once_then_serves_from_the_read_only_claim(
    kubectl: Kubectl, namespace: str, download_operator: OperatorProcess, volume: None
) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLE))
    downloading = eventually(
        lambda: _condition(kubectl, namespace, CACHED, "Progressing").get("reason") == "ModelDownloading",
        timeout=30,
        what="Progressing ModelDownloading",
    )
    assert downloading
    # Deployments first, then the Job: a workload seen before a Complete Job was made before the download ended
    # (a Job stays Complete), whatever the timing of the two reads.
    early = _items(kubectl, "deployments", namespace, CACHED)
    assert not early or _job_done(kubectl, namespace, CACHED, "Complete"), "no workload before the weights are there"
    claim = kubectl.get("pvc", f"{CACHED}-model-cache", namespace)
    assert claim["spec"]["resources"]["requests"]["storage"] == "775Gi"
    eventually(lambda: _job_done(kubectl, namespace, CACHED, "Complete"), timeout=90, what="the download Job")
    deployment = eventually(
        lambda: next(iter(_items(kubectl, "deployments", namespace, CACHED)), None), timeout=60, what="the Deployment"
    )
    pod_spec = deployment["spec"]["template"]["spec"]
    volume_source = next(v for v in pod_spec["volumes"] if v["name"] == "model-cache")
    assert volume_source["persistentVolumeClaim"] == {"claimName": f"{CACHED}-model-cache", "readOnly": True}
    container = pod_spec["containers"][0]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]
    assert any(m["name"] == "model-cache" and m.get("readOnly") for m in container["volumeMounts"])

    def pod() -> dict[str, Any] | None:
        pods = kubectl.get("pods", namespace=namespace)["items"]
        return next((p for p in pods if p["metadata"]["labels"].get("glmops.dev/serving") == "true"), None)

    name = eventually(pod, timeout=60, what="the serving pod")["metadata"]["name"]
    patch = gate_patch()
    kubectl.run("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=strategic", "-p", patch)
    eventually(
        lambda: _condition(kubectl, namespace, CACHED, "Ready").get("status") == "True", timeout=60, what="Ready"
    )


@pytest.mark.parametrize("volume", [FAILING], indirect=True)
def test_a_failed_download_degrades_the_deployment_with_the_jobs_reason_and_an_event(
    kubectl: Kubectl, namespace: str, download_operator: OperatorProcess, volume: None
) -> None:
    glmd = B(FAILING).model("zai-org/GLM-5.3").accelerator("H200").tensor(8).vllm("0.32.0")
    kubectl.apply(glmd.namespace(namespace).set("spec.modelCache.shared", {}).build())
    # backoffLimit 2: three pods fail, 10 s and 20 s apart (the Job controller's backoff).
    eventually(lambda: _job_done(kubectl, namespace, FAILING, "Failed"), timeout=120, what="the Job failing")
    degraded = eventually(
        lambda: (c := _condition(kubectl, namespace, FAILING, "Degraded")).get("status") == "True" and c,
        timeout=30,
        what="Degraded",
    )
    assert degraded["reason"] == "ModelDownloadFailed" and "BackoffLimitExceeded" in degraded["message"]
    assert _condition(kubectl, namespace, FAILING, "Ready")["status"] == "False"
    assert _items(kubectl, "deployments", namespace, FAILING) == []

    def warned() -> bool:
        events = kubectl.get("events", namespace=namespace)["items"]
        return any(e.get("reason") == "ModelDownloadFailed" and e.get("type") == "Warning" for e in events)

    eventually(warned, timeout=30, what="a ModelDownloadFailed Event")
