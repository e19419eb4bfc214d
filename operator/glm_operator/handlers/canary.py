"""The readiness gate: a daemon per serving pod runs the canaries and writes glmops.dev/canary."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import kopf
import kubernetes

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import LABEL_DEPLOYMENT, LABEL_POD_INDEX, LABEL_ROLE, ROLE_GROUP, SERVING, VLLM_PORT
from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.handlers.runtime import Runtime, runtime
from glm_operator.k8s import objects, pods
from glm_operator.k8s.canary_data import gsm8k_for
from glm_operator.k8s.metrics import record_suite
from glm_operator.render.canary_state import GateState, pod_is_serving_ready, suite_inputs_for, summarize

UNREACHABLE_RETRY_S = 5.0


@kopf.daemon("v1", "pods", id="glmops-canary", labels=SERVING, cancellation_timeout=5)
async def canary_gate(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Run the suite when the pod's server is up; keep re-checking at the deployment's interval."""
    context = runtime(memo)
    labels = meta.get("labels", {})
    parent = labels.get(LABEL_DEPLOYMENT, "")
    namespace = namespace or "default"
    if labels.get(LABEL_ROLE) == ROLE_GROUP and labels.get(LABEL_POD_INDEX, "0") != "0":
        await _mirror_leader(namespace, name, stopped)
        return
    state = GateState()  # lives as long as the daemon: nothing below may end it but the pod going away
    while not stopped:
        if not pod_is_serving_ready(dict(status)) or not status.get("podIP"):
            await stopped.wait(2)
            continue
        try:
            delay = await _check_once(namespace, parent, name, str(status["podIP"]), state, context)
        except EndpointError as err:  # not up yet, or not this model's server: ask again soon
            logger.info(f"canary could not reach the pod yet: {err}")
            delay = UNREACHABLE_RETRY_S
        except Exception as err:  # noqa: BLE001 - an unexpected answer must not end the gate and lose its counts
            delay = state.could_not_run()
            logger.warning(f"canary could not run on pod {name}: {type(err).__name__}: {err}; next in {delay:.0f}s")
        if delay is None:
            return  # the GLMDeployment is gone
        await stopped.wait(delay)
    await asyncio.to_thread(_forget, namespace, parent, name)


async def _check_once(
    namespace: str, parent: str, pod: str, ip: str, state: GateState, context: Runtime
) -> float | None:
    """One canary run against one pod: the gate written, Events and status posted; the delay to the next run."""
    body = await asyncio.to_thread(objects.get_glmdeployment, namespace, parent)
    if body is None:
        return None
    glmd = GLMDeployment.model_validate(body)
    questions, shots = await asyncio.to_thread(gsm8k_for, body)
    inputs: SuiteInputs = suite_inputs_for(body, context.catalogs.get(), questions, shots)
    client = OpenAIClient(f"http://{ip}:{VLLM_PORT}")
    try:
        served = await client.model_name()
        if served != glmd.spec.model.name:  # not (yet) this pod's server: never judge a model by another's answers
            raise EndpointError(f"{ip}:{VLLM_PORT} serves {served!r}, not {glmd.spec.model.name!r}")
        result = await run_suite(client, inputs)
    finally:
        await client.close()
    record_suite(namespace, parent, result)
    decision = state.observe(result, inputs.config.failures_to_unready)
    if decision is not None and await asyncio.to_thread(pods.set_gate, namespace, pod, *decision):
        event = kopf.info if decision[0] == "True" else kopf.warn
        event(kopf.Body(cast(kopf.RawBody, body)), reason=decision[1], message=f"pod {pod}: {decision[2]}")
    report = state.report(result)
    reports = {**((body.get("status") or {}).get("canary") or {}).get("pods", {}), pod: report}
    summary = {"canary": {"pods": {pod: report}, "summary": summarize(reports)}}
    await asyncio.to_thread(objects.patch_glmdeployment_status, namespace, parent, summary)
    return state.next_delay(result, inputs.config.recheck_seconds)


async def _mirror_leader(namespace: str, name: str, stopped: kopf.DaemonStopped) -> None:
    """A headless node of a StatefulSet group serves no HTTP: it is as ready as its group's leader."""
    leader = name.rsplit("-", 1)[0] + "-0"
    while not stopped:
        gate = await asyncio.to_thread(pods.get_gate, namespace, leader)
        if gate is not None:
            await asyncio.to_thread(
                pods.set_gate, namespace, name, gate[0], gate[1], f"group leader {leader}: {gate[2]}"
            )
        await stopped.wait(5)


def _forget(namespace: str, parent: str, pod: str) -> None:
    """Drop a deleted pod's canary report (the GLMDeployment itself may be gone with its pods)."""
    with contextlib.suppress(kubernetes.client.ApiException):
        objects.patch_glmdeployment_status(namespace, parent, {"canary": {"pods": {pod: None}}})
