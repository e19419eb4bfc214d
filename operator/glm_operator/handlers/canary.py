"""The readiness gate: a daemon per serving pod runs the canaries and writes glmops.dev/canary."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import kopf
import kubernetes

from glm_operator.api.constants import SERVING_PORT
from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.handlers.admission import CATALOGS
from glm_operator.k8s import objects, pods
from glm_operator.k8s.canary_data import gsm8k_for
from glm_operator.k8s.metrics import record_suite
from glm_operator.render.canary_state import GateState, pod_is_serving_ready, suite_inputs_for, summarize

SERVING = {"glmops.dev/serving": "true", "app.kubernetes.io/managed-by": "glmops"}
PORT = SERVING_PORT


@kopf.daemon("v1", "pods", id="glmops-canary", labels=SERVING, cancellation_timeout=5)
async def canary_gate(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """Run the suite when the pod's server is up; keep re-checking at the deployment's interval."""
    labels = meta.get("labels", {})
    parent = labels.get("glmops.dev/deployment", "")
    namespace = namespace or "default"
    if labels.get("glmops.dev/role") == "group" and labels.get("apps.kubernetes.io/pod-index", "0") != "0":
        await _mirror_leader(namespace, name, stopped)
        return
    state = GateState()
    while not stopped:
        if not pod_is_serving_ready(dict(status)) or not status.get("podIP"):
            await stopped.wait(2)
            continue
        body = await asyncio.to_thread(objects.get_glmdeployment, namespace, parent)
        if body is None:
            return
        questions, shots = await asyncio.to_thread(gsm8k_for, body)
        inputs: SuiteInputs = suite_inputs_for(body, CATALOGS.get(), questions, shots)
        client = OpenAIClient(f"http://{status['podIP']}:{PORT}")
        try:
            served = await client.model_name()
            expected = (body.get("spec") or {}).get("model", {}).get("name")
            if served != expected:  # not (yet) this pod's server: never judge a model by another's answers
                raise EndpointError(f"{status['podIP']}:{PORT} serves {served!r}, not {expected!r}")
            result = await run_suite(client, inputs)
        except EndpointError as err:
            logger.info(f"canary could not reach the pod yet: {err}")
            await stopped.wait(5)
            continue
        finally:
            await client.close()
        record_suite(namespace, parent, result)
        decision = state.observe(result, inputs.config.failures_to_unready)
        if decision is not None:
            written = await asyncio.to_thread(pods.set_gate, namespace, name, *decision)
            if written:
                event = kopf.info if decision[0] == "True" else kopf.warn
                event(kopf.Body(cast(kopf.RawBody, body)), reason=decision[1], message=f"pod {name}: {decision[2]}")
        report = state.report(result)
        reports = {**((body.get("status") or {}).get("canary") or {}).get("pods", {}), name: report}
        summary = {"canary": {"pods": {name: report}, "summary": summarize(reports)}}
        await asyncio.to_thread(objects.patch_glmdeployment_status, namespace, parent, summary)
        await stopped.wait(state.next_delay(result, inputs.config.recheck_seconds))
    await asyncio.to_thread(_forget, namespace, parent, name)


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
