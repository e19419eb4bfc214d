"""The canary gate holds no finalizer on pods, and a restarted operator trusts the verdicts it recorded."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_METRICS_PORT, OperatorProcess
from tests.support.cluster import REPO, Kubectl, eventually

pytestmark = pytest.mark.cluster
SAMPLE = REPO / "samples" / "baseline-h200-glm53-fp8.yaml"
NAME = "glm53-fp8-h200-tp8"


@pytest.fixture(autouse=True)
def _running(operator: object, sim_fleet: object) -> None:
    """The operator and the simulators."""


def _ready(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLE))

    def ready() -> dict[str, Any]:
        glmd = kubectl.get("glmd", NAME, namespace)
        assert glmd["status"].get("readyReplicas") == 1, glmd["status"].get("canary")
        return glmd

    return eventually(ready, timeout=120, what="the deployment to pass its canaries")


def _serving_pods(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in kubectl.get("pods", namespace=namespace)["items"]
        if p["metadata"]["labels"].get("glmops.dev/serving")
    ]


def test_pods_and_namespaces_go_while_the_operator_is_down(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    _ready(kubectl, namespace)
    (pod,) = _serving_pods(kubectl, namespace)
    assert not pod["metadata"].get("finalizers"), "the gate must not hold serving pods"
    operator.stop()
    try:
        started = time.monotonic()
        kubectl.run("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--wait", "--timeout=60s")
        kubectl.run("delete", "namespace", namespace, "--wait", "--timeout=90s")
        assert time.monotonic() - started < 120
    finally:
        operator.start()


def test_a_restarted_operator_trusts_recent_verdicts_instead_of_asking_every_pod_again(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    before = _ready(kubectl, namespace)["status"]["canary"]["pods"]
    operator.stop()
    operator.start()
    time.sleep(20)  # far longer than one suite against the simulator takes
    text = httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics", timeout=10).text
    runs = [line for line in text.splitlines() if line.startswith("glmops_canary_runs_total") and namespace in line]
    assert runs == [], f"the restarted operator re-ran a canary it had passed minutes ago: {runs}"
    glmd = kubectl.get("glmd", NAME, namespace)
    assert glmd["status"].get("readyReplicas") == 1
    assert glmd["status"]["canary"]["pods"] == before, "reports survive the operator's restart"
