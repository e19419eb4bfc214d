"""GLMDeployment handlers: gather what was observed, call the planner, apply its outcome, write its status."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

import kopf
import kubernetes

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.constants import LABEL_DEPLOYMENT, MANAGED
from glm_operator.handlers.detached import detached_context
from glm_operator.handlers.runtime import Runtime, runtime
from glm_operator.handlers.settings import OWNED_RESOURCES
from glm_operator.k8s import objects
from glm_operator.k8s.client import API_UNREACHABLE
from glm_operator.k8s.imagebuild import ensure_glmimage
from glm_operator.planner.deployment import Observed, Outcome, image_request, plan

API_RETRY_S = 5  # an API server restart takes seconds; kopf's default retry after a failure is 60 s


def reconcile_body(body: dict[str, Any], context: Runtime, logger: Any) -> Outcome:
    """Gather what the planner needs, plan, apply its objects and deletions; return the outcome."""
    try:
        return _reconcile_body(body, context, logger)
    except API_UNREACHABLE as err:
        # Applies are idempotent (server-side apply): the retry redoes whatever did not get through.
        raise kopf.TemporaryError(f"the API server did not answer: {type(err).__name__}", delay=API_RETRY_S) from err


def _reconcile_body(body: dict[str, Any], context: Runtime, logger: Any) -> Outcome:
    catalogs = context.catalogs.get()
    meta = body["metadata"]
    request = image_request(body, catalogs, context.image_build)
    observed = Observed(
        owned=tuple(objects.owned(meta["namespace"], meta["name"])),
        lws_available=objects.lws_available(),
        glmimage=ensure_glmimage(request) if request is not None else None,
        catalog_error=context.catalogs.last_error,
    )
    outcome = plan(body, observed, catalogs, context.downloads)
    try:
        for obj in outcome.apply:
            objects.apply(obj)
        objects.delete(meta["namespace"], outcome.delete)
    except kubernetes.client.ApiException as err:
        raise kopf.TemporaryError(f"applying owned objects failed: {err.status} {err.reason}", delay=15) from err
    if outcome.delete:
        removed = ", ".join(f"{kind}/{name}" for _api, kind, name in outcome.delete)
        logger.info(f"removed objects the plan no longer renders: {removed}")
    return outcome


@kopf.on.resume(GROUP, VERSION, PLURAL, id="glmops-reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="glmops-reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="glmops-reconcile", field="spec")
def reconcile(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, memo: kopf.Memo, **_: Any) -> None:
    """Apply the rendered workload, Service, PDB and canary ConfigMap; record plan and conditions."""
    outcome = reconcile_body(dict(body), runtime(memo), logger)
    patch.status.update(outcome.status_patch())
    for event in outcome.events:
        (kopf.info if event.type == "Normal" else kopf.warn)(body, reason=event.reason, message=event.message)


def _parent(meta: kopf.Meta) -> tuple[str, str] | None:
    name = (meta.get("labels") or {}).get(LABEL_DEPLOYMENT)
    namespace = meta.get("namespace")
    return (namespace, name) if name and namespace else None


def refresh(namespace: str, name: str, context: Runtime, logger: Any) -> dict[str, Any] | None:
    """Reconcile one GLMDeployment outside its own events; write its status if it changed; return its body."""
    body = objects.get_glmdeployment(namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None  # the owner is going away; garbage collection removes the rest
    before = body.get("status") or {}
    outcome = reconcile_body(body, context, logger)
    status = outcome.status_patch()
    if any(before.get(k) != v for k, v in status.items()):
        objects.patch_glmdeployment_status(namespace, name, status)
        # A transition seen here (a download Job failing) is told where kubectl describe shows it.
        for event in outcome.events:
            if event.type == "Warning":
                kopf.warn(kopf.Body(cast(kopf.RawBody, body)), reason=event.reason, message=event.message)
    return body


async def _owned_event(type: str, meta: kopf.Meta, logger: kopf.Logger, memo: kopf.Memo, **_: Any) -> None:
    """An owned object changed or vanished: restore what drifted and refresh readiness (bursts coalesced)."""
    parent = _parent(meta)
    if parent is None:
        return
    context = runtime(memo)
    # Not awaited, and run and followed up outside this handler's context: either would keep this event's object and
    # kopf's handling of it alive until the refresh ends, thousands of them behind a busy thread pool at scale
    # (bench/RESULTS.md, reconcile scale).
    detached = detached_context()
    run = functools.partial(asyncio.to_thread, refresh, *parent, context, logger)
    refreshed = context.refreshes.submit(parent, run, context=detached)
    deleted = str(meta.get("name")) if type == "DELETED" else None
    refreshed.add_done_callback(functools.partial(_refreshed, deleted, logger), context=detached)


def _refreshed(deleted: str | None, logger: kopf.Logger, refreshed: asyncio.Future[dict[str, Any] | None]) -> None:
    """After the refresh an owned object's event asked for: say what was restored, or log why it failed."""
    if refreshed.cancelled():
        return  # the operator is stopping
    error = refreshed.exception()
    if error is not None:
        logger.error(f"refreshing the owning GLMDeployment failed: {type(error).__name__}: {error}")
        return
    body = refreshed.result()
    if body is not None and deleted is not None:
        kopf.info(
            kopf.Body(cast(kopf.RawBody, body)), reason="Restored", message=f"re-created {deleted} after it was deleted"
        )


for _resource in OWNED_RESOURCES:
    kopf.on.event(*_resource, id=f"glmops-owned-{_resource[-1]}", labels=MANAGED)(_owned_event)
