"""What spec.network adds to the serving pods: RDMA devices, IPC_LOCK, the Multus annotation, NCCL/Gloo env.

Every pod of a replica gets the same additions (Deployment pods, LeaderWorkerSet leader and workers, every
StatefulSet pod): a collective needs all its ranks on the same fabric.

Environment names, with where they are read:
- NCCL_IB_DISABLE, NCCL_IB_HCA, NCCL_SOCKET_IFNAME: NCCL's own (NVIDIA NCCL user guide, "Environment
  Variables"). RCCL, the ROCm fork vLLM uses on MI300X/MI355X, reads the same NCCL_* names, so one
  rendering serves both platforms.
- GLOO_SOCKET_IFNAME: read by PyTorch's Gloo backend, which vLLM uses for its CPU-side process groups;
  vLLM's troubleshooting guide (docs/usage/troubleshooting.md, "Incorrect network setup") tells users to
  set it together with NCCL_SOCKET_IFNAME. It is not one of vLLM's own variables (vllm/envs.py).
- IPC_LOCK: vLLM's troubleshooting guide ("NCCL error: unhandled system error during ncclCommInitRank")
  names a missing IPC_LOCK capability as a cause of GPUDirect RDMA failing: RDMA registers (pins) memory.
A variable the user sets in spec.engine.env wins: it is never rendered twice.
"""

from __future__ import annotations

from typing import Any

from glm_operator.api.network import MULTUS_ANNOTATION, NetworkSpec

__all__ = ["MULTUS_ANNOTATION", "IPC_LOCK"]
IPC_LOCK = "IPC_LOCK"


def rdma_resource(network: NetworkSpec, default: str | None) -> str | None:
    """The RDMA resource the pods request: the spec's, else the operator's default; None without rdma."""
    if network.rdma is None:
        return None
    return network.rdma.resource_name or default


def added_capabilities(network: NetworkSpec) -> list[str]:
    """Linux capabilities the vLLM container needs for spec.network (to merge into its securityContext)."""
    return [IPC_LOCK] if network.rdma is not None else []


def pod_annotations(network: NetworkSpec) -> dict[str, str]:
    """The Multus annotation selecting the secondary networks, when any are asked for."""
    if not network.secondary_networks:
        return {}
    return {MULTUS_ANNOTATION: ",".join(network.secondary_networks)}


def network_env(network: NetworkSpec, taken: set[str]) -> list[dict[str, str]]:
    """NCCL/Gloo environment for spec.network, leaving out every name in `taken` (the user's wins)."""
    wanted: list[tuple[str, str]] = []
    if network.rdma is not None:
        wanted.append(("NCCL_IB_DISABLE", "0"))
    if network.ib_hcas:
        wanted.append(("NCCL_IB_HCA", network.ib_hcas))
    if network.socket_interface:
        wanted += [("NCCL_SOCKET_IFNAME", network.socket_interface), ("GLOO_SOCKET_IFNAME", network.socket_interface)]
    return [{"name": name, "value": value} for name, value in wanted if name not in taken]


def add_to_container(container: dict[str, Any], network: NetworkSpec, resource: str | None) -> None:
    """Add the RDMA devices (requests and limits) to an already built container.

    The capabilities (added_capabilities) go into the container's securityContext where it is made
    (render/security.py), so that everything else stays dropped."""
    if network.rdma is not None and resource:
        resources = container.setdefault("resources", {})
        for kind in ("requests", "limits"):
            resources.setdefault(kind, {})[resource] = str(network.rdma.count)
