"""`glmctl doctor` against the real local control plane, before glmops is installed: the fake GPU fleet found with
its allocatable GPUs, LeaderWorkerSet missing and then served, no default StorageClass and then one.

The test cluster has the fleet of render/fleet.py, no LeaderWorkerSet unless a test installs it
(cluster/lws.sh), and no Helm release (the tests' operator runs as a process).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from glm_operator.catalog import load_accelerators
from glm_operator.doctor.checks import LWS_CRD
from glm_operator.render.fleet import TEST_FLEET, default_fleet
from tests.support.cluster import REPO, Cluster, Kubectl, eventually, run_script

pytestmark = pytest.mark.cluster
RELEASE_NAMESPACE = "glmops-doctor-none"  # no release lives there
CLASS = "glmops-doctor-default"


def doctor(cluster: Cluster, *flags: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "glmctl"), "doctor", "--kubeconfig", cluster.kubeconfig,
         "-n", RELEASE_NAMESPACE, "-o", "json", *flags],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def findings(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check"] == check]


@pytest.fixture
def no_lws(kubectl: Kubectl) -> Iterator[None]:
    kubectl.run("delete", "crd", LWS_CRD, "--ignore-not-found", "--timeout=60s")
    yield
    kubectl.run("delete", "crd", LWS_CRD, "--ignore-not-found", "--timeout=60s", check=False)


@pytest.fixture
def own_storage_class(kubectl: Kubectl) -> Iterator[None]:
    yield
    kubectl.run("delete", "storageclass", CLASS, "--ignore-not-found", check=False)


def test_before_install_the_fake_fleet_is_found_with_its_allocatable_gpus(cluster: Cluster) -> None:
    _, report = doctor(cluster)
    catalog = load_accelerators()
    expected = {}
    for node in default_fleet(catalog, shape=TEST_FLEET):
        accelerator = node["metadata"]["labels"].get("glmops.dev/accelerator")
        if accelerator:
            resource = catalog.get(accelerator).resource_name
            count, gpus = expected.get(accelerator, (0, 0))
            expected[accelerator] = (count + 1, gpus + int(node["status"]["allocatable"][resource]))
    found = {f["subject"].removesuffix(" nodes"): f for f in findings(report, "gpu-nodes") if f["level"] == "ok"}
    for accelerator, (count, gpus) in expected.items():
        resource = catalog.get(accelerator).resource_name
        assert found[accelerator]["value"] == str(count), accelerator
        assert found[accelerator]["detail"] == f"{gpus} {resource} allocatable", accelerator
    assert not [f for f in findings(report, "gpu-nodes") if f["level"] != "ok"]
    (version,) = findings(report, "kubernetes-version")
    assert version["level"] == "ok"
    (release,) = findings(report, "release")
    assert (release["level"], release["value"]) == ("warning", "not installed")
    assert not findings(report, "webhooks") and not findings(report, "permissions")


def test_leaderworkerset_is_missing_with_its_fix_then_served_once_its_release_is_installed(
    cluster: Cluster, kubectl: Kubectl, no_lws: None
) -> None:
    code, report = doctor(cluster, "--multi-node")
    (lws,) = findings(report, "leaderworkerset")
    assert code == 1 and lws["level"] == "problem" and "kubernetes-sigs/lws" in lws["fix"]
    run_script("lws.sh", "up", timeout=900)  # the release's install, as the fix says
    try:
        _, report = doctor(cluster, "--multi-node")
        (lws,) = findings(report, "leaderworkerset")
        assert (lws["level"], lws["value"]) == ("ok", "served")
    finally:
        run_script("lws.sh", "down", timeout=300)


def test_no_default_storage_class_is_said_then_one_marked_default_is_found(
    cluster: Cluster, kubectl: Kubectl, own_storage_class: None
) -> None:
    _, report = doctor(cluster)
    (storage,) = findings(report, "storage-class")
    assert storage["level"] == "warning" and "spec.modelCache.shared.storageClassName" in storage["fix"]
    kubectl.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "example.com/none",
        }
    )

    def found() -> dict[str, Any]:
        (storage,) = findings(doctor(cluster)[1], "storage-class")
        assert (storage["level"], storage["value"]) == ("ok", CLASS)
        return storage

    eventually(found, timeout=30, what="doctor to find the default StorageClass")
