"""Fake GPU nodes for the local control plane, built from the accelerator catalog.

kwok keeps these Node objects alive (heartbeats, leases, pod lifecycle); no kubelet runs. Each node
carries the capacity and labels the vendors' GPU operators would set on a real node of its type, so
scheduling, node selectors and tolerations behave as they do on a real cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from glm_operator.catalog import Accelerator, AcceleratorCatalog

KWOK_MANAGED_LABEL = "glmops.dev/fake-node"
DEFAULT_NODES_PER_TYPE = 2
# GPU nodes of multi-node clusters carry InfiniBand/RoCE NICs, advertised by NVIDIA's network operator through
# its shared RDMA device plugin under this name (its rdmaHcaMax caps how many pods share a device).
FAKE_RDMA_RESOURCE = "rdma/rdma_shared_device_a"
FAKE_RDMA_DEVICES = "63"
# NVL72 jobs span trays, so the 4-GPU Grace-Blackwell types get enough trays for DP8/DP16 tests.
NODES_PER_TYPE_OVERRIDES = {"GB200": 4, "GB300": 4}
# Cloud providers label every node with its zone; the fake nodes alternate between two, so zone affinity and
# topology spreading meet the labels they do on a real cluster.
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONES = ("zone-a", "zone-b")


@dataclass(frozen=True)
class NodePool:
    """Nodes set aside for one workload: labelled, tainted, in one zone (samples/tainted-nodes.yaml)."""

    name: str
    accelerator: str
    nodes: int
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]
    zone: str


@dataclass(frozen=True)
class FleetShape:
    """How many fake nodes of each accelerator type a cluster gets, and any dedicated pools beside them."""

    nodes_per_type: dict[str, int] = field(default_factory=dict)
    pools: tuple[NodePool, ...] = ()


# The tests' fleet: two nodes of each type (four 4-GPU trays), so placement across nodes is easy to assert.
TEST_FLEET = FleetShape(nodes_per_type=dict(NODES_PER_TYPE_OVERRIDES))
# The demo's fleet runs every sample at once (make demo applies them all): six H200 nodes (the baseline, the
# private-registry, cached-model and PP8 samples, and the RDMA sample's two-node replica), four RTX PRO 6000 nodes
# (two PP2 replicas of two nodes each) and the dedicated H200 pool the tainted-nodes sample asks for by label,
# toleration and zone. tests/unit/test_demo_fleet.py packs every admitted sample onto it.
DEMO_FLEET = FleetShape(
    nodes_per_type={**NODES_PER_TYPE_OVERRIDES, "H200": 6, "RTX-PRO-6000": 4},
    pools=(
        NodePool(
            name="glm-serving",
            accelerator="H200",
            nodes=2,
            labels={"pool.example.com/name": "glm-serving"},
            taints=({"key": "dedicated", "value": "glm-serving", "effect": "NoSchedule"},),
            zone="zone-a",
        ),
    ),
)
FLEETS = {"test": TEST_FLEET, "demo": DEMO_FLEET}


def gpu_taint(acc: Accelerator) -> dict[str, str]:
    """The taint GPU node pools commonly carry, so only pods that ask for GPUs land there."""
    return {"key": acc.resource_name, "value": "present", "effect": "NoSchedule"}


def _node_name(acc: Accelerator, index: int, pool: str = "") -> str:
    kind = re.sub(r"[^a-z0-9-]", "-", acc.name.lower())
    return f"gpu-{kind}-{pool}-{index}" if pool else f"gpu-{kind}-{index}"


def _vendor_labels(acc: Accelerator) -> dict[str, str]:
    labels = {key: values[0] for key, values in acc.node_selector.items()}
    labels.update(acc.fleet_labels)
    if acc.vendor == "nvidia":
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(acc.gpus_per_node),
                "nvidia.com/gpu.memory": str(round(acc.memory_gib * 1024)),
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.sharing-strategy": "none",
            }
        )
    else:
        labels["amd.com/gpu.vram"] = f"{round(acc.memory_gib)}G"
    return labels


def fake_node(acc: Accelerator, index: int, pool: NodePool | None = None) -> dict[str, Any]:
    """One kwok-managed Node of the given accelerator type, in a dedicated pool when one is given."""
    name = _node_name(acc, index, pool.name if pool else "")
    gpus = str(acc.gpus_per_node)
    resources = {
        "cpu": "128",
        "memory": "1536Gi",
        "ephemeral-storage": "8Ti",
        "pods": "110",
        acc.resource_name: gpus,
        FAKE_RDMA_RESOURCE: FAKE_RDMA_DEVICES,
    }
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": acc.cpu_arch,
        "node.kubernetes.io/instance-type": f"fake-{acc.name.lower()}",
        "type": "kwok",
        KWOK_MANAGED_LABEL: "true",
        ZONE_LABEL: pool.zone if pool else ZONES[index % len(ZONES)],
        "glmops.dev/accelerator": acc.name,
        **_vendor_labels(acc),
        **(pool.labels if pool else {}),
    }
    if acc.multi_node_nvlink:
        labels["nvidia.com/gpu.clique"] = f"fake-nvl72-{acc.name.lower()}.0"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [gpu_taint(acc), *(dict(t) for t in (pool.taints if pool else ()))]},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def cpu_node(index: int) -> dict[str, Any]:
    """An untainted node without GPUs, where the operator and other system pods run."""
    name = f"cpu-{index}"
    resources = {"cpu": "32", "memory": "128Gi", "ephemeral-storage": "1Ti", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "fake-cpu",
                ZONE_LABEL: ZONES[index % len(ZONES)],
                "type": "kwok",
                KWOK_MANAGED_LABEL: "true",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
        },
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


CPU_NODES = 2


def default_fleet(
    catalog: AcceleratorCatalog, nodes_per_type: int | None = None, shape: FleetShape = TEST_FLEET
) -> list[dict[str, Any]]:
    """Nodes for every accelerator in the catalog, the shape's dedicated pools, and untainted CPU nodes."""
    nodes: list[dict[str, Any]] = [cpu_node(i) for i in range(CPU_NODES)]
    for acc in catalog.accelerators.values():
        count = nodes_per_type or shape.nodes_per_type.get(acc.name, DEFAULT_NODES_PER_TYPE)
        nodes.extend(fake_node(acc, i) for i in range(count))
    for pool in shape.pools:
        acc = catalog.get(pool.accelerator)
        nodes.extend(fake_node(acc, i, pool) for i in range(pool.nodes))
    return nodes
