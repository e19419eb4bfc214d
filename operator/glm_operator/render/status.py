"""Serving status of a GLMDeployment from its workloads: ready replicas and the Ready/Degraded verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from glm_operator.api.constants import Reason


@dataclass(frozen=True)
class Readiness:
    replicas: int
    ready: int
    updated: int

    def condition(self, wanted: int) -> tuple[Literal["True", "False"], str, str]:
        """(status, reason, message) of the Ready condition."""
        if wanted == 0:
            return "True", Reason.SCALED_TO_ZERO, "no replicas requested"
        if self.ready >= wanted:
            return "True", Reason.ALL_REPLICAS_READY, f"{self.ready}/{wanted} replicas passed their canaries and serve"
        if self.ready > 0:
            return "False", Reason.PARTIALLY_READY, f"{self.ready}/{wanted} replicas serve"
        return "False", Reason.NO_REPLICA_READY, f"0/{wanted} replicas serve (loading, or canaries not passed)"


def readiness(workloads: list[dict[str, Any]]) -> Readiness:
    """Ready replicas across the workloads of one GLMDeployment (a replica is a pod or a node group)."""
    replicas = ready = updated = 0
    for w in workloads:
        status = w.get("status") or {}
        if w["kind"] == "Deployment" or w["kind"] == "LeaderWorkerSet":
            replicas += int(status.get("replicas") or 0)
            ready += int(status.get("readyReplicas") or 0)
            updated += int(status.get("updatedReplicas") or 0)
        elif w["kind"] == "StatefulSet":
            size = int((w.get("spec") or {}).get("replicas") or 0)
            replicas += 1
            whole = size > 0 and int(status.get("readyReplicas") or 0) >= size
            ready += int(whole)
            updated += int(int(status.get("updatedReplicas") or 0) >= size)
    return Readiness(replicas, ready, updated)
