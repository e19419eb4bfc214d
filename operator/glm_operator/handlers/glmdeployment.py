"""GLMDeployment handlers: the registrations that record what the watches see and ask for refreshes.

What the planner reads (the GLMDeployment, its owned objects) comes from the watches, not from the API server:
kopf's indexing handlers below record every object's newest copy in `Runtime.observed` before any other handler
runs (kopf starts the handlers only once every indexed kind has been listed). The refresh itself, its work queue,
retries and Events are control/refreshes.py.
"""

from __future__ import annotations

from typing import Any

import kopf

from glm_operator.api import GROUP, KIND, PLURAL, VERSION
from glm_operator.api.constants import LABEL_DEPLOYMENT, MANAGED
from glm_operator.control import refreshes
from glm_operator.control.runtime import runtime
from glm_operator.handlers.settings import OWNED_RESOURCES
from glm_operator.k8s.metrics import RECONCILE_SECONDS, forget_deployment, record_deployment, timed


@kopf.on.resume(GROUP, VERSION, PLURAL, id="glmops-reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="glmops-reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="glmops-reconcile", field="spec")
async def reconcile(body: kopf.Body, logger: kopf.Logger, memo: kopf.Memo, **_: Any) -> None:
    """Apply the rendered workload, Service, PDB and canary ConfigMap; record plan and conditions."""
    context = runtime(memo)
    context.observed.record(body, KIND)  # what kopf hands in is at least as new as what the watch recorded
    with timed(RECONCILE_SECONDS):
        await refreshes.reconcile(context, body, logger)


@kopf.index(GROUP, VERSION, PLURAL, id="glmops-observe")
async def observe_glmdeployment(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Record the newest copy of a GLMDeployment (kopf runs indexing before every other handler), and its gauges."""
    runtime(memo).observed.record(body, KIND)
    record_deployment(body)


@kopf.on.event(GROUP, VERSION, PLURAL, id="glmops-forget")
async def forget_glmdeployment(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted GLMDeployment's copy goes (its owned objects go by garbage collection, and their own events)."""
    if type == "DELETED":
        runtime(memo).observed.forget_object(body, KIND)
        forget_deployment(str(body.metadata.get("namespace")), str(body.metadata.get("name")))


async def _observe_owned(body: kopf.Body, resource: kopf.Resource, memo: kopf.Memo, **_: Any) -> None:
    """Record the newest copy of an owned object (before its event handler asks for a refresh)."""
    runtime(memo).observed.record(_typed(body, resource))


def _typed(body: kopf.Body, resource: kopf.Resource) -> dict[str, Any]:
    """The body with its apiVersion and kind (watch events carry them; kopf adds them to listed items)."""
    api_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
    return {"apiVersion": api_version, "kind": resource.kind, **body}


def _parent(meta: kopf.Meta) -> tuple[str, str] | None:
    name = (meta.get("labels") or {}).get(LABEL_DEPLOYMENT)
    namespace = meta.get("namespace")
    return (namespace, name) if name and namespace else None


async def _owned_event(
    type: str, body: kopf.Body, resource: kopf.Resource, logger: kopf.Logger, memo: kopf.Memo, **_: Any
) -> None:
    """An owned object changed or vanished: restore what drifted and refresh readiness (bursts coalesced)."""
    context = runtime(memo)
    parent = _parent(body.metadata)
    if type == "DELETED":
        context.observed.forget_object(_typed(body, resource))
        if parent is not None:
            context.confirm_owner.add(parent)
    if parent is None:
        return
    refreshes.request_refresh(
        context, parent, logger, deleted=(str(body.metadata.get("name")),) if type == "DELETED" else ()
    )


@kopf.on.cleanup(id="glmops-refresh-retries")
async def stop_retries(memo: kopf.Memo, **_: Any) -> None:
    """Schedule no more refreshes once the operator is stopping."""
    runtime(memo).retries.pause()


for _resource in OWNED_RESOURCES:
    kopf.index(*_resource, id=f"glmops-observe-{_resource[-1]}", labels=MANAGED)(_observe_owned)
    kopf.on.event(*_resource, id=f"glmops-owned-{_resource[-1]}", labels=MANAGED)(_owned_event)
