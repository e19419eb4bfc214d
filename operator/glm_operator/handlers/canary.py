"""The readiness gate's registrations: a task per serving pod (control/gate_loop.py) runs the canaries.

The tasks follow the pod watch (`kopf.on.event`), not kopf daemons: a daemon keeps its pod with a finalizer,
which would stall every pod, scale-down and namespace deletion while the operator is down or uninstalled.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

import kopf

from glm_operator.api.constants import LABEL_DEPLOYMENT, SERVING
from glm_operator.canary.supervisor import PodTasks
from glm_operator.control.gate_loop import gate_tasks
from glm_operator.control.peering import follow_peering, peering_changed
from glm_operator.control.runtime import runtime
from glm_operator.k8s.metrics import forget_pod, record_gate
from glm_operator.render.canary_state import gate_condition


@kopf.on.startup(id="glmops-canary-gates")
async def start_gates(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Start the registry of per-pod gate tasks, and follow kopf's peering so they pause when kopf does."""
    memo.gates = gate_tasks(functools.partial(runtime, memo))  # the runtime as stored when each task starts
    if not settings.peering.standalone:
        memo.gates_peering = asyncio.create_task(
            follow_peering(memo.gates, settings, functools.partial(peering_changed, memo))
        )


@kopf.on.cleanup(id="glmops-canary-gates")
async def stop_gates(memo: kopf.Memo, **_: Any) -> None:
    """Stop every gate task on shutdown (the pods keep their last gate; nothing blocks their deletion)."""
    follower = getattr(memo, "gates_peering", None)
    if follower is not None:
        follower.cancel()
    gates = getattr(memo, "gates", None)
    if isinstance(gates, PodTasks):
        await gates.close()


@kopf.on.event("v1", "pods", id="glmops-canary", labels=SERVING)
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """Hand a serving pod's watch event to its gate task (no finalizer, no patch of the pod itself)."""
    gates = getattr(memo, "gates", None)
    if isinstance(gates, PodTasks):
        gates.observe(event.get("type"), cast(dict[str, Any], event["object"]))
    body = cast(dict[str, Any], event["object"])
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    if event.get("type") == "DELETED":
        forget_pod(namespace, name)
    elif parent := (meta.get("labels") or {}).get(LABEL_DEPLOYMENT):
        record_gate(namespace, str(parent), name, gate_condition(body))
