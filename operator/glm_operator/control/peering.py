"""Following kopf's peering: the gate tasks pause while another operator replica is the active one.

kopf pauses its own handlers when a replica of higher priority is alive in the peering object; the gate tasks are
not kopf handlers, so `follow_peering` reads the same object every few seconds and decides by the same rule
(`canary/peering.py`), and `peering_changed` holds the refresh retries meanwhile and asks for a re-list once this
replica is active again.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable

import kopf

from glm_operator.canary.peering import paused_by_peers
from glm_operator.canary.supervisor import PodTasks
from glm_operator.control.runtime import runtime
from glm_operator.k8s.peering import read_peers

log = logging.getLogger(__name__)
PEERING_CHECK_S = 5.0


def peering_changed(memo: kopf.Memo, active: bool) -> None:
    """This replica paused (`active` False) or active again: hold the refresh retries, and once active re-list (its
    watches were paused: what was deleted meanwhile, it never saw)."""
    context = runtime(memo)
    if active:
        context.retries.resume()
        context.relist_requested.set()
    else:
        context.retries.pause()


async def follow_peering(
    gates: PodTasks, settings: kopf.OperatorSettings, changed: Callable[[bool], None] = lambda active: None
) -> None:
    """Pause the gate tasks while kopf's peering says another replica is the active one; call `changed` with False
    when it pauses them and True when this replica becomes the active one again."""
    while True:
        namespaces: list[str | None] = [None]
        if not settings.peering.clusterwide:  # kopf keeps one peering object per served namespace
            namespaces = list(sorted(gates.namespaces_seen))
        try:
            now = datetime.datetime.now(datetime.UTC)
            peers = [await asyncio.to_thread(read_peers, settings.peering.name, ns) for ns in namespaces]
            paused = any(paused_by_peers(p, settings.peering.priority, now) for p in peers)
        except Exception as err:  # noqa: BLE001 - an unreadable peering object keeps the last decision
            log.warning("could not read the peering object %s: %s", settings.peering.name, err)
        else:
            if paused and not gates.paused:
                changed(False)  # first: a retry due while the gates stop would act on frozen copies
                await gates.pause()
            elif not paused and gates.paused:
                gates.resume()
                changed(True)
        await asyncio.sleep(PEERING_CHECK_S)
