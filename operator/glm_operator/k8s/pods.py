"""Serving pods: the readiness-gate condition the canaries decide, written as the kubelet would.

The write is a strategic-merge patch on pods/status carrying only our condition (conditions merge on
`type`, so the kubelet's own conditions stay untouched; a JSON merge patch would replace the whole
list), and it is skipped when the pod already carries the same status, reason and message: as the gate
last watched it, so an unchanged verdict costs no request.
"""

from __future__ import annotations

from typing import Any, Literal

from glm_operator.api.conditions import now_rfc3339
from glm_operator.api.constants import CANARY_CONDITION
from glm_operator.k8s.client import core_v1


def gate_patch(
    pod: dict[str, Any], status: Literal["True", "False"], reason: str, message: str
) -> dict[str, Any] | None:
    """The patch that sets our condition, or None when the pod already says exactly this."""
    current = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == CANARY_CONDITION), None
    )
    if current and (current.get("status"), current.get("reason"), current.get("message")) == (status, reason, message):
        return None
    since = current.get("lastTransitionTime") if current and current.get("status") == status else None
    condition = {
        "type": CANARY_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": since or now_rfc3339(),
    }
    return {"status": {"conditions": [condition]}}


def set_gate(
    namespace: str,
    name: str,
    status: Literal["True", "False"],
    reason: str,
    message: str,
    current: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Write the canary condition on a pod unless it already says this; returns the pod as stored after the write,
    or None when nothing was written. `current`: the pod as last watched (the gate's view); read here when None."""
    api = core_v1()
    if current is None:
        current = api.api_client.sanitize_for_serialization(api.read_namespaced_pod_status(name, namespace))
    patch = gate_patch(current, status, reason, message)
    if patch is None:
        return None
    stored = api.patch_namespaced_pod_status(
        name, namespace, patch, _content_type="application/strategic-merge-patch+json"
    )
    written: dict[str, Any] = api.api_client.sanitize_for_serialization(stored)
    return written


def get_gate(namespace: str, name: str) -> tuple[Literal["True", "False"], str, str] | None:
    """The canary condition a pod carries now, or None (no such pod, or not decided yet)."""
    import kubernetes

    try:
        pod = core_v1().read_namespaced_pod_status(name, namespace)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise
    for c in pod.status.conditions or []:
        if c.type == CANARY_CONDITION and c.status in ("True", "False"):
            return c.status, c.reason or "", c.message or ""
    return None
