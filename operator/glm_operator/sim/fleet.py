"""Run a simulator for every serving pod of the fake cluster, on the pod's own IP and port.

kwok pods run no process; their IPs are on loopback (127.x), so a simulator bound to pod IP:8000 is
exactly where the operator's canaries (and anyone else) reach the pod, as on a real cluster. Each
simulator is started with the pod's own `vllm serve` command line and environment, its node's GPU
type, and its image's vLLM version and patches, so failures follow from the deployment as deployed.
Test and demo tooling only: nothing in the operator knows it exists.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

from glm_operator.api.constants import LABEL_DEPLOYMENT, SERVING, VLLM_PORT, selector
from glm_operator.catalog.images import load_images
from glm_operator.k8s.client import core_v1

SELECTOR = selector(SERVING)
_LEADER = re.compile(r"then exec (.*?); else exec")


def launch_command(container: Any) -> list[str]:
    """The `vllm serve ...` line a container runs (for a StatefulSet group: the leader's)."""
    command = list(container.command or []) + list(container.args or [])
    if command[:2] == ["/bin/sh", "-c"]:
        match = _LEADER.search(command[2])
        return shlex.split(match[1].replace('"$GLMOPS_NODE_RANK"', "0")) if match else []
    return command


def sim_argv(
    pod: Any,
    gpu: str,
    gsm8k: str | None,
    fault: str | None,
    endpoint_fault: str | None = None,
    latency_ms: str | None = None,
) -> list[str]:
    container = pod.spec.containers[0]
    image = load_images().describe(container.image)
    argv = [
        sys.executable,
        "-m",
        "glm_operator.cli.main",
        "sim",
        "--host",
        pod.status.pod_ip,
        "--port",
        str(VLLM_PORT),
        "--gpu",
        gpu,
        "--vllm-version",
        image.version or load_images().default_version,
        "--patches",
        ",".join(image.patches),
        "--fault",
        fault or "auto",
    ]
    if gsm8k:
        argv += ["--gsm8k", gsm8k]
    if endpoint_fault:
        argv += ["--endpoint-fault", endpoint_fault]
    if latency_ms:
        argv += ["--latency-ms", latency_ms]
    return [*argv, "--", *launch_command(container)]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def run(gsm8k: str | None, overrides: dict[str, str], interval: float = 1.0) -> None:
    # SIGTERM must unwind through `finally`, or the simulators outlive the fleet holding pod IPs.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    api = core_v1()
    running: dict[str, subprocess.Popen[bytes]] = {}
    gpus: dict[str, str] = {}
    try:
        while True:
            for key in [k for k, p in running.items() if p.poll() is not None]:
                running.pop(key)  # exited (e.g. its IP was still bound): start it again
            try:
                _sync(api, running, gpus, gsm8k, overrides)
            except Exception as err:  # noqa: BLE001 - the API server restarting: keep serving, ask again
                print(
                    f"sim-fleet: cannot follow the pods ({type(err).__name__}); keeping {len(running)}", file=sys.stderr
                )
            time.sleep(interval)
    finally:
        for proc in running.values():
            proc.terminate()
        for proc in running.values():
            proc.wait(timeout=10)


def _sync(
    api: Any, running: dict[str, subprocess.Popen[bytes]], gpus: dict[str, str], gsm8k: str | None,
    overrides: dict[str, str],
) -> None:  # fmt: skip
    """One pass: a simulator started for each new serving pod, stopped for each pod gone."""
    seen = set()
    for pod in api.list_pod_for_all_namespaces(label_selector=SELECTOR).items:
        if not pod.status.pod_ip or pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
            continue
        key = f"{pod.metadata.namespace}/{pod.metadata.name}/{pod.status.pod_ip}"
        seen.add(key)
        if key in running:
            continue
        for other in [k for k in running if k.endswith(f"/{pod.status.pod_ip}")]:
            stale = running.pop(other)  # the IP now belongs to a new pod
            stale.terminate()
            stale.wait(timeout=10)
        node = pod.spec.node_name
        if node not in gpus:
            gpus[node] = (api.read_node(node).metadata.labels or {}).get("glmops.dev/accelerator", "H200")
        parent = f"{pod.metadata.namespace}/{pod.metadata.labels.get(LABEL_DEPLOYMENT, '')}"
        env = {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
        annotations = _glmd_annotations(pod)
        fault = overrides.get(parent) or annotations.get(FAULT_ANNOTATION)
        argv = sim_argv(
            pod,
            gpus[node],
            gsm8k,
            fault,
            annotations.get(ENDPOINT_FAULT_ANNOTATION),
            annotations.get(LATENCY_ANNOTATION),
        )
        running[key] = subprocess.Popen(argv, env={**_base_env(), **env}, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    for key in set(running) - seen:
        running.pop(key).terminate()


FAULT_ANNOTATION = "sim.glmops.dev/fault"
ENDPOINT_FAULT_ANNOTATION = "sim.glmops.dev/endpoint-fault"
LATENCY_ANNOTATION = "sim.glmops.dev/latency-ms"  # a slow server: each request waits this long (slow canary runs)


def _glmd_annotations(pod: Any) -> dict[str, str]:
    """Failures forced onto a GLMDeployment's pods by annotating it (unknown failures, broken endpoints, latency)."""
    import kubernetes

    from glm_operator.k8s.objects import get_glmdeployment

    name = (pod.metadata.labels or {}).get(LABEL_DEPLOYMENT)
    try:
        body = get_glmdeployment(pod.metadata.namespace, name) if name else None
    except kubernetes.client.ApiException:
        return {}
    return dict((body or {}).get("metadata", {}).get("annotations") or {})


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
