"""Refreshing a GLMDeployment: read what was observed, plan, apply, write the status; one run per deployment at once.

Every caller goes through here: the spec handler waits for its run (`reconcile`); an owned object's event or a
GLMImage's change asks for one without waiting (`request_refresh`). Both are served by the same per-deployment work
queue (`Runtime.refreshes`, control/coalesce.py), so two runs of one deployment never overlap. A run nobody waited for
that fails is retried with backoff (control/retry.py); its first failure in a row is a Warning Event. What the planner
reads comes from the watches (`Runtime.observed`, control/observed.py), not from the API server, and every write
records its answer there.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any, cast

import kopf
import kubernetes

from glm_operator.api import KIND
from glm_operator.api.constants import EventReason, EventType
from glm_operator.control.detached import detached_context
from glm_operator.control.runtime import Runtime
from glm_operator.k8s import objects
from glm_operator.k8s.client import API_UNREACHABLE, refusal
from glm_operator.k8s.imagebuild import ensure_glmimage
from glm_operator.planner.deployment import Observed, Outcome, image_request, plan
from glm_operator.planner.stored import parse_stored
from glm_operator.rules.findings import redact

API_RETRY_S = 5  # an API server restart takes seconds; kopf's default retry after a failure is 60 s
FAILURE_CHARS = 400  # of a failed refresh's error, in a log line or an Event


@dataclass
class Refreshed:
    """One reconcile's result: the GLMDeployment as stored after it, its outcome, whether its status was written.

    Every caller that waited for the same run gets this one object; `warned` keeps its Warnings from being posted
    twice (a spec change and an owned object's event served by one run)."""

    body: dict[str, Any]
    outcome: Outcome
    wrote_status: bool
    warned: bool = False


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
    stored = parse_stored(body)  # the one parse: everything below reads fields of the model
    request = image_request(stored, catalogs, context.image_build)
    observed = Observed(
        owned=context.observed.owned_by(meta["namespace"], meta["name"]),
        lws_available=objects.lws_available(context.settings.discovery_ttl_s),
        glmimage=ensure_glmimage(request) if request is not None else None,
        catalog_error=context.catalogs.last_error,
    )
    outcome = plan(stored, observed, catalogs, context.downloads)
    try:
        for obj in outcome.apply:
            context.observed.record(objects.apply(obj))  # read back by the next refresh before its watch event
        objects.delete(meta["namespace"], outcome.delete)
    except kubernetes.client.ApiException as err:
        raise kopf.TemporaryError(f"applying owned objects failed: {refusal(err)}", delay=15) from err
    for _api, kind, name in outcome.delete:
        context.observed.forget(meta["namespace"], kind, name)
    if outcome.delete:
        removed = ", ".join(f"{kind}/{name}" for _api, kind, name in outcome.delete)
        logger.info(f"removed objects the plan no longer renders: {removed}")
    return outcome


def refresh(namespace: str, name: str, context: Runtime, logger: Any) -> Refreshed | None:
    """Reconcile one GLMDeployment as last observed; write its status if it changed; None if it is going away."""
    if (namespace, name) in context.confirm_owner and not _still_there(namespace, name, context):
        return None
    body = context.observed.get(namespace, KIND, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None  # the owner is going away; garbage collection removes the rest
    before = body.get("status") or {}
    outcome = reconcile_body(body, context, logger)
    status = outcome.status_patch()
    if not any(before.get(k) != v for k, v in status.items()):
        return Refreshed(body, outcome, wrote_status=False)
    try:
        stored = objects.patch_glmdeployment_status(namespace, name, status)
    except API_UNREACHABLE as err:
        raise kopf.TemporaryError(f"the API server did not answer: {type(err).__name__}", delay=API_RETRY_S) from err
    context.observed.record(stored, KIND)
    return Refreshed(stored, outcome, wrote_status=True)


def _still_there(namespace: str, name: str, context: Runtime) -> bool:
    """After an owned object's deletion: whether its GLMDeployment exists, asked of the API server (one GET).

    Deleting a GLMDeployment deletes what it owns (garbage collection), and those deletions' events can be handled
    before the GLMDeployment's own: re-creating the objects from its copy would only have them collected again."""
    context.confirm_owner.discard((namespace, name))  # before the GET: a deletion seen during it asks again
    try:
        stored = objects.get_glmdeployment(namespace, name)
    except BaseException as err:
        context.confirm_owner.add((namespace, name))
        if isinstance(err, API_UNREACHABLE):
            raise kopf.TemporaryError(
                f"the API server did not answer: {type(err).__name__}", delay=API_RETRY_S
            ) from err
        raise
    if stored is None:
        context.observed.forget(namespace, KIND, name)
        return False
    context.observed.record(stored, KIND)
    return True


def refresh_run(namespace: str, name: str, context: Runtime, logger: Any) -> functools.partial[Any]:
    return functools.partial(asyncio.to_thread, refresh, namespace, name, context, logger)


async def reconcile(context: Runtime, body: kopf.Body, logger: Any) -> None:
    """Refresh a GLMDeployment whose spec changed, waiting for the run (one per deployment, shared with the refreshes
    its owned objects' events asked for); post its Events: every Normal one, its Warnings once per run."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    run = refresh_run(namespace, name, context, logger)
    done: Refreshed | None = await context.refreshes.request((namespace, name), run, context=detached_context())
    restored = _succeeded(context, (namespace, name), (), logger)
    if done is None:
        return
    _tell_restored(body, restored)
    for event in done.outcome.events:
        if event.type == EventType.NORMAL:
            kopf.info(body, reason=event.reason, message=event.message)
        elif not done.warned:
            kopf.warn(body, reason=event.reason, message=event.message)
    done.warned = True


def request_refresh(context: Runtime, key: tuple[str, str], logger: Any, deleted: tuple[str, ...] = ()) -> None:
    """Ask for a refresh of one deployment without waiting; a failed one is retried with backoff (`deleted`: the
    owned objects whose deletion asked, named in an Event once re-created)."""
    # Not awaited, and run and followed up outside the calling handler's context: either would keep its event's object
    # and kopf's handling of it alive until the refresh ends, thousands of them behind a busy thread pool at scale
    # (bench/RESULTS.md, reconcile scale).
    detached = detached_context()
    refreshed = context.refreshes.submit(key, refresh_run(*key, context, logger), context=detached)
    refreshed.add_done_callback(functools.partial(_refreshed, context, key, deleted, logger), context=detached)


def _refreshed(
    context: Runtime,
    key: tuple[str, str],
    deleted: tuple[str, ...],
    logger: Any,
    refreshed: asyncio.Future[Refreshed | None],
) -> None:
    """After a refresh nobody waited for: say what was restored; on failure, say so and ask again later."""
    if refreshed.cancelled():
        return  # the operator is stopping
    error = refreshed.exception()
    if error is not None:
        _retry_later(context, key, deleted, logger, error)
        return
    done = refreshed.result()
    deleted = _succeeded(context, key, deleted, logger)
    if done is None:
        return
    body = kopf.Body(cast(kopf.RawBody, done.body))
    if done.wrote_status and not done.warned:  # a transition seen here (a download Job failing) is told there
        for event in done.outcome.events:
            if event.type == EventType.WARNING:
                kopf.warn(body, reason=event.reason, message=event.message)
        done.warned = True
    _tell_restored(body, deleted)


def _tell_restored(body: kopf.Body, deleted: tuple[str, ...]) -> None:
    for name in deleted:
        kopf.info(body, reason=EventReason.RESTORED, message=f"re-created {name} after it was deleted")


def _succeeded(context: Runtime, key: tuple[str, str], deleted: tuple[str, ...], logger: Any) -> tuple[str, ...]:
    """A refresh of `key` succeeded: reset its retries; the deleted objects it re-created, with those of failed runs."""
    had_failed, earlier = context.retries.succeeded(key)
    if had_failed:
        logger.info(f"refreshing GLMDeployment {key[0]}/{key[1]} succeeded again")
    return tuple(sorted({*deleted, *earlier}))


def _failure(error: BaseException) -> str:
    """A failed refresh's error in one bounded line, secret-like values redacted (the API server's message may quote
    the rendered command line or env); an API error's whole response would carry its headers."""
    if isinstance(error, kubernetes.client.ApiException):
        return redact(f"{type(error).__name__}: {refusal(error)}")
    return redact(f"{type(error).__name__}: {error}"[:FAILURE_CHARS])


def _retry_later(
    context: Runtime, key: tuple[str, str], deleted: tuple[str, ...], logger: Any, error: BaseException
) -> None:
    """Schedule the next attempt of a failed refresh (one per deployment); the first failure in a row is an Event."""
    at_least = getattr(error, "delay", None) if isinstance(error, kopf.TemporaryError) else None
    retry = functools.partial(request_refresh, context, key, logger)  # called with the deletions it owes
    seconds = context.retries.failed(key, retry, at_least=at_least, notes=deleted)
    what = _failure(error)
    if seconds is None:
        if context.retries.paused:
            logger.warning(f"refreshing GLMDeployment {key[0]}/{key[1]} failed ({what}); another replica is active")
        return  # otherwise another waiter of the same run already scheduled the retry
    logger.error(f"refreshing GLMDeployment {key[0]}/{key[1]} failed ({what}); retrying in {seconds:g}s")
    body = context.observed.get(key[0], KIND, key[1])
    if body is not None and context.retries.attempts(key) == 1:
        kopf.warn(
            kopf.Body(cast(kopf.RawBody, body)),
            reason=EventReason.REFRESH_FAILED,
            message=f"restoring or checking the owned objects failed ({what}); retried with backoff",
        )
