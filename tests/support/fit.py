"""Do these pods fit on these nodes? The scheduler's filters the samples and the fleet use, offline.

Checks what kube-scheduler's filters check for the objects glmops renders: node selectors, required node affinity,
taints against tolerations (NoSchedule and NoExecute), and requests against what is left of each node's
allocatable. Pod (anti-)affinity and topology spreading are not modelled (the samples ask for them only as
preferences). Pods are placed first-fit in the order given: a placement exists, which is not the one kube-scheduler
picks; `make demo` holds the fleet to the real scheduler (no pod of the demo may stay Pending there).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from glm_operator.api.pod import parse_quantity

JsonDict = dict[str, Any]
HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass
class Placement:
    """Where each pod went, and the pods no node could take with the reason each node gave."""

    bound: dict[str, str] = field(default_factory=dict)
    unschedulable: dict[str, list[str]] = field(default_factory=dict)


def pods_of(objects: Iterable[JsonDict]) -> Iterator[tuple[str, JsonDict]]:
    """(name, pod spec) for every pod the rendered workloads would create."""
    for obj in objects:
        kind, name = obj.get("kind"), obj["metadata"]["name"]
        if kind in ("Deployment", "StatefulSet"):
            for i in range(obj["spec"].get("replicas", 1)):
                yield f"{kind}/{name}-{i}", obj["spec"]["template"]["spec"]
        elif kind == "Job":
            yield f"Job/{name}", obj["spec"]["template"]["spec"]
        elif kind == "LeaderWorkerSet":
            tmpl = obj["spec"]["leaderWorkerTemplate"]
            size = tmpl.get("size", 1)
            for i in range(obj["spec"].get("replicas", 1)):
                yield f"LWS/{name}-{i}", tmpl.get("leaderTemplate", tmpl["workerTemplate"])["spec"]
                for w in range(1, size):
                    yield f"LWS/{name}-{i}-{w}", tmpl["workerTemplate"]["spec"]


def pod_requests(spec: JsonDict) -> dict[str, Decimal]:
    """What a pod asks for: its containers' sum, or an init container's largest ask if larger (requests, or limits)."""

    def asks(container: JsonDict) -> dict[str, Decimal]:
        res = container.get("resources", {})
        merged = {**res.get("limits", {}), **res.get("requests", {})}
        return {k: _quantity(v) for k, v in merged.items()}

    total: dict[str, Decimal] = {"pods": Decimal(1)}
    for c in spec.get("containers", []):
        for k, v in asks(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers", []):
        for k, v in asks(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def _quantity(value: Any) -> Decimal:
    parsed = parse_quantity(value)
    if parsed is None:
        raise ValueError(f"not a quantity: {value!r}")
    return parsed


def why_not(spec: JsonDict, node: JsonDict, free: dict[str, Decimal]) -> str | None:
    """Why the pod cannot go to this node now, or None when it can."""
    labels = node["metadata"].get("labels", {})
    for key, value in spec.get("nodeSelector", {}).items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(_term_matches(t, labels) for t in required.get("nodeSelectorTerms", [])):
        return "required node affinity"
    for taint in node.get("spec", {}).get("taints", []):
        if taint["effect"] in HARD_EFFECTS and not any(_tolerates(t, taint) for t in spec.get("tolerations", [])):
            return f"untolerated taint {taint['key']}"
    for resource, amount in pod_requests(spec).items():
        if amount > free.get(resource, Decimal(0)):
            return f"insufficient {resource}"
    return None


def _term_matches(term: JsonDict, labels: dict[str, str]) -> bool:
    return all(_expression_matches(expr, labels) for expr in term.get("matchExpressions", []))


def _expression_matches(expr: JsonDict, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op in ("Exists", "DoesNotExist"):
        return (key in labels) == (op == "Exists")
    if op in ("In", "NotIn"):
        return (labels.get(key) in values) == (op == "In")
    if key not in labels:
        return False
    difference = int(labels[key]) - int(values[0])
    return difference > 0 if op == "Gt" else difference < 0


def _tolerates(toleration: JsonDict, taint: JsonDict) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", "")


def place(pods: Iterable[tuple[str, JsonDict]], nodes: list[JsonDict]) -> Placement:
    """First-fit placement of the pods on the nodes, subtracting each placed pod's requests."""
    free = {n["metadata"]["name"]: {k: _quantity(v) for k, v in n["status"]["allocatable"].items()} for n in nodes}
    placement = Placement()
    for name, spec in pods:
        reasons = []
        for node in nodes:
            node_name = node["metadata"]["name"]
            reason = why_not(spec, node, free[node_name])
            if reason is None:
                for resource, amount in pod_requests(spec).items():
                    free[node_name][resource] -= amount
                placement.bound[name] = node_name
                break
            reasons.append(f"{node_name}: {reason}")
        else:
            placement.unschedulable[name] = reasons
    return placement
