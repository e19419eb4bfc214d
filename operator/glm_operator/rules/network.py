"""Admission checks of spec.network: the RDMA resource must name a real device resource, and be useful."""

from __future__ import annotations

import json

from glm_operator.api.network import MULTUS_ANNOTATION
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding, Severity

RESOURCE_FIELD = "spec.network.rdma.resourceName"
EXAMPLE_RESOURCE = "rdma/rdma_shared_device_a"
CHART_VALUE = "network.rdmaResource"
# The fields whose environment variable spec.engine.env may also set (the env entry wins).
ENV_OF_FIELD = (
    ("NCCL_IB_HCA", "spec.network.ibHCAs"),
    ("NCCL_SOCKET_IFNAME", "spec.network.socketInterface"),
    ("GLOO_SOCKET_IFNAME", "spec.network.socketInterface"),
)
# Limits of a qualified name (k8s.io/apimachinery validation): DNS-subdomain prefix, 63-char name.
MAX_PREFIX = 253
MAX_NAME = 63


def _f(rule: str, severity: Severity, field: str, value: object, problem: str, fix: str) -> Finding:
    return Finding(rule=f"network/{rule}", severity=severity, field=field, value=str(value), problem=problem, fix=fix)


def _nodes_per_replica(ctx: Context) -> int:
    per_node = ctx.spec.accelerator.gpus_per_node or ctx.accelerator.gpus_per_node
    return max(1, -(-ctx.spec.parallelism.gpus() // per_node))


def rdma_resource_known(ctx: Context) -> list[Finding]:
    """spec.network.rdma names its device resource, or the operator has a default (network.rdmaResource)."""
    rdma = ctx.spec.network.rdma
    if rdma is None or rdma.resource_name or ctx.catalogs.default_rdma_resource:
        return []
    return [
        _f(
            "rdma-resource",
            "error",
            RESOURCE_FIELD,
            "<unset>",
            "rdma is requested but names no device resource, and the operator has no default",
            f"Set {RESOURCE_FIELD} to the RDMA device plugin's resource (e.g. {EXAMPLE_RESOURCE}; "
            f"`kubectl describe node` lists it under Allocatable), or set the chart value {CHART_VALUE}",
        )
    ]


def _resource_problem(resource: str, gpu_resources: set[str]) -> str | None:
    prefix, _, name = resource.partition("/")
    if not name:
        return "is not an extended resource name (domain/name)"
    if resource in gpu_resources or name == "gpu":
        return "is a GPU resource, not an RDMA device: the pods would ask for GPUs twice and get no RDMA device"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return "is in the kubernetes.io domain, which the API server keeps for its own resources"
    if name.startswith("requests."):
        return "starts with requests., which the API server refuses in a container's resources"
    if len(prefix) > MAX_PREFIX or len(name) > MAX_NAME:
        return f"is too long for a resource name (domain at most {MAX_PREFIX}, name at most {MAX_NAME} characters)"
    return None


def rdma_resource_valid(ctx: Context) -> list[Finding]:
    """The RDMA resource is an extended resource (domain/name) outside kubernetes.io, and not a GPU resource."""
    rdma = ctx.spec.network.rdma
    resource = rdma and (rdma.resource_name or ctx.catalogs.default_rdma_resource)
    if not resource:
        return []
    gpus = {acc.resource_name for acc in ctx.catalogs.accelerators.accelerators.values()}
    problem = _resource_problem(resource, gpus)
    if problem is None:
        return []
    assert rdma is not None
    if rdma.resource_name:
        fix = f"Set {RESOURCE_FIELD} to the RDMA device plugin's resource, e.g. {EXAMPLE_RESOURCE}"
        return [_f("rdma-resource", "error", RESOURCE_FIELD, resource, problem, fix)]
    fix = f"Correct the operator's default (chart value {CHART_VALUE}), or set {RESOURCE_FIELD}"
    return [_f("rdma-resource", "error", RESOURCE_FIELD, f"{resource} (the operator's default)", problem, fix)]


def rdma_spans_nodes(ctx: Context) -> list[Finding]:
    """RDMA on a replica that fits one node does nothing (its GPUs talk over NVLink/xGMI): a warning."""
    if ctx.spec.network.rdma is None or _nodes_per_replica(ctx) > 1:
        return []
    gpus = ctx.spec.parallelism.gpus()
    return [
        _f(
            "rdma-single-node",
            "warning",
            "spec.network.rdma",
            ctx.spec.parallelism.summary(),
            f"a replica of {gpus} GPU(s) fits one {ctx.accelerator.name} node, so no traffic crosses RDMA; "
            "the pods still request the devices, which can keep them from scheduling",
            "Remove spec.network.rdma, or keep it if the replica will grow past one node",
        )
    ]


def env_overrides_network(ctx: Context) -> list[Finding]:
    """A variable in spec.engine.env wins over the spec.network field that would render it: a warning."""
    network = ctx.spec.network
    rendered = {
        "NCCL_IB_HCA": network.ib_hcas,
        "NCCL_SOCKET_IFNAME": network.socket_interface,
        "GLOO_SOCKET_IFNAME": network.socket_interface,
    }
    out = []
    for env, field in ENV_OF_FIELD:
        wanted, set_by_user = rendered[env], ctx.env(env)
        if wanted is not None and set_by_user is not None and set_by_user != wanted:
            out.append(
                _f(
                    "env-override",
                    "warning",
                    ctx.env_field(env),
                    f"{env}={set_by_user}",
                    f"overrides {field}={wanted}: the pods get {set_by_user}",
                    f"Remove {env} from spec.engine.env, or make {field} agree with it",
                )
            )
    return out


def networks_named_once(ctx: Context) -> list[Finding]:
    """spec.network.secondaryNetworks and a Multus annotation in spec.pod.annotations do not both name networks."""
    if not ctx.spec.network.secondary_networks or MULTUS_ANNOTATION not in ctx.spec.pod.annotations:
        return []
    return [
        _f(
            "secondary-networks",
            "error",
            f"spec.pod.annotations[{json.dumps(MULTUS_ANNOTATION)}]",  # as rules/pod_settings.py names a key
            ctx.spec.pod.annotations[MULTUS_ANNOTATION],
            "spec.network.secondaryNetworks renders this annotation too, and only one of them could reach the pods",
            "List the networks in spec.network.secondaryNetworks only and remove the annotation",
        )
    ]


NETWORK_CHECKS = (
    rdma_resource_known,
    rdma_resource_valid,
    rdma_spans_nodes,
    env_overrides_network,
    networks_named_once,
)
