"""Fake GPU nodes behave like real ones for the scheduler: capacity, labels, taints, pod lifecycle."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api.constants import CANARY_CONDITION, Reason
from tests.support.builders import gate_patch
from tests.support.cluster import Kubectl, eventually

pytestmark = pytest.mark.cluster


def _gpu_deployment(name: str, resource: str, count: int, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": selector,
                    "tolerations": [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "example.invalid/gpu:1",
                            "resources": {"limits": {resource: str(count)}},
                        }
                    ],
                },
            },
        },
    }


def _pods(kubectl: Kubectl, namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.get("pods", namespace=namespace)["items"]
    return [p for p in items if p["metadata"]["labels"].get("app") == app]


@pytest.mark.parametrize(
    "resource, count, selector, node_prefix",
    [
        ("nvidia.com/gpu", 8, {"nvidia.com/gpu.product": "NVIDIA-H200"}, "gpu-h200-"),
        ("nvidia.com/gpu", 4, {"nvidia.com/gpu.product": "NVIDIA-GB200"}, "gpu-gb200-"),
        ("amd.com/gpu", 8, {"amd.com/gpu.device-id": "75a3"}, "gpu-mi355x-"),
    ],
)
def test_gpu_deployment_lands_on_a_matching_fake_node_and_runs(
    kubectl: Kubectl, namespace: str, resource: str, count: int, selector: dict[str, str], node_prefix: str
) -> None:
    kubectl.apply(_gpu_deployment("gpu", resource, count, selector), "-n", namespace)

    def running() -> dict[str, Any]:
        pods = _pods(kubectl, namespace, "gpu")
        assert pods and pods[0]["status"].get("phase") == "Running", pods and pods[0]["status"]
        return pods[0]

    pod = eventually(running, timeout=60, what="the GPU pod to run")
    assert pod["spec"]["nodeName"].startswith(node_prefix)
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True"
    kubectl.run("rollout", "status", "deployment/gpu", "-n", namespace, "--timeout=60s")


def test_pod_asking_for_more_gpus_than_a_node_has_stays_pending(kubectl: Kubectl, namespace: str) -> None:
    kubectl.apply(
        _gpu_deployment("toobig", "nvidia.com/gpu", 9, {"nvidia.com/gpu.product": "NVIDIA-H200"}), "-n", namespace
    )

    def unschedulable() -> str:
        pods = _pods(kubectl, namespace, "toobig")
        conds = {c["type"]: c for c in (pods[0]["status"].get("conditions") or [])} if pods else {}
        scheduled = conds.get("PodScheduled", {})
        assert scheduled.get("reason") == "Unschedulable", conds
        return str(scheduled.get("message", ""))

    message = eventually(unschedulable, timeout=60, what="the scheduler to refuse 9 GPUs")
    assert "Insufficient nvidia.com/gpu" in message


def test_gpu_pod_without_toleration_is_kept_off_tainted_gpu_nodes(kubectl: Kubectl, namespace: str) -> None:
    dep = _gpu_deployment("notol", "nvidia.com/gpu", 1, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    dep["spec"]["template"]["spec"].pop("tolerations")
    kubectl.apply(dep, "-n", namespace)

    def refused() -> bool:
        pods = _pods(kubectl, namespace, "notol")
        msgs = " ".join(c.get("message", "") for c in (pods[0]["status"].get("conditions") or [])) if pods else ""
        assert "untolerated taint" in msgs, msgs
        return True

    eventually(refused, timeout=60, what="the taint to keep the pod off GPU nodes")


def test_readiness_gate_holds_ready_until_its_condition_is_true(kubectl: Kubectl, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated"},
        "spec": {
            "readinessGates": [{"conditionType": CANARY_CONDITION}],
            "containers": [{"name": "main", "image": "example.invalid/app:1"}],
        },
    }
    kubectl.apply(pod, "-n", namespace)

    def conditions() -> dict[str, str]:
        status = kubectl.get("pod", "gated", namespace)["status"]
        assert status.get("phase") == "Running", status
        return {c["type"]: c["status"] for c in status["conditions"]}

    conds = eventually(conditions, timeout=60, what="the gated pod to run")
    assert conds["ContainersReady"] == "True"
    assert conds["Ready"] == "False", "a readiness gate without its condition must hold Ready at False"
    assert CANARY_CONDITION not in conds, "nothing but the operator may write the gate condition"

    patch = gate_patch()
    kubectl.run("patch", "pod", "gated", "-n", namespace, "--subresource=status", "--type=strategic", "-p", patch)
    eventually(lambda: conditions()["Ready"] == "True", timeout=30, what="Ready after the gate turns True")

    patch = gate_patch("False", Reason.CANARY_FAILED)
    kubectl.run("patch", "pod", "gated", "-n", namespace, "--subresource=status", "--type=strategic", "-p", patch)
    eventually(lambda: conditions()["Ready"] == "False", timeout=30, what="Ready to drop when the gate fails")


def test_deleted_pods_go_away(kubectl: Kubectl, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bye"},
        "spec": {"containers": [{"name": "main", "image": "example.invalid/app:1"}]},
    }
    kubectl.apply(pod, "-n", namespace)
    eventually(lambda: kubectl.get("pod", "bye", namespace)["status"].get("phase") == "Running", timeout=60)
    kubectl.run("delete", "pod", "bye", "-n", namespace, "--timeout=60s")


def test_the_gate_writer_patches_only_its_condition_and_skips_a_repeat(
    cluster: object, kubectl: Kubectl, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glm_operator.k8s import client, pods

    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)  # type: ignore[attr-defined]
    client.api_client.cache_clear()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gw"},
        "spec": {
            "readinessGates": [{"conditionType": CANARY_CONDITION}],
            "containers": [{"name": "main", "image": "example.invalid/app:1"}],
        },
    }
    kubectl.apply(pod, "-n", namespace)
    eventually(lambda: kubectl.get("pod", "gw", namespace)["status"].get("phase") == "Running", timeout=60)
    assert pods.set_gate(namespace, "gw", "True", Reason.CANARY_PASSED, "all checks passed") is not None
    version = kubectl.get("pod", "gw", namespace)["metadata"]["resourceVersion"]
    assert pods.set_gate(namespace, "gw", "True", Reason.CANARY_PASSED, "all checks passed") is None
    assert kubectl.get("pod", "gw", namespace)["metadata"]["resourceVersion"] == version
    conds = {c["type"]: c for c in kubectl.get("pod", "gw", namespace)["status"]["conditions"]}
    assert {"Initialized", "ContainersReady", CANARY_CONDITION} <= set(conds), "other conditions survive"
    eventually(
        lambda: (
            {c["type"]: c["status"] for c in kubectl.get("pod", "gw", namespace)["status"]["conditions"]}["Ready"]
            == "True"
        ),
        timeout=30,
        what="Ready after the gate passes",
    )
    client.api_client.cache_clear()
