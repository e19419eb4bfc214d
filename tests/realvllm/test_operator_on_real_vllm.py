"""The operator end to end with its serving pod backed by the real vLLM server: the random model never serves.

A GLMDeployment of the rendered spec (tests/realvllm/rendered.py) goes onto the test cluster; kwok runs its pod,
and a forwarder puts the session's real server on the pod's IP and port, where the operator's canary daemon asks
it. The pod carries exactly the command the real server was started from (less the named CPU adaptations).
The model is random: the canaries must fail, and the user must see why in every place glmops reports it; the
chart's PodMonitor must still scrape the pod the gate holds out, through its own IP.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from glm_operator.api.constants import VLLM_PORT, Reason
from tests.conftest import TEST_METRICS_PORT, OperatorProcess
from tests.realvllm import prometheus as prom
from tests.realvllm.conftest import SERVED_NAME, RealServer
from tests.realvllm.forwarder import Forwarder
from tests.realvllm.rendered import SPEC, rendered_pod
from tests.support.cluster import Kubectl, eventually
from tests.support.glmd import assert_random_model_failed, endpoint_conditions, failed_canary_report

pytestmark = pytest.mark.cluster
NAME = SPEC["metadata"]["name"]
# Small GSM8K waves: every question in flight is a generation on 2 shared cores. The canary settings are not
# part of the pod's command (status.plan.commandHash covers image, arguments and environment only).
CANARY = {"gsm8k": {"concurrency": 8}, "copyFidelity": {"trials": 1}}
CANARY_TIMEOUT_S = 480


def _null_counts(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("glmops_chat_null_content_total{")
    )


def _serving_pod(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    pods: list[dict[str, Any]] = [
        p
        for p in kubectl.get("pods", namespace=namespace)["items"]
        if p["metadata"]["labels"].get("glmops.dev/deployment") == NAME and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(pods) == 1 and pods[0]["status"].get("podIP") and pods[0]["status"].get("phase") == "Running", pods
    return pods[0]


@pytest.fixture
def backed_pod(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, real_vllm: RealServer
) -> Iterator[tuple[dict[str, Any], float]]:
    """The GLMDeployment applied and its pod's IP:8000 forwarded to the real server; (pod, when forwarding began)."""
    manifest = {**SPEC, "metadata": {**SPEC["metadata"], "namespace": namespace}}
    manifest["spec"] = {**SPEC["spec"], "canary": CANARY}
    kubectl.apply(manifest)
    pod = eventually(lambda: _serving_pod(kubectl, namespace), timeout=90, what="the serving pod to run")
    target = urlsplit(real_vllm.url)
    forwarder = Forwarder(pod["status"]["podIP"], VLLM_PORT, str(target.hostname), int(target.port or 80))
    try:
        yield pod, time.monotonic()
    finally:
        forwarder.close()


def test_the_pod_runs_the_command_the_real_server_was_started_from(
    backed_pod: tuple[dict[str, Any], float], real_vllm: RealServer
) -> None:
    pod, _ = backed_pod
    container = pod["spec"]["containers"][0]
    assert [*container["command"], *container["args"]] == rendered_pod().argv
    assert {e["name"]: e.get("value") for e in container.get("env") or []} == rendered_pod().env


def _discovered(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as Prometheus' Kubernetes pod discovery presents it, read from the API server's own object.

    Debian's Prometheus is built without Kubernetes discovery, so the target and its __meta labels are written as a
    static config, from the live pod: its labels, namespace, name, IP and the container port glmops declared.
    """
    (port,) = pod["spec"]["containers"][0]["ports"]
    labels = {f"__meta_kubernetes_pod_label_{prom.meta_label(k)}": v for k, v in pod["metadata"]["labels"].items()}
    labels |= {
        "__meta_kubernetes_namespace": pod["metadata"]["namespace"],
        "__meta_kubernetes_pod_name": pod["metadata"]["name"],
        "__meta_kubernetes_pod_container_port_name": port["name"],
    }
    target = f"{pod['status']['podIP']}:{port['containerPort']}"
    return {"static_configs": [{"targets": [target], "labels": labels}]}


def test_the_chart_pod_monitor_scrapes_the_held_out_pod_through_its_own_ip(
    backed_pod: tuple[dict[str, Any], float], kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    pod, _ = backed_pod
    objects = prom.chart_monitoring(["monitoring.serviceMonitor.enabled=true", "monitoring.serviceMonitor.interval=1s"])
    job = prom.pod_monitor_job(objects["PodMonitor"], _discovered(pod))
    with prom.running({"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}, tmp_path) as url:

        def scraped() -> dict[str, str]:
            targets = prom.query(url, 'up{job="glmops-vllm"}')
            assert len(targets) == 1 and targets[0]["value"][1] == "1", targets
            up = targets[0]
            selector = f'namespace="{namespace}",glmdeployment="{NAME}"'
            running = prom.query(url, f"vllm:num_requests_running{{{selector}}}")
            assert running and running[0]["metric"]["model_name"] == SERVED_NAME, "vLLM's own series, relabelled"
            labels: dict[str, str] = up["metric"]
            return labels

        labels = eventually(scraped, timeout=60, what="Prometheus to scrape the pod")
    assert labels == {
        "__name__": "up",
        "job": "glmops-vllm",
        "namespace": namespace,
        "glmdeployment": NAME,
        "pod": pod["metadata"]["name"],
        "instance": f"{pod['status']['podIP']}:{VLLM_PORT}",
    }
    # Scraped while its readiness gate keeps it out of the Service: the pods most worth watching.
    conditions = {c["type"]: c["status"] for c in _serving_pod(kubectl, namespace)["status"]["conditions"]}
    assert conditions["Ready"] == "False"


def test_a_random_model_behind_a_pod_fails_its_canaries_and_never_joins_the_service(
    backed_pod: tuple[dict[str, Any], float], kubectl: Kubectl, namespace: str, real_vllm: RealServer
) -> None:
    pod, started = backed_pod
    pod_name, pod_ip = pod["metadata"]["name"], pod["status"]["podIP"]
    nulls_before = _null_counts(real_vllm.url)

    report = eventually(
        lambda: failed_canary_report(kubectl, namespace, NAME, pod_name),
        timeout=CANARY_TIMEOUT_S,
        interval=2,
        what="the canaries to fail on the real server",
    )
    wall = time.monotonic() - started
    print(f"\noperator canary verdict on the real server, from forwarding to status: {wall:.1f} s")
    print(f"status.canary.pods[{pod_name}]: {report}")

    # The answers came from the real server: its own null-content counter moved with the operator's questions.
    assert _null_counts(real_vllm.url) >= nulls_before + 1
    # The pod stays out of the Service: gate False, not Ready, no ready endpoint on its IP.
    null_rate = assert_random_model_failed(report, _serving_pod(kubectl, namespace))
    assert re.search(r"gsm8k [0-9.]+ \(threshold 0\.82\): [01]/\d+ correct", report["message"]), report
    assert all(c.get("ready") is False for c in endpoint_conditions(kubectl, namespace, NAME, pod_ip))

    glmd = kubectl.get("glmd", NAME, namespace)
    status = glmd["status"]
    assert status.get("readyReplicas", 0) == 0
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoReplicaReady")
    assert status["canary"]["summary"].startswith(f"0/1 pods passed; failing {pod_name}")

    events = kubectl.run("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}").stdout
    failure = [line for line in events.splitlines() if Reason.CANARY_FAILED in line]
    assert failure and "null-content" in failure[0] and pod_name in failure[0], events

    metrics = httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics").text
    labels = f'glmdeployment="{NAME}",namespace="{namespace}"'
    assert re.search(rf'glmops_canary_runs_total{{{labels},result="fail"}} [1-9]', metrics), metrics
    for check in ("smoke", "gsm8k", "null-content", "copy"):
        assert f'glmops_canary_check_passed{{check="{check}",{labels},pod="{pod_name}"}} 0.0' in metrics, check
    per_unit = re.search(rf'glmops_canary_null_content_ratio{{{labels},pod="{pod_name}"}} (\S+)', metrics)
    assert per_unit and float(per_unit[1]) == pytest.approx(null_rate, abs=0.01)
    value = re.search(rf'glmops_canary_check_value{{check="null-content",{labels}}} (\S+)', metrics)
    assert value and float(value[1]) == pytest.approx(null_rate, abs=0.01)
