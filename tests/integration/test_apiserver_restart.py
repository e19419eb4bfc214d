"""The API server restarted under the operator: while it reconciles a new deployment, and while a canary runs.

The operator reconnects and finishes: the deployment becomes Ready with nothing doubled or lost, and a pod whose
canary ran while the API server was away gets its gate written once it is back. Each test stops the shared
cluster's kube-apiserver (by its recorded pid) and always starts it again (tests/support/apiserver.py).
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from glm_operator.api.constants import CANARY_CONDITION, Reason
from tests.conftest import OperatorProcess
from tests.support.apiserver import apiserver_down
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import Cluster, Kubectl, eventually
from tests.support.glmd import owned_objects, serving_pods

pytestmark = pytest.mark.cluster
DOWN_S = 5.0
GATE_WITHIN_S = 20.0


@pytest.fixture(autouse=True)
def _running(operator: object, sim_fleet: object) -> None:
    """The operator and the simulators."""


def _log_from(operator: OperatorProcess) -> tuple[Any, int]:
    path = operator.log_path
    return path, path.stat().st_size


def _since(path: Any, offset: int) -> str:
    with open(path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


def _unhandled(path: Any, offset: int) -> list[str]:
    """Lines of the operator log written since `offset` that report an exception nobody handled."""
    text = _since(path, offset)
    return [line for line in text.splitlines() if re.search(r"Traceback|Unhandled|unexpected error|CRITICAL", line)]


def _ready(kubectl: Kubectl, namespace: str, name: str, replicas: int = 1) -> dict[str, Any]:
    glmd = kubectl.get("glmd", name, namespace)
    assert glmd["status"].get("readyReplicas") == replicas, glmd.get("status")
    assert glmd["status"].get("observedGeneration") == glmd["metadata"]["generation"]
    return glmd


def test_an_api_server_restart_during_reconcile_leaves_one_of_everything_and_a_ready_deployment(
    cluster: Cluster, kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    log, offset = _log_from(operator)
    kubectl.apply(B("restart-reconcile").accelerator("GB300").tensor(4).build(), "-n", namespace)
    with apiserver_down(cluster) as outage:  # right after the create: the operator is reconciling it
        time.sleep(DOWN_S)
    assert outage.ready_at is not None
    glmd = eventually(lambda: _ready(kubectl, namespace, "restart-reconcile"), timeout=90, what="Ready after restart")
    back_to_ready = time.monotonic() - outage.ready_at
    assert owned_objects(kubectl, namespace) == {
        "restart-reconcile": {
            "ConfigMap": ["restart-reconcile-canary"],
            "Deployment": ["restart-reconcile"],
            "Service": ["restart-reconcile"],
            "PodDisruptionBudget": ["restart-reconcile"],
        }
    }
    assert len(kubectl.get("replicasets", namespace=namespace)["items"]) == 1, "no second rollout"
    assert len(serving_pods(kubectl, namespace, "restart-reconcile")) == 1
    assert glmd["status"]["canary"]["summary"] == "1/1 pods passed"
    assert _unhandled(log, offset) == []
    print(f"\nAPI server back -> Ready: {back_to_ready:.1f}s")


def _suite_running(ip: str) -> bool:
    """The pod's simulator has finished a completion: a canary suite is under way (each request takes the latency)."""
    text = httpx.get(f"http://{ip}:8000/metrics", timeout=2).text
    done = re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return sum(float(n) for n in done) > 0


def test_an_api_server_gone_during_a_canary_run_gets_the_gate_written_when_it_returns(
    cluster: Cluster, kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    log, offset = _log_from(operator)
    obj = B("restart-canary").accelerator("GB300").tensor(4).build()
    obj["metadata"]["annotations"] = {"sim.glmops.dev/latency-ms": "400"}  # a suite of several seconds
    kubectl.apply(obj, "-n", namespace)

    def pod_ip() -> str:
        pods = serving_pods(kubectl, namespace, "restart-canary")
        assert len(pods) == 1 and pods[0]["status"].get("podIP"), pods
        return str(pods[0]["status"]["podIP"])

    ip = eventually(pod_ip, timeout=60, what="the pod's IP")

    def suite_running() -> bool:
        try:
            return _suite_running(ip)
        except httpx.HTTPError as err:  # the simulator not started yet
            raise AssertionError(err) from err

    eventually(suite_running, timeout=60, interval=0.2, what="the canary suite to start")
    _, suite_offset = _log_from(operator)
    with apiserver_down(cluster) as outage:
        time.sleep(DOWN_S)
    assert outage.ready_at is not None

    def gate() -> tuple[dict[str, Any], dict[str, Any]]:
        (pod,) = serving_pods(kubectl, namespace, "restart-canary")
        conds = {c["type"]: c for c in pod["status"].get("conditions") or []}
        assert conds.get(CANARY_CONDITION, {}).get("status") == "True", conds.get(CANARY_CONDITION)
        return pod, conds

    # The operator's part: the verdict written within seconds of the API server's return (it retries every 2 s).
    pod, conds = eventually(gate, timeout=GATE_WITHIN_S, interval=0.2, what="the gate written after the restart")
    gate_s = time.monotonic() - outage.ready_at
    assert conds[CANARY_CONDITION]["reason"] == Reason.CANARY_PASSED, conds

    # The control plane's part: the pod Ready (kwok), the Deployment's status (controller manager), then the
    # GLMDeployment's (the operator, from its Deployment watch).
    def pod_ready() -> bool:
        (pod,) = serving_pods(kubectl, namespace, "restart-canary")
        return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])

    eventually(pod_ready, timeout=120, interval=0.5, what="the pod Ready")
    pod_ready_s = time.monotonic() - outage.ready_at
    eventually(
        lambda: kubectl.get("deployment", "restart-canary", namespace)["status"].get("readyReplicas") == 1,
        timeout=120,
        what="the Deployment's readyReplicas",
    )
    deployment_s = time.monotonic() - outage.ready_at
    glmd = eventually(lambda: _ready(kubectl, namespace, "restart-canary"), timeout=120, what="Ready after restart")
    back_to_ready = time.monotonic() - outage.ready_at
    assert glmd["status"]["canary"]["pods"][pod["metadata"]["name"]]["passed"] is True
    assert _unhandled(log, offset) == []
    # The outage is not blamed on the pod: its verdict was written once the API server was back, not re-run.
    assert "canary could not ask pod" not in _since(log, suite_offset)
    print(
        f"\nAPI server back -> gate written: {gate_s:.1f}s; pod Ready: {pod_ready_s:.1f}s; Deployment ready:"
        f" {deployment_s:.1f}s; GLMDeployment Ready: {back_to_ready:.1f}s"
    )
