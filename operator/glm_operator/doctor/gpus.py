"""The GPU nodes check: per accelerator type the catalog knows, the nodes its node selector picks and the GPUs they
offer, and the nodes whose labels and allocatable GPUs disagree.

A node's GPUs reach glmops through two vendor components: the device plugin makes them allocatable (the catalog's
`resourceName`, e.g. `nvidia.com/gpu`), and GPU feature discovery (NVIDIA) or the node labeller (AMD) sets the
labels the catalog's `nodeSelector` matches (`nvidia.com/gpu.product`, `amd.com/gpu.device-id`). Either missing
leaves the node unusable: without the labels no GLMDeployment selects it, without the plugin nothing schedules.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

from glm_operator.catalog import Accelerator, AcceleratorCatalog
from glm_operator.doctor.facts import Finding, Level, NodeFact

CHECK = "gpu-nodes"
NAMES_SHOWN = 5
GFD_FIX = (
    "Install NVIDIA GPU feature discovery (the GPU operator's gpu-feature-discovery, or "
    "`helm install gfd nvgfd/gpu-feature-discovery`) for nvidia.com/gpu nodes, or AMD's node labeller "
    "(the AMD GPU operator's or k8s-device-plugin's labeller) for amd.com/gpu nodes"
)
PLUGIN_FIX = (
    "Install the vendor's device plugin (NVIDIA GPU operator or nvidia-device-plugin; AMD GPU operator or "
    "k8s-device-plugin) and check its pod on these nodes"
)


def allocatable(node: NodeFact, resource: str) -> int:
    """Whole devices of `resource` the node offers (0 when absent or unreadable)."""
    try:
        return int(Decimal(node.allocatable.get(resource, "0")))
    except (InvalidOperation, ValueError):
        return 0


def selects(acc: Accelerator, node: NodeFact) -> bool:
    """Whether the accelerator's node selector (each key, any listed value) picks the node."""
    return all(node.labels.get(key) in values for key, values in acc.node_selector.items())


def _names(nodes: Iterable[NodeFact]) -> str:
    names = sorted(n.name for n in nodes)
    more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
    return ", ".join(names[:NAMES_SHOWN]) + more


def _per_type(catalog: AcceleratorCatalog, nodes: tuple[NodeFact, ...]) -> tuple[list[Finding], set[str]]:
    findings: list[Finding] = []
    typed: set[str] = set()
    for acc in catalog.accelerators.values():
        picked = [n for n in nodes if selects(acc, n)]
        if not picked:
            continue
        typed.update(n.name for n in picked)
        gpus = sum(allocatable(n, acc.resource_name) for n in picked)
        empty = [n for n in picked if allocatable(n, acc.resource_name) == 0]
        findings.append(
            Finding(CHECK, Level.OK, f"{acc.name} nodes", str(len(picked)), f"{gpus} {acc.resource_name} allocatable")
        )
        if empty:
            findings.append(
                Finding(
                    CHECK,
                    Level.PROBLEM,
                    f"{acc.name} nodes without allocatable {acc.resource_name}",
                    _names(empty),
                    f"labelled as {acc.name} but offer no {acc.resource_name}: the device plugin is missing or "
                    "not running there",
                    PLUGIN_FIX,
                )
            )
    return findings, typed


def _unlabelled(catalog: AcceleratorCatalog, nodes: tuple[NodeFact, ...], typed: set[str]) -> list[Finding]:
    """Nodes with GPUs allocatable that no accelerator type selects: labels missing, or a product glmops lacks."""
    findings = []
    for resource in sorted({a.resource_name for a in catalog.accelerators.values()}):
        keys = {k for a in catalog.accelerators.values() if a.resource_name == resource for k in a.node_selector}
        loose = [n for n in nodes if n.name not in typed and allocatable(n, resource) > 0]
        unlabelled = [n for n in loose if not keys & set(n.labels)]
        unknown = [n for n in loose if keys & set(n.labels)]
        if unlabelled:
            findings.append(
                Finding(
                    CHECK,
                    Level.PROBLEM,
                    f"nodes with {resource} but no {' or '.join(sorted(keys))} label",
                    _names(unlabelled),
                    "GPU feature discovery (or the node labeller) has not labelled them, so no GLMDeployment "
                    "selects them",
                    GFD_FIX,
                )
            )
        if unknown:
            products = sorted({n.labels[k] for n in unknown for k in keys if k in n.labels})
            findings.append(
                Finding(
                    CHECK,
                    Level.WARNING,
                    f"nodes with {resource} of a GPU type glmops does not know",
                    f"{_names(unknown)} ({', '.join(products)})",
                    "no accelerator type of the catalog selects them, so GLMDeployments cannot use them",
                    "Add the type to a catalog extension (docs/catalog.md) if glmops should deploy there",
                )
            )
    return findings


def check_gpu_nodes(catalog: AcceleratorCatalog, nodes: tuple[NodeFact, ...], truncated: bool) -> list[Finding]:
    """Per accelerator type: its nodes and GPUs; nodes missing their labels or their device plugin."""
    findings, typed = _per_type(catalog, nodes)
    if not typed:
        findings.append(
            Finding(
                CHECK,
                Level.PROBLEM,
                "GPU nodes",
                "none",
                f"no node carries the labels of an accelerator type glmops knows ({', '.join(catalog.names())})",
                "Add GPU nodes with their vendor's GPU operator (device plugin and GPU feature discovery)",
            )
        )
    findings += _unlabelled(catalog, nodes, typed)
    if truncated:
        findings.append(
            Finding(
                CHECK,
                Level.WARNING,
                "nodes",
                f"the first {len(nodes)}",
                "the cluster has more nodes than doctor reads; the counts above cover only these",
            )
        )
    return findings
