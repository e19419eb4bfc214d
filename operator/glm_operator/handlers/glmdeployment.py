"""GLMDeployment handlers: re-check the rules, render, apply the owned objects, report status."""

from __future__ import annotations

from typing import Any, cast

import kopf
import kubernetes

from glm_operator.api import GROUP, PLURAL, VERSION, GLMDeployment
from glm_operator.api.conditions import set_condition
from glm_operator.handlers.admission import CATALOGS
from glm_operator.handlers.settings import IMAGE_BUILD, OWNED_RESOURCES
from glm_operator.k8s import objects
from glm_operator.k8s.imagebuild import gate_plan
from glm_operator.render.imagestate import ImageGate
from glm_operator.render.plan import Plan, build_plan
from glm_operator.render.status import readiness
from glm_operator.render.workloads import render_objects, serving_selector
from glm_operator.rules.engine import validated_condition

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "LeaderWorkerSet"}


def reconcile_body(body: dict[str, Any], logger: Any) -> dict[str, Any]:
    """Render and apply one GLMDeployment; return the status fields to write."""
    meta, status = body["metadata"], body.get("status") or {}
    generation = meta.get("generation")
    conditions = list(status.get("conditions") or [])
    verdict = validated_condition(body, CATALOGS.get())
    conditions = set_condition(conditions, "Validated", verdict.status, verdict.reason, verdict.message, generation)
    out: dict[str, Any] = {
        "observedGeneration": generation,
        "remediations": verdict.remediations,
        "selector": serving_selector(meta["name"]),
    }
    if verdict.spec is not None:
        out |= {"parallelism": verdict.spec.parallelism.summary(), "gpusPerReplica": verdict.spec.parallelism.gpus()}
    if verdict.status == "False":
        conditions = set_condition(
            conditions,
            "Progressing",
            "False",
            "Blocked",
            "not deployed: the rules refuse this spec (see Validated)",
            generation,
        )
        return out | {"conditions": conditions}
    glmd = GLMDeployment.model_validate(body)
    plan, gate = gate_plan(build_plan(glmd, CATALOGS.get()), CATALOGS.get(), IMAGE_BUILD)
    if gate is not None:
        conditions = set_condition(conditions, "ImageBuilding", gate.status, gate.reason, gate.message, generation)
        if gate.image_ref is None:
            return out | _waiting_for_image(plan, gate, conditions, generation)
    owner = {"apiVersion": glmd.api_version, "kind": glmd.kind, "name": meta["name"], "uid": meta["uid"]}
    rendered = render_objects(plan, glmd, owner, objects.lws_available())
    try:
        applied = [objects.apply(o) for o in rendered]
        removed = objects.prune(plan.namespace, plan.name, {(o["kind"], o["metadata"]["name"]) for o in rendered})
    except kubernetes.client.ApiException as err:
        conditions = set_condition(
            conditions,
            "Progressing",
            "False",
            "ApplyFailed",
            f"{err.status} {err.reason}: {err.body}"[:1000],
            generation,
        )
        raise kopf.TemporaryError(f"applying owned objects failed: {err.reason}", delay=15) from err
    if removed:
        logger.info(f"removed objects the plan no longer renders: {', '.join(removed)}")
    workloads = [a for a in applied if a["kind"] in WORKLOAD_KINDS]
    kind = workloads[0]["kind"] if workloads else "none"
    conditions = set_condition(
        conditions,
        "Progressing",
        "True",
        "Applied",
        f"{kind} for {plan.replicas} replica(s) of {plan.nodes_per_replica} node(s); image {plan.image}",
        generation,
    )
    notes = "; ".join(plan.notes)
    conditions = set_condition(
        conditions,
        "Degraded",
        "True" if notes else "False",
        "PatchesNotLoaded" if notes else "AsPlanned",
        notes or "no known degradation",
        generation,
    )
    return out | {
        "plan": plan.summary(),
        "replicas": plan.replicas,
        "conditions": conditions,
        **_ready_fields(workloads, plan.replicas, conditions, generation),
    }


def _waiting_for_image(
    plan: Plan, gate: ImageGate, conditions: list[dict[str, Any]], generation: int | None
) -> dict[str, Any]:
    """Status while the patched image is not built: nothing is rendered until its digest is known."""
    reason = "ImageBuildFailed" if gate.failed else "WaitingForImage"
    conditions = set_condition(conditions, "Progressing", "False", reason, gate.message, generation)
    conditions = set_condition(
        conditions, "Ready", "False", reason, f"no workload until {plan.image} is built and pinned", generation
    )
    return {"plan": plan.summary(), "replicas": plan.replicas, "conditions": conditions}


def _ready_fields(
    workloads: list[dict[str, Any]], wanted: int, conditions: list[dict[str, Any]], generation: int | None
) -> dict[str, Any]:
    state = readiness(workloads)
    status, reason, message = state.condition(wanted)
    return {
        "readyReplicas": state.ready,
        "conditions": set_condition(conditions, "Ready", status, reason, message, generation),
    }


@kopf.on.resume(GROUP, VERSION, PLURAL, id="glmops-reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="glmops-reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="glmops-reconcile", field="spec")
def reconcile(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    """Apply the rendered workload, Service, PDB and canary ConfigMap; record plan and conditions."""
    result = reconcile_body(dict(body), logger)
    patch.status.update(result)
    kopf.info(body, reason="Reconciled", message=_describe(result))


def _describe(status: dict[str, Any]) -> str:
    conds = {c["type"]: c for c in status.get("conditions", [])}
    progressing = conds.get("Progressing", {})
    return f"{progressing.get('reason', '')}: {progressing.get('message', '')}"


def _parent(meta: kopf.Meta) -> tuple[str, str] | None:
    name = (meta.get("labels") or {}).get("glmops.dev/deployment")
    namespace = meta.get("namespace")
    return (namespace, name) if name and namespace else None


def refresh(namespace: str, name: str, logger: Any) -> dict[str, Any] | None:
    """Reconcile one GLMDeployment outside its own events; write its status if it changed; return its body."""
    body = objects.get_glmdeployment(namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None  # the owner is going away; garbage collection removes the rest
    before = body.get("status") or {}
    status = reconcile_body(body, logger)
    changed = {k: v for k, v in status.items() if before.get(k) != v}
    if changed:
        objects.patch_glmdeployment_status(namespace, name, {**status})
    return body


def _owned_event(type: str, meta: kopf.Meta, logger: kopf.Logger, **_: Any) -> None:
    """An owned object changed or vanished: restore what drifted and refresh readiness."""
    parent = _parent(meta)
    body = refresh(*parent, logger) if parent else None
    if body is not None and type == "DELETED":
        kopf.info(
            kopf.Body(cast(kopf.RawBody, body)),
            reason="Restored",
            message=f"re-created {meta.get('name')} after it was deleted",
        )


for _resource in OWNED_RESOURCES:
    kopf.on.event(*_resource, id=f"glmops-owned-{_resource[-1]}", labels={"app.kubernetes.io/managed-by": "glmops"})(
        _owned_event
    )
