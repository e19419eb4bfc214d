"""spec.network of a GLMDeployment: RDMA devices, secondary networks and the NCCL/Gloo interfaces.

Multi-node replicas (a LeaderWorkerSet group, or one StatefulSet per replica) move activations between
nodes every step; on InfiniBand or RoCE clusters that traffic needs the RDMA devices a device plugin
advertises (NVIDIA's network operator, an SR-IOV device plugin) and the NCCL environment that points at
them. Descriptions are what `kubectl explain glmdeployment.spec.network` prints.

The models live apart from v1alpha1.py, which imports them; they share its wire conventions (camelCase
names, unknown fields refused) through their own base, since v1alpha1's would be a circular import.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

# An extended resource name as the API server accepts it: a DNS-subdomain prefix, a slash, a name.
# (The rules check the finer points: lengths, the kubernetes.io domain, GPU resources.)
EXTENDED_RESOURCE = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
# A Multus network selection in its short form: [namespace/]name[@interface].
NETWORK_SELECTION = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?$"
# The annotation Multus reads a pod's secondary networks from (spec.network.secondaryNetworks renders it).
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# A Linux interface name (at most 15 characters).
INTERFACE_NAME = r"^[A-Za-z0-9_.:-]{1,15}$"
# NCCL_IB_HCA's own syntax: an optional ^ (exclude) and = (exact), then device[:port] entries.
IB_HCA_LIST = r"^\^?=?[A-Za-z0-9_.-]+(:[0-9]+)?(,[A-Za-z0-9_.-]+(:[0-9]+)?)*$"
NetworkSelection = Annotated[str, StringConstraints(max_length=320, pattern=NETWORK_SELECTION)]
MAX_RDMA_PER_POD = 16
MAX_SECONDARY_NETWORKS = 8


class _NetworkModel(BaseModel):
    """camelCase on the wire, unknown fields refused: the conventions of the rest of the spec."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class RDMASpec(_NetworkModel):
    """RDMA devices requested by every pod of a replica (leader and workers)."""

    resource_name: str | None = Field(
        default=None,
        max_length=316,
        pattern=EXTENDED_RESOURCE,
        description=(
            "Extended resource of the RDMA device plugin, e.g. rdma/rdma_shared_device_a (NVIDIA network "
            "operator, shared RDMA device plugin) or an SR-IOV resource such as nvidia.com/cx7_sriov. "
            "Unset means the operator's default (the chart value network.rdmaResource); admission refuses "
            "rdma when neither is set."
        ),
    )
    count: int = Field(
        default=1,
        ge=1,
        le=MAX_RDMA_PER_POD,
        description=(
            "Devices per pod, requested and limited. 1 for a shared RDMA device; one per GPU (usually 8) "
            "for SR-IOV virtual functions."
        ),
    )


class NetworkSpec(_NetworkModel):
    """How the pods of a multi-node replica reach each other. Empty: the pod network only."""

    rdma: RDMASpec | None = Field(
        default=None,
        description=(
            "Request RDMA (InfiniBand/RoCE) devices on every pod of a replica, add the IPC_LOCK capability "
            "(RDMA pins memory) and set NCCL_IB_DISABLE=0. Unset: no RDMA. It does nothing for a replica "
            "that fits one node (admission warns)."
        ),
    )
    secondary_networks: list[NetworkSelection] = Field(
        default_factory=list,
        max_length=MAX_SECONDARY_NETWORKS,
        description=(
            "Multus NetworkAttachmentDefinitions attached to every pod (the k8s.v1.cni.cncf.io/networks "
            "annotation), each as [namespace/]name[@interface], for clusters that attach the "
            "InfiniBand/RoCE NICs as secondary networks."
        ),
    )
    ib_hcas: str | None = Field(
        default=None,
        alias="ibHCAs",
        max_length=1024,
        pattern=IB_HCA_LIST,
        description=(
            "The InfiniBand/RoCE adapters NCCL (and RCCL on ROCm) may use, in NCCL_IB_HCA's syntax, e.g. "
            "mlx5_0,mlx5_1 or =mlx5_0:1 or ^mlx5_4. Rendered as NCCL_IB_HCA."
        ),
    )
    socket_interface: str | None = Field(
        default=None,
        pattern=INTERFACE_NAME,
        description=(
            "The network interface NCCL/RCCL bootstraps over and Gloo (vLLM's CPU-side groups) uses, e.g. "
            "net1 for the first Multus network. Rendered as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME."
        ),
    )
