"""spec.network on the real control plane: every pod of a multi-node replica gets RDMA, IPC_LOCK, env, networks."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from glm_operator.render.fleet import FAKE_RDMA_DEVICES, FAKE_RDMA_RESOURCE
from glm_operator.render.network import MULTUS_ANNOTATION
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.builders import gate_patch
from tests.support.cluster import REPO, Kubectl, eventually

pytestmark = pytest.mark.cluster
SAMPLE = REPO / "samples" / "rdma-multinode.yaml"
NAME = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
NETWORK = yaml.safe_load(SAMPLE.read_text())["spec"]["network"]
RDMA = NETWORK["rdma"]["resourceName"]


@pytest.fixture(autouse=True)
def _operator(operator: object) -> None:
    """Every test here needs the running operator and its webhooks."""


@pytest.fixture(scope="module")
def rdma_on_h200_nodes(kubectl: Kubectl) -> None:
    """The fleet's H200 nodes advertise the RDMA resource (a cluster started before the fleet did gets it now)."""
    assert RDMA == FAKE_RDMA_RESOURCE
    for node in kubectl.get("nodes", None)["items"]:
        name = node["metadata"]["name"]
        if not name.startswith("gpu-h200-") or FAKE_RDMA_RESOURCE in node["status"].get("allocatable", {}):
            continue
        extra = {FAKE_RDMA_RESOURCE: FAKE_RDMA_DEVICES}
        patch = {"status": {"capacity": extra, "allocatable": extra}}
        kubectl.run("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def _pods(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.get("pods", namespace=namespace)["items"]
    return [
        p
        for p in items
        if p["metadata"]["labels"].get("glmops.dev/deployment") == NAME and not p["metadata"].get("deletionTimestamp")
    ]


def _condition(kubectl: Kubectl, namespace: str, type_: str) -> dict[str, Any]:
    conds = kubectl.get("glmd", NAME, namespace).get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == type_), {})


def assert_networked(template: dict[str, Any]) -> None:
    """A pod (or pod template) carries every spec.network addition of the sample."""
    container = template["spec"]["containers"][0]
    for kind in ("requests", "limits"):
        assert container["resources"][kind][RDMA] == "1", container["resources"]
    assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
    env = [e["name"] for e in container["env"]]
    assert len(env) == len(set(env)), env
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert values["NCCL_IB_DISABLE"] == "0"
    assert values["NCCL_IB_HCA"] == NETWORK["ibHCAs"]
    assert values["NCCL_SOCKET_IFNAME"] == values["GLOO_SOCKET_IFNAME"] == NETWORK["socketInterface"]
    assert template["metadata"]["annotations"][MULTUS_ANNOTATION] == ",".join(NETWORK["secondaryNetworks"])


def test_the_rdma_sample_as_stateful_sets_schedules_every_pod_with_rdma_and_becomes_ready(
    kubectl: Kubectl, namespace: str, rdma_on_h200_nodes: None
) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLE))

    def both_running() -> list[dict[str, Any]]:
        pods = [p for p in _pods(kubectl, namespace) if p["status"].get("phase") == "Running"]
        assert len(pods) == 2, [(p["metadata"]["name"], p["status"].get("phase")) for p in _pods(kubectl, namespace)]
        return pods

    pods = eventually(both_running, timeout=120, what="leader and worker running")
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-h200-0", "gpu-h200-1"}
    for pod in pods:
        assert_networked(pod)
    condition = gate_patch()
    for pod in pods:  # a StatefulSet group is ready when every pod is
        name = pod["metadata"]["name"]
        kubectl.run("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=strategic", "-p", condition)
    eventually(lambda: _condition(kubectl, namespace, "Ready").get("status") == "True", timeout=90, what="Ready=True")
    assert kubectl.get("glmd", NAME, namespace)["status"]["readyReplicas"] == 1


def test_the_rdma_sample_as_a_leader_worker_set_puts_rdma_on_the_leader_and_worker_templates(
    kubectl: Kubectl, namespace: str, leader_worker_set: None
) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLE))
    lws = eventually(
        lambda: kubectl.get("leaderworkerset", f"{NAME}-group", namespace), timeout=60, what="the LeaderWorkerSet"
    )
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert_networked(template["leaderTemplate"])
    assert_networked(template["workerTemplate"])


@pytest.mark.parametrize(
    "network, fragments",
    [
        (
            {"rdma": {"resourceName": "nvidia.com/gpu"}},
            ['admission webhook "glmops-validate.glmops.dev" denied', "spec.network.rdma.resourceName: nvidia.com/gpu"],
        ),
        ({"rdma": {}}, ["spec.network.rdma.resourceName: <unset>", "chart value network.rdmaResource"]),
        ({"rdma": {"resourceName": RDMA, "count": 0}}, ["spec.network.rdma.count"]),
        ({"socketInterface": "an-interface-name-too-long"}, ["spec.network.socketInterface"]),
    ],
)
def test_a_bad_network_value_is_refused_by_the_api_server_with_the_field(
    kubectl: Kubectl, namespace: str, network: dict[str, Any], fragments: list[str]
) -> None:
    obj = B("bad-network").accelerator("H200").tensor(8).pipeline(2).set("spec.network", network).build()
    result = kubectl.run("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)
    assert result.returncode != 0
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} missing from: {result.stderr}"
    assert kubectl.run("get", "glmd", "bad-network", "-n", namespace, check=False).returncode != 0
