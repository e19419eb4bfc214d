"""The per-pod canary gate loop: run the suite against a serving pod, write its readiness gate and report.

One task per serving pod (`canary/supervisor.py` keeps them, following the pod watch of `handlers/canary.py`):
`canary_gate` waits for the pod's server, runs `canary/suite.py` against it, lets `render/canary_state.py`
`GateState` decide the gate, writes it through `k8s/pods.py` and the pod's report into `status.canary`, and re-checks
at the deployment's interval. A server container the kubelet restarts (its restart count moves in the pod's status)
has its gate set False at once, before its readiness probe can pass, and is judged again as soon as it is up. A
headless worker of a multi-node group mirrors its leader's gate instead. An API server that does not answer is
waited out (`_api`), never counted against the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, cast

import kopf
import kubernetes

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import (
    CANARY_CONDITION,
    LABEL_DEPLOYMENT,
    LABEL_POD_INDEX,
    LABEL_ROLE,
    ROLE_GROUP,
    VLLM_PORT,
)
from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.canary.supervisor import PodTasks, WatchedPod
from glm_operator.control.canary_progress import GateRuns
from glm_operator.control.detached import detached_context
from glm_operator.control.runtime import Runtime
from glm_operator.k8s import objects, pods
from glm_operator.k8s.canary_data import gsm8k_for
from glm_operator.k8s.client import API_UNREACHABLE
from glm_operator.k8s.metrics import CANARY_SECONDS, record_suite, record_unreachable, timed
from glm_operator.render.canary_state import (
    UNREACHABLE_REPORT_AFTER,
    GateState,
    gate_condition,
    pod_is_serving_ready,
    server_restarts,
    server_started_at,
    suite_inputs_for,
    summarize,
)

log = logging.getLogger(__name__)
API_RETRY_S = 2.0
T = TypeVar("T")


async def _api(call: Callable[..., T], *args: Any) -> T:
    """A Kubernetes API call off the event loop, retried while the API server does not answer at all.

    An API server restarting is no fault of the pod: the verdict the suite reached is written once it is back,
    instead of counting as an attempt that could not ask the pod and running the whole suite again.
    """
    warned = False
    while True:
        try:
            return await asyncio.to_thread(call, *args)
        except API_UNREACHABLE as err:
            if not warned:
                log.warning("the API server did not answer (%s); retrying every %.0fs", type(err).__name__, API_RETRY_S)
                warned = True
            await asyncio.sleep(API_RETRY_S)


def gate_tasks(current: Callable[[], Runtime]) -> PodTasks:
    """The registry of per-pod gate tasks, each running `canary_gate`, with the runs' progress written to status.

    `current` gives the runtime as stored when it is called: the settings handler may run after the start-up handler
    that builds this registry and store the one every other handler reads (a runtime captured at start-up could be
    another, with empty copies)."""

    def run(pod: WatchedPod) -> Awaitable[None]:
        return canary_gate(pod, current(), gates.view, runs)

    async def write_running(namespace: str, parent: str, fragment: dict[str, Any]) -> None:
        status = {"canary": {"running": fragment}}
        stored = await asyncio.to_thread(objects.patch_glmdeployment_status, namespace, parent, status)
        current().observed.record(stored, "GLMDeployment")

    runs = GateRuns(write_running)

    # Each pod's task outlives the watch event that starts it: kept apart from that handler's cause (its whole pod).
    gates = PodTasks(run, context=detached_context)
    return gates


PodView = Callable[[str, str], "dict[str, Any] | None"]


async def canary_gate(pod: WatchedPod, context: Runtime, watched: PodView, runs: GateRuns) -> None:
    """Run the suite when the pod's server is up; keep re-checking at the deployment's interval.

    The GLMDeployment and the pods are read as last watched (`context.observed`, the gates' views), never fetched:
    a check that changes nothing costs no API request."""
    labels = pod.labels
    parent = labels.get(LABEL_DEPLOYMENT, "")
    if not parent:
        return  # labelled serving but owned by no GLMDeployment: nothing to check it against
    if labels.get(LABEL_ROLE) == ROLE_GROUP and labels.get(LABEL_POD_INDEX, "0") != "0":
        await _mirror_leader(pod, watched)
        return
    state = GateState()  # lives as long as the task: nothing below may end it but the pod going away
    body = _deployment(context, pod.namespace, parent)
    delay: float | None
    delay, restarted_unwatched = _resume(pod, body, state)
    if pod.name in (((body or {}).get("status") or {}).get("canary") or {}).get("running", {}):
        await runs.remove(pod.namespace, parent, pod.name)  # left by a run this task never saw end (a restart)
    seen = server_restarts(pod.status)
    if restarted_unwatched:
        await _server_restarted(pod, parent, state, seen, context)
    elif delay:
        await _wait_unless_restarted(pod, delay, seen)
    while not pod.stopped:
        status = pod.status
        if server_restarts(status) != seen:
            previous, seen = seen, server_restarts(status)
            if previous is not None:  # None: the kubelet had not reported the container yet
                await _server_restarted(pod, parent, state, seen, context)
        if not pod_is_serving_ready(status) or not status.get("podIP"):
            await pod.wait(2, or_change=True)
            continue
        try:
            delay = await _check_once(pod, parent, str(status["podIP"]), state, context, runs)
        except Exception as err:  # noqa: BLE001 - nothing a pod answers may end its gate or lose its counts
            detail = err_detail(err)
            delay = state.could_not_run()
            log.warning("canary could not ask pod %s/%s: %s; next in %.0fs", pod.namespace, pod.name, detail, delay)
            await _report_unreachable(pod, parent, state, detail, context)
        if delay is None:
            return  # the GLMDeployment is gone
        await _wait_unless_restarted(pod, delay, seen)
    if pod.gone:  # the pod was deleted: its report goes; an operator that stops or pauses keeps them
        # Retried while the API server does not answer (a restart): a traceback would end the task, the report stay.
        await _api(_forget, pod.namespace, parent, pod.name, context)


def _deployment(context: Runtime, namespace: str, name: str) -> dict[str, Any] | None:
    """The GLMDeployment as last watched or written, or None when it is gone."""
    return context.observed.get(namespace, "GLMDeployment", name)


def err_detail(err: BaseException) -> str:
    """One line naming what went wrong talking to the pod (an endpoint error already says where and how)."""
    text = str(err) if isinstance(err, EndpointError) else f"{type(err).__name__}: {err}"
    return " ".join(text.split())[:300]


async def _report_unreachable(pod: WatchedPod, parent: str, state: GateState, detail: str, context: Runtime) -> None:
    """Once the pod could not be asked several times in a row: gate, Event, status and metric say so."""
    if state.unreachable < UNREACHABLE_REPORT_AFTER:
        return
    try:
        body = _deployment(context, pod.namespace, parent)
        if body is None:
            return
        record_unreachable(pod.namespace, parent)
        config = GLMDeployment.model_validate(body).spec.canary
        decision = state.unreachable_verdict(detail, config.failures_to_unready)
        if decision is not None and await _write_gate(pod, decision):
            kopf.warn(kopf.Body(cast(kopf.RawBody, body)), reason=decision[1], message=f"pod {pod.name}: {decision[2]}")
        await asyncio.to_thread(
            _write_report, pod.namespace, parent, pod.name, state.unreachable_report(detail), body, context
        )
    except Exception as err:  # noqa: BLE001 - the next attempt reports again
        log.warning("could not report the unreachable pod %s/%s: %s", pod.namespace, pod.name, err_detail(err))


def _resume(pod: WatchedPod, body: dict[str, Any] | None, state: GateState) -> tuple[float, bool]:
    """After an operator restart: trust a recent verdict recorded in status instead of asking every pod again at
    once; the delay to the first run, and whether the pod's server started after the verdict its gate shows."""
    if body is None:
        return 0.0, False
    report = (((body.get("status") or {}).get("canary") or {}).get("pods") or {}).get(pod.name)
    recheck = GLMDeployment.model_validate(body).spec.canary.recheck_seconds
    delay = state.resume(gate_condition(pod.body), report, recheck)
    return delay, state.gate == "True" and state.restarted_since(report, server_started_at(pod.status))


async def _wait_unless_restarted(pod: WatchedPod, seconds: float, seen: int | None) -> None:
    """Sleep until the next check is due, waking as soon as the server container restarts (or the task stops)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not pod.stopped and server_restarts(pod.status) == seen:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return
        await pod.wait(left, or_change=True)


async def _server_restarted(
    pod: WatchedPod, parent: str, state: GateState, restarts: int | None, context: Runtime
) -> None:
    """The server container restarted: gate False at once (a Warning Event when that takes the pod out of service);
    the loop judges the new server as soon as it is up, whatever backoff the old one had earned."""
    # In service if this task passed it, or if the pod carries a True gate this task has not recorded yet (seen in
    # CI: a restart right after the pod became Ready, before the task's state held the pass).
    was_serving = state.gate == "True" or gate_condition(pod.body) == "True"
    decision = state.restarted(restarts)
    log.info("pod %s/%s: %s", pod.namespace, pod.name, decision[2])
    body = _deployment(context, pod.namespace, parent)
    try:
        if await _write_gate(pod, decision) and was_serving and body is not None:
            kopf.warn(kopf.Body(cast(kopf.RawBody, body)), reason=decision[1], message=f"pod {pod.name}: {decision[2]}")
    except Exception as err:  # noqa: BLE001 - a refused write (403, 500) must not end the gate: it runs the suite next
        log.warning("could not hold restarted pod %s/%s out: %s", pod.namespace, pod.name, err_detail(err))


async def _check_once(
    pod: WatchedPod, parent: str, ip: str, state: GateState, context: Runtime, runs: GateRuns
) -> float | None:
    """One canary run against one pod: the gate written, Events and status posted; the delay to the next run."""
    body = _deployment(context, pod.namespace, parent)
    if body is None:
        return None
    glmd = GLMDeployment.model_validate(body)
    source, policy = glmd.spec.canary.gsm8k.source, context.catalogs.get().access_policy
    questions, shots = await _api(gsm8k_for, source, pod.namespace, policy, context.settings.gsm8k_path)
    inputs: SuiteInputs = suite_inputs_for(glmd, context.catalogs.get(), questions, shots)
    client = OpenAIClient(f"http://{ip}:{VLLM_PORT}")
    try:
        served = await client.model_name()
        if served != glmd.spec.model.name:  # not (yet) this pod's server: never judge a model by another's answers
            raise EndpointError(f"{ip}:{VLLM_PORT} serves {served!r}, not {glmd.spec.model.name!r}")
        with timed(CANARY_SECONDS) as run:
            try:
                result = await run_suite(client, inputs, runs.start(pod.namespace, parent, pod.name))
            except BaseException:
                await runs.abandon(pod.namespace, parent, pod.name)
                raise
            run["result"] = "pass" if result.passed else "fail"
    finally:
        await client.close()
    running = await runs.finish(pod.namespace, parent, pod.name)
    record_suite(pod.namespace, parent, pod.name, result)
    decision = state.observe(result, inputs.config.failures_to_unready)
    if decision is not None and await _write_gate(pod, decision):
        event = kopf.info if decision[0] == "True" else kopf.warn
        event(kopf.Body(cast(kopf.RawBody, body)), reason=decision[1], message=f"pod {pod.name}: {decision[2]}")
    await _api(_write_report, pod.namespace, parent, pod.name, state.report(result), body, context, running)
    return state.next_delay(result, inputs.config.recheck_seconds)


async def _write_gate(pod: WatchedPod, decision: tuple[Literal["True", "False"], str, str]) -> bool:
    """Write the pod's gate unless the pod as last watched says it already; the answer becomes the pod's view."""
    stored = await _api(pods.set_gate, pod.namespace, pod.name, *decision, pod.body)
    if stored is None:
        return False
    pod.update(stored)
    return True


def _write_report(
    namespace: str,
    parent: str,
    pod: str,
    report: dict[str, Any],
    body: dict[str, Any],
    context: Runtime,
    running: dict[str, Any] | None = None,
) -> None:
    """Write the pod's report into status.canary with a summary that agrees with every report stored (and `running`:
    the run's progress entry removed)."""
    stored = objects.write_canary_report(namespace, parent, pod, report, summarize, body, running)
    if stored is not None:
        context.observed.record(stored, "GLMDeployment")


async def _mirror_leader(pod: WatchedPod, watched: PodView) -> None:
    """A headless node of a StatefulSet group serves no HTTP: it is as ready as its group's leader.

    The leader's gate is read from its own task's view of it (the leader is a watched serving pod too): no request
    while nothing changes, as long as the leader's task runs."""
    leader = pod.name.rsplit("-", 1)[0] + "-0"
    while not pod.stopped:
        view = watched(pod.namespace, leader)
        try:
            # A leader without a running task here (not yet seen, or its gate ended) is read from the API server.
            gate = leader_gate(view) if view is not None else await _api(pods.get_gate, pod.namespace, leader)
            if gate is not None:
                # Through _api, as the leader's own gate: an API server restarting is waited out, not a task ended.
                await _write_gate(pod, (gate[0], gate[1], f"group leader {leader}: {gate[2]}"))
        except Exception as err:  # noqa: BLE001 - a refused read or write (403, 500) is tried again, never the end
            log.warning(
                "could not mirror leader %s for pod %s/%s: %s", leader, pod.namespace, pod.name, err_detail(err)
            )
        await pod.wait(5)


def leader_gate(view: dict[str, Any] | None) -> tuple[Literal["True", "False"], str, str] | None:
    """The canary condition a watched pod carries (status, reason, message), or None (not watched, not decided)."""
    for c in ((view or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == CANARY_CONDITION and c.get("status") in ("True", "False"):
            return c["status"], c.get("reason") or "", c.get("message") or ""
    return None


def _forget(namespace: str, parent: str, pod: str, context: Runtime) -> None:
    """Drop a deleted pod's canary report, and its summary with it (the GLMDeployment itself may be gone with its
    pods)."""
    with contextlib.suppress(kubernetes.client.ApiException):
        stored = objects.write_canary_report(
            namespace,
            parent,
            pod,
            None,
            summarize,
            context.observed.get(namespace, "GLMDeployment", parent),
            {pod: None},
        )
        if stored is not None:
            context.observed.record(stored, "GLMDeployment")
