"""A re-list of the operator's objects every GLMOPS_RESYNC_SECONDS: what no watch saw deleted is forgotten.

The operator reads its objects as its watches last delivered them (`control/observed.py`). A watch that breaks and
cannot resume (410 Gone, a network cut), or one paused while another replica was the active one (kopf's peering),
starts again from a fresh list, and an object deleted in between never gets its DELETED event: its copy would stay,
and a deployment would never re-create an owned object it believes exists. After a pause the re-list comes 30 s
after this replica is active again.
This sweep lists each kind once per namespace that holds a copy (not once per deployment: at 1,000 deployments in
20 namespaces, 180 requests every 10 minutes by default) and drops every copy the list lacks and does not postdate;
their deployments are refreshed, which re-creates what they still render.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from glm_operator.api import API_VERSION, KIND
from glm_operator.api.constants import MANAGED
from glm_operator.canary.supervisor import PodTasks
from glm_operator.control.detached import detached_context
from glm_operator.control.observed import OwnerKey, stale_after_relist
from glm_operator.control.refreshes import request_refresh
from glm_operator.control.runtime import Runtime, runtime
from glm_operator.k8s import objects

log = logging.getLogger(__name__)


def resync_once(context: Runtime) -> set[OwnerKey]:
    """List every kind in every namespace with a copy; forget the copies deleted unseen; return their owners."""
    observed = context.observed
    kinds = [(API_VERSION, KIND), *objects.OWNED_KINDS]
    owners: set[OwnerKey] = set()
    for namespace in sorted(observed.namespaces()):
        for api_version, kind in kinds:
            known = observed.names(namespace, kind)
            if not known:
                continue  # nothing of this kind is believed to exist here: nothing can be stale
            labels = {} if kind == KIND else MANAGED
            listed, version = objects.list_labelled(api_version, kind, namespace, labels)
            list_version = int(version) if version and version.isdigit() else None
            for name in stale_after_relist(known, listed, list_version):
                owner = observed.owner_of(namespace, kind, name)
                if observed.forget(namespace, kind, name, list_version):
                    log.info("%s %s/%s was deleted while no watch saw it; forgotten", kind, namespace, name)
                    if owner is not None:
                        owners.add((namespace, owner))
    return owners


RELIST_AFTER_RESUME_S = 30.0  # kopf's watches list afresh once resumed; the re-list follows that one


async def _next_sweep(context: Runtime, every: float) -> None:
    """Wait for the next sweep: `every` seconds, or shortly after this replica resumes from a pause."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(context.relist_requested.wait(), timeout=every)
    if context.relist_requested.is_set():
        context.relist_requested.clear()
        log.info("re-listing owned objects in %.0fs: this replica's watches were paused", RELIST_AFTER_RESUME_S)
        await asyncio.sleep(RELIST_AFTER_RESUME_S)


def _paused(memo: kopf.Memo) -> bool:
    """Whether another replica is the active one (the canary gates follow kopf's peering): its copies are frozen,
    and acting on them would undo what the active replica does."""
    gates = getattr(memo, "gates", None)
    return isinstance(gates, PodTasks) and gates.paused


async def _sweep(memo: kopf.Memo, every: float, logger: Any) -> None:
    while True:
        await _next_sweep(runtime(memo), every)  # one event whichever runtime: the settings handler shares it
        if _paused(memo):
            continue  # re-listed 30 s after this replica is active again
        context = runtime(memo)  # read when used: the settings handler may store it after this one starts
        try:
            owners = await asyncio.to_thread(resync_once, context)
        except Exception as err:  # noqa: BLE001 - the next sweep tries again; the watches go on meanwhile
            log.warning("the re-list of owned objects failed: %s: %s", type(err).__name__, err)
            continue
        for owner in sorted(owners):
            request_refresh(context, owner, logger)


@kopf.on.startup(id="glmops-resync")
async def start_resync(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Start the periodic re-list (GLMOPS_RESYNC_SECONDS; 0 turns it off)."""
    every = runtime(memo).settings.resync_seconds  # a malformed one stops the start-up (control/runtime.py)
    if every > 0:
        memo.resync = asyncio.get_running_loop().create_task(
            _sweep(memo, every, logger), name="glmops-resync", context=detached_context()
        )


@kopf.on.cleanup(id="glmops-resync")
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    """Stop the re-list on shutdown."""
    task = getattr(memo, "resync", None)
    if isinstance(task, asyncio.Task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
