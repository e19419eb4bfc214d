"""One asyncio task per serving pod, started and stopped from the pod watch, holding no lock on the pod.

kopf's daemons keep their pod with a finalizer until the daemon has stopped, so a down or uninstalled
operator would stall every pod deletion, scale-down and namespace deletion. The canary gate therefore runs in
tasks of its own: the pod watch hands each event to `PodTasks.observe`, which starts the pod's task once and
afterwards only passes it the newest pod body; a deleted or terminating pod's task is stopped. While another
operator replica is the active one (`pause`), no task runs, as kopf stops its daemons then.

A task keeps only the part of its pod the gate reads (`gate_view`), never the whole body: at 1,000 deployments the
operator watches over a thousand serving pods, and a pod as the watch delivers it (spec, managedFields) is about
45 KiB of Python objects against about 4 KiB for what the gate needs (bench/RESULTS.md, reconcile scale).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.constants import CANARY_CONDITION, SERVER_CONTAINER

log = logging.getLogger(__name__)
PodKey = tuple[str, str]  # namespace, name
STOP_TIMEOUT_S = 5.0


GATE_CONDITION_FIELDS = ("type", "status")
# The gate's own condition whole: whether writing it would change anything is decided from the view, not a GET.
CANARY_CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")


def gate_view(body: dict[str, Any]) -> dict[str, Any]:
    """The part of a pod body the gate reads, in the body's own shape: identity, version and labels, phase, pod IP,
    each condition's type and status (ContainersReady), the canary's own readiness-gate condition whole, and the
    server container's restart count and start time (a restarted server is judged again before it serves)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    conditions = [
        {
            k: c[k]
            for k in (CANARY_CONDITION_FIELDS if c.get("type") == CANARY_CONDITION else GATE_CONDITION_FIELDS)
            if k in c
        }
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    ]
    kept_status = {k: status[k] for k in ("phase", "podIP") if k in status}
    if conditions:
        kept_status["conditions"] = conditions
    server = [
        {
            "name": SERVER_CONTAINER,
            "restartCount": c.get("restartCount"),
            "state": {"running": {"startedAt": ((c.get("state") or {}).get("running") or {}).get("startedAt")}},
        }
        for c in status.get("containerStatuses") or []
        if isinstance(c, dict) and c.get("name") == SERVER_CONTAINER
    ]
    if server:
        kept_status["containerStatuses"] = server
    kept_meta = {k: meta[k] for k in ("namespace", "name", "uid", "resourceVersion") if k in meta}
    kept_meta["labels"] = dict(meta.get("labels") or {})
    return {"metadata": kept_meta, "status": kept_status}


@dataclass(eq=False, slots=True)
class WatchedPod:
    """What a pod's task sees: the gate's view of the newest body from the watch, and whether it must stop."""

    namespace: str
    name: str
    body: dict[str, Any]
    gone: bool = False  # stopped because the pod was deleted (not because the operator stops or pauses)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.body.get("metadata") or {}).get("labels") or {})

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    async def wait(self, seconds: float, *, or_change: bool = False) -> None:
        """Sleep up to `seconds`; wake early when told to stop, or (if asked) when the pod changes."""
        self._changed.clear()
        waiters = [asyncio.ensure_future(self._stop.wait())]
        if or_change:
            waiters.append(asyncio.ensure_future(self._changed.wait()))
        try:
            await asyncio.wait(waiters, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def update(self, body: dict[str, Any]) -> None:
        """The newest pod body, from the watch or a write's answer; an older one (a late watch event) is ignored."""
        if _older(body, self.body):
            return
        self.body = gate_view(body)
        self._changed.set()

    def stop(self, *, gone: bool = False) -> None:
        self.gone = self.gone or gone
        self._stop.set()


def _older(new: dict[str, Any], kept: dict[str, Any]) -> bool:
    """Whether `new` predates `kept` (resourceVersions compare as integers within a kind: Kubernetes 1.35+)."""
    versions = [str((b.get("metadata") or {}).get("resourceVersion") or "") for b in (new, kept)]
    return all(v.isdigit() for v in versions) and int(versions[0]) < int(versions[1])


GateRun = Callable[[WatchedPod], Awaitable[None]]


def _uid(body: dict[str, Any]) -> Any:
    return (body.get("metadata") or {}).get("uid")


def is_terminating(body: dict[str, Any]) -> bool:
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))


class PodTasks:
    """The running gate tasks, keyed by pod; every method is called from the operator's event loop."""

    def __init__(self, run: GateRun, context: Callable[[], contextvars.Context] | None = None) -> None:
        """`context` gives the context a new pod's task runs in (default: a copy of the caller's)."""
        self._run = run
        self._context = context
        self._tasks: dict[PodKey, tuple[WatchedPod, asyncio.Task[None]]] = {}
        # Views of pods a fresh list showed while paused: their tasks start on resume (a stable pod sends nothing else).
        self._parked: dict[PodKey, dict[str, Any]] = {}
        self._paused = False
        self.namespaces_seen: set[str] = set()

    @property
    def paused(self) -> bool:
        return self._paused

    def running(self) -> list[PodKey]:
        return sorted(key for key, (_, task) in self._tasks.items() if not task.done())

    def view(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The gate's view of a watched pod with a running task (e.g. a group's leader), or None."""
        found = self._tasks.get((namespace, name))
        return None if found is None or found[1].done() else found[0].body

    def observe(self, event_type: str | None, body: dict[str, Any]) -> None:
        """One watch event of a serving pod: start its task, hand it the new body, or stop it."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        self.namespaces_seen.add(key[0])
        current = self._tasks.get(key)
        if event_type == "DELETED" or is_terminating(body):
            parked = self._parked.get(key)
            if parked is not None and _uid(parked) == meta.get("uid"):
                del self._parked[key]
            if current is not None and _uid(current[0].body) not in (None, meta.get("uid")):
                return  # a late event of the pod this name had before (a StatefulSet's replacement runs now)
            self._stop(key, gone=True)
            return
        if self._paused:
            # Only a list's event (type None: kopf lists afresh when its watches resume) proves a pod exists now; a
            # pod last seen before the pause may have been deleted while no watch ran. Later events keep it fresh.
            if event_type is None or key in self._parked:
                self._parked[key] = gate_view(body)
            return
        if current is not None and not current[1].done():
            if current[0].body.get("metadata", {}).get("uid") == meta.get("uid"):
                current[0].update(body)
                return
            self._stop(key, gone=True)  # same name, new pod (a StatefulSet's replacement): a fresh gate
        self._start(key, body)

    async def pause(self) -> None:
        """Another replica is active: stop every task. kopf's watches list afresh when they resume: a pod that list
        shows starts again, whether its event comes before this replica resumes (parked) or after."""
        if self._paused:
            return
        self._paused = True
        log.info("canary gates paused: another operator replica is active (%d stopped)", len(self._tasks))
        await self.close()

    def resume(self) -> None:
        if not self._paused:
            return
        log.info("canary gates resumed: this operator replica is active (%d to start)", len(self._parked))
        self._paused = False
        parked, self._parked = self._parked, {}
        for key, view in parked.items():
            if key not in self._tasks:
                self._start(key, view)

    async def close(self) -> None:
        """Stop every task and wait (bounded) for them to finish."""
        tasks = [task for _, task in self._tasks.values()]  # before _stop takes them out of the registry
        for key in list(self._tasks):
            self._stop(key)
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        for task in tasks:
            task.cancel()
        self._tasks.clear()

    def _start(self, key: PodKey, body: dict[str, Any]) -> None:
        pod = WatchedPod(key[0], key[1], gate_view(body))
        task = asyncio.get_running_loop().create_task(
            self._guarded(pod),
            name=f"glmops-canary/{key[0]}/{key[1]}",
            context=self._context() if self._context is not None else None,
        )
        self._tasks[key] = (pod, task)

    def _stop(self, key: PodKey, *, gone: bool = False) -> None:
        found = self._tasks.pop(key, None)
        if found is None:
            return
        pod, task = found
        pod.stop(gone=gone)
        # A task that does not notice within the timeout (stuck in I/O) is cancelled.
        asyncio.get_running_loop().call_later(STOP_TIMEOUT_S, task.cancel)

    async def _guarded(self, pod: WatchedPod) -> None:
        try:
            await self._run(pod)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one pod's gate failing must never end the others
            log.exception("canary gate for pod %s/%s ended with an error", pod.namespace, pod.name)
        finally:
            current = self._tasks.get((pod.namespace, pod.name))
            if current is not None and current[0] is pod:
                del self._tasks[(pod.namespace, pod.name)]
            with contextlib.suppress(Exception):
                pod.stop()
