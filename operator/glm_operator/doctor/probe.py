"""The GLMDeployment doctor sends as a server-side dry run, and where: only the operator's webhook can refuse it.

The probe puts GLM-5.3 on one H200 GPU with `remediation: Reject`, which admission always refuses naming a rule
(the weights do not fit: feasibility/memory; `tests/unit/test_doctor_checks.py` holds it to `rules.engine.admit`).
A refusal that names a rule proves the API server called the webhook and the webhook answered; an admission proves
neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm_operator.api import API_VERSION, KIND, GLMDeployment
from glm_operator.catalog import AcceleratorCatalog

PROBE_NAME = "glmops-doctor-probe"
DEFAULT_PROBE_NAMESPACE = "default"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
RULE_MARK = "(rule "


def probe_object(namespace: str) -> dict[str, Any]:
    """A GLMDeployment admission refuses (never stored: it is sent with dryRun=All)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {
            "model": {"name": "zai-org/GLM-5.3"},
            "accelerator": {"type": "H200"},
            "parallelism": {"expert": True},
            "validation": {"remediation": "Reject"},
        },
    }


def probe_namespace(namespace_selector: Mapping[str, Any] | None) -> str:
    """A namespace the webhook is asked for: the first one a `kubernetes.io/metadata.name In` selector names
    (the chart's selector under `watchNamespaces`), else `default`."""
    for expr in (namespace_selector or {}).get("matchExpressions") or []:
        if expr.get("key") == NAMESPACE_NAME_LABEL and expr.get("operator") == "In" and expr.get("values"):
            return str(expr["values"][0])
    labels = (namespace_selector or {}).get("matchLabels") or {}
    if NAMESPACE_NAME_LABEL in labels:
        return str(labels[NAMESPACE_NAME_LABEL])
    return DEFAULT_PROBE_NAMESPACE


def names_a_rule(message: str) -> bool:
    return RULE_MARK in message


def nodes_per_replica(obj: Mapping[str, Any], catalog: AcceleratorCatalog) -> int:
    """How many nodes one replica of a stored GLMDeployment spans (1 when it cannot be read: not multi-node)."""
    try:
        spec = GLMDeployment.model_validate(obj).spec
        per_node = spec.accelerator.gpus_per_node or catalog.get(spec.accelerator.type).gpus_per_node
    except (ValueError, KeyError):
        plan = (obj.get("status") or {}).get("plan") or {}
        nodes = plan.get("nodesPerReplica")
        return nodes if isinstance(nodes, int) and nodes > 0 else 1
    return max(1, -(-spec.parallelism.gpus() // per_node))
