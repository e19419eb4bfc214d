"""spec.pod on the real control plane: the samples become Ready with their settings on the pods, on the nodes
they ask for, and the API server refuses what would undo glmops' decisions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.fleet import fake_node
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.builders import gate_patch
from tests.support.cluster import REPO, Kubectl, eventually

pytestmark = pytest.mark.cluster
SAMPLES = REPO / "samples"
H200 = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}
POOL_TAINT = {"key": "dedicated", "value": "glm-serving", "effect": "NoSchedule"}


@pytest.fixture(autouse=True)
def _operator(operator: object) -> None:
    """Every test here needs the running operator (webhooks and reconciliation)."""


def _sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / name).read_text())
    return doc


def _pods(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.get("pods", namespace=namespace)["items"]
    return [
        p
        for p in items
        if p["metadata"]["labels"].get("glmops.dev/deployment") == name and not p["metadata"].get("deletionTimestamp")
    ]


def _ready(kubectl: Kubectl, namespace: str, name: str, replicas: int) -> list[dict[str, Any]]:
    """Pass the canary gate of each running pod (as tests/integration/test_reconcile.py does) until Ready."""

    def running() -> list[dict[str, Any]]:
        pods = [p for p in _pods(kubectl, namespace, name) if p["status"].get("phase") == "Running"]
        assert len(pods) == replicas, [(p["metadata"]["name"], p["status"].get("conditions")) for p in pods]
        return pods

    pods = eventually(running, timeout=90, what=f"{replicas} running pod(s) of {name}")
    gate = gate_patch()
    for pod in pods:
        args = ["patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status", "--type=strategic"]
        kubectl.run(*args, "-p", gate)

    def ready() -> bool:
        status = kubectl.get("glmd", name, namespace).get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
        assert status.get("readyReplicas") == replicas and conds.get("Ready") == "True", status
        return True

    eventually(ready, timeout=90, what=f"{name} Ready")
    return pods


@pytest.fixture
def registry_objects(kubectl: Kubectl, namespace: str) -> Iterator[None]:
    kubectl.run(
        "create", "secret", "docker-registry", "registry-creds", "-n", namespace,
        "--docker-server=registry.example.com", "--docker-username=u", "--docker-password=p",
    )  # fmt: skip
    kubectl.run("create", "serviceaccount", "glm-serving", "-n", namespace)
    klass = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "glm-inference"},
        "value": 1000000,
        "description": "GLM serving (tests/integration/test_pod_settings.py)",
    }
    kubectl.apply(klass)
    yield
    kubectl.run("delete", "priorityclass", "glm-inference", "--ignore-not-found", "--wait=false", check=False)


def test_private_registry_sample_becomes_ready_with_its_pull_secret_identity_priority_and_requests(
    kubectl: Kubectl, namespace: str, registry_objects: None
) -> None:
    doc = _sample("private-registry.yaml")
    name = doc["metadata"]["name"]
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "private-registry.yaml"))
    (pod,) = _ready(kubectl, namespace, name, 1)
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert spec["serviceAccountName"] == "glm-serving"
    assert (spec["priorityClassName"], spec["priority"]) == ("glm-inference", 1000000)
    assert spec["nodeName"].startswith("gpu-h200-")
    assert pod["metadata"]["labels"]["example.com/cost-center"] == "ml-serving"
    assert pod["metadata"]["labels"]["glmops.dev/serving"] == "true"
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    container = spec["containers"][0]
    assert container["image"] == doc["spec"]["engine"]["image"]
    assert container["resources"]["requests"] == {"cpu": "32", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert container["resources"]["limits"] == {"memory": "1Ti", "nvidia.com/gpu": "8"}


def _pool_node(suffix: str, index: int, zone: str) -> dict[str, Any]:
    node = fake_node(Catalogs.packaged().accelerators.get("H200"), index)
    name = f"glm-pool-{zone}-{suffix}-{index}"
    node["metadata"]["name"] = name
    node["metadata"]["labels"].update(
        {
            "kubernetes.io/hostname": name,
            "pool.example.com/name": "glm-serving",
            "topology.kubernetes.io/zone": zone,
        }
    )
    node["spec"]["taints"].append(POOL_TAINT)
    return node


@pytest.fixture
def pool_nodes(kubectl: Kubectl) -> Iterator[dict[str, list[str]]]:
    """Two tainted, labelled H200 nodes in zone-a and one in zone-b, kept by kwok like the rest of the fleet."""
    suffix = uuid.uuid4().hex[:6]
    nodes = {"zone-a": [_pool_node(suffix, 0, "zone-a"), _pool_node(suffix, 1, "zone-a")]}
    nodes["zone-b"] = [_pool_node(suffix, 0, "zone-b")]
    names = {zone: [n["metadata"]["name"] for n in group] for zone, group in nodes.items()}
    try:
        for group in nodes.values():
            for node in group:
                kubectl.apply(node)

        def ready() -> bool:
            for node_name in (n for group in names.values() for n in group):
                conds = {c["type"]: c["status"] for c in kubectl.get("node", node_name)["status"]["conditions"]}
                assert conds.get("Ready") == "True", (node_name, conds)
            return True

        eventually(ready, timeout=60, what="kwok to mark the pool nodes Ready")
        yield names
    finally:
        for group in names.values():
            for node_name in group:
                kubectl.run("delete", "node", node_name, "--ignore-not-found", "--wait=false", check=False)


def test_tainted_nodes_sample_becomes_ready_only_on_the_tainted_pool_in_its_zone(
    kubectl: Kubectl, namespace: str, pool_nodes: dict[str, list[str]]
) -> None:
    name = _sample("tainted-nodes.yaml")["metadata"]["name"]
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "tainted-nodes.yaml"))
    pods = _ready(kubectl, namespace, name, 2)
    placed = sorted(p["spec"]["nodeName"] for p in pods)
    assert placed == sorted(pool_nodes["zone-a"]), "one replica per zone-a pool node, none elsewhere"
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"pool.example.com/name": "glm-serving"}
        assert {"key": "dedicated", "operator": "Equal", "value": "glm-serving", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
        assert terms == [{"matchExpressions": [zone, H200]}]
        assert (
            spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
        )


def test_the_pool_taint_keeps_pods_without_the_toleration_off_the_pool(
    kubectl: Kubectl, namespace: str, pool_nodes: dict[str, list[str]]
) -> None:
    doc = _sample("tainted-nodes.yaml")
    doc["spec"]["pod"].pop("tolerations")
    doc["spec"]["replicas"] = 1
    kubectl.apply(doc, "-n", namespace)

    def refused() -> str:
        pods = _pods(kubectl, namespace, doc["metadata"]["name"])
        conds = {c["type"]: c for c in (pods[0]["status"].get("conditions") or [])} if pods else {}
        assert conds.get("PodScheduled", {}).get("reason") == "Unschedulable", conds
        return str(conds["PodScheduled"].get("message", ""))

    message = eventually(refused, timeout=60, what="the pool taint to keep the pod unscheduled")
    assert "untolerated taint" in message, message  # the pool nodes match the selector; only the taint stops it


@pytest.mark.parametrize(
    "pod, fragments",
    [
        ({"resources": {"limits": {"nvidia.com/gpu": 4}}},
         ['spec.pod.resources.limits["nvidia.com/gpu"]: 4:', "rule pod/resources", "spec.parallelism"]),
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}},
         ['spec.pod.nodeSelector["nvidia.com/gpu.product"]: NVIDIA-B200:', "no GPU node would match"]),
        ({"labels": {"glmops.dev/serving": "false"}}, ['spec.pod.labels["glmops.dev/serving"]', "your own prefix"]),
        ({"volumes": [{"name": "shm", "emptyDir": {}}]}, ["spec.pod.volumes[0].name: shm:", "Choose another name"]),
    ],
    ids=["gpu-limit", "other-gpu-model", "reserved-label", "glmops-volume"],
)  # fmt: skip
def test_the_api_server_refuses_a_pod_setting_that_conflicts_with_glmops(
    kubectl: Kubectl, namespace: str, pod: dict[str, Any], fragments: list[str]
) -> None:
    obj = B("conflict").tensor(8).vllm("0.32.0").set("spec.pod", pod).build()
    result = kubectl.apply(obj, "-n", namespace, check=False)
    assert result.returncode != 0
    assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} missing from: {result.stderr}"
    assert kubectl.run("get", "glmd", "conflict", "-n", namespace, check=False).returncode != 0


def test_the_crd_schema_refuses_a_bad_label_value_and_explains_the_fields(kubectl: Kubectl, namespace: str) -> None:
    obj = B("badlabel").tensor(8).vllm("0.32.0").set("spec.pod", {"labels": {"team": "not a value"}}).build()
    result = kubectl.apply(obj, "-n", namespace, check=False)
    assert result.returncode != 0 and "spec.pod.labels.team" in result.stderr, result.stderr
    explained = " ".join(kubectl.run("explain", "glmd.spec.pod.imagePullSecrets").stdout.split())
    assert "Only Secrets in the GLMDeployment's own namespace can be named" in explained, explained
