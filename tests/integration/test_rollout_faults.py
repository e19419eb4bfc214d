"""Rollouts that break: a broken revision never takes traffic, a rollback restores service, all pods failing alerts.

The simulator fleet serves the pods; a deployment's new pods are made broken by annotating the GLMDeployment with
`sim.glmops.dev/fault` in the same apply that changes its spec (the fleet reads the annotation when it starts a
pod's simulator, so the pods already serving keep their healthy one). The pods the Service sends traffic to are
polled through the whole rollout and rollback.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
import yaml

from glm_operator.api.constants import CANARY_CONDITION, Reason
from tests.conftest import TEST_METRICS_PORT
from tests.realvllm import prometheus as prom
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import Cluster, Kubectl, eventually
from tests.support.glmd import conditions, serving_pods

pytestmark = pytest.mark.cluster
FAULT = "sim.glmops.dev/fault"


@pytest.fixture(autouse=True)
def _running(operator: object, sim_fleet: object) -> None:
    """The operator and the simulators."""


def _names(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def _ready(kubectl: Kubectl, namespace: str, name: str, replicas: int) -> dict[str, Any]:
    glmd = kubectl.get("glmd", name, namespace)
    assert glmd["status"].get("readyReplicas") == replicas, glmd.get("status", {}).get("canary")
    assert glmd["status"].get("observedGeneration") == glmd["metadata"]["generation"]
    return glmd


class ServicePoller:
    """Polls, in a thread, which pods the Service sends traffic to, and whether the old pods' servers answer.

    The EndpointSlice controller publishes a pod as a ready endpoint exactly when the pod matches the Service's
    selector, is Ready and is not terminating; that set is what is recorded. (kwok's pod IPs are loopback, which
    the API server refuses in EndpointSlices, so the slices themselves stay empty here: see
    tests/integration/test_real_node.py.)
    """

    def __init__(self, cluster: Cluster, namespace: str, selector: dict[str, str], old: dict[str, str]) -> None:
        self.api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(cluster.kubeconfig))
        self.namespace, self.old = namespace, old  # old: pod name -> IP
        self.selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        self.serving: list[set[str]] = []  # per poll: the pods that are ready endpoints (take traffic)
        self.listed: set[str] = set()  # every pod the Service selected, ready or not
        self.old_answers = self.old_failures = 0
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        pods = self.api.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        ready: set[str] = set()
        for pod in pods:
            self.listed.add(pod.metadata.name)
            conds = {c.type: c.status for c in pod.status.conditions or []}
            if conds.get("Ready") == "True" and pod.metadata.deletion_timestamp is None:
                ready.add(pod.metadata.name)
        self.serving.append(ready)
        for ip in self.old.values():
            try:
                ok = httpx.get(f"http://{ip}:8000/v1/models", timeout=2).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.old_answers += ok
            self.old_failures += not ok

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception as err:  # noqa: BLE001 - kept for the test's message
                self.error = f"{type(err).__name__}: {err}"
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_a_broken_revision_never_takes_traffic_and_a_rollback_restores_service(
    cluster: Cluster, kubectl: Kubectl, namespace: str
) -> None:
    good = B("roll-broken").accelerator("GB300").tensor(4).replicas(2).build()
    kubectl.apply(good, "-n", namespace)
    eventually(lambda: _ready(kubectl, namespace, "roll-broken", 2), timeout=120, what="2 replicas Ready")
    old = {p["metadata"]["name"]: p["status"]["podIP"] for p in serving_pods(kubectl, namespace, "roll-broken")}
    assert len(old) == 2
    selector = kubectl.get("service", "roll-broken", namespace)["spec"]["selector"]
    poller = ServicePoller(cluster, namespace, selector, old)

    # The pods' conditions are read as the Deployment's status was: wait until the poller sees both Ready.
    def both_serving() -> bool:
        assert poller.serving and poller.serving[-1] == set(old), (poller.serving[-2:], poller.listed, poller.error)
        return True

    eventually(both_serving, timeout=30, what="both old pods ready behind the Service")
    first = len(poller.serving) - 1
    started = time.monotonic()
    try:
        bad = B("roll-broken").accelerator("GB300").tensor(4).replicas(2).env("GLMOPS_REVISION", "2").build()
        bad["metadata"]["annotations"] = {FAULT: "garbled"}  # the new revision's pods answer garbage
        kubectl.apply(bad, "-n", namespace)

        def new_pod_failed() -> dict[str, Any]:
            new = [p for p in serving_pods(kubectl, namespace, "roll-broken") if p["metadata"]["name"] not in old]
            assert len(new) == 1, _names(new)
            gate = conditions(new[0]).get(CANARY_CONDITION) or {}
            assert gate.get("status") == "False" and gate.get("reason") == Reason.CANARY_FAILED, gate
            return new[0]

        broken = eventually(new_pod_failed, timeout=90, what="the new revision's pod to fail its canaries")
        broken_name = broken["metadata"]["name"]
        glmd = kubectl.get("glmd", "roll-broken", namespace)
        report = glmd["status"]["canary"]["pods"][broken_name]
        assert report["passed"] is False and report["failed"], report
        assert glmd["status"]["canary"]["summary"].startswith(f"2/3 pods passed; failing {broken_name}: ")
        assert glmd["status"]["readyReplicas"] == 2
        events = kubectl.run("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=roll-broken")
        assert f"pod {broken_name}" in events.stdout and Reason.CANARY_FAILED in events.stdout
        time.sleep(5)  # the rollout stays stalled: nothing more changes while the new pod fails
        assert _names(serving_pods(kubectl, namespace, "roll-broken")) == {*old, broken_name}
        broken_phase_polls = len(poller.serving)

        # Roll back: the old spec, without the fault. The old ReplicaSet is the template again; the broken pod goes.
        kubectl.apply(good, "-n", namespace)
        kubectl.run("annotate", "glmd", "roll-broken", "-n", namespace, f"{FAULT}-")

        def rolled_back() -> bool:
            assert _names(serving_pods(kubectl, namespace, "roll-broken")) == set(old)
            _ready(kubectl, namespace, "roll-broken", 2)
            return True

        eventually(rolled_back, timeout=60, what="the rollback: the broken pod gone, the old ones serving")
        rollback_s = time.monotonic() - started
        time.sleep(1.5)  # a few more polls after the rollback
    finally:
        poller.stop()
    polls = poller.serving[first:]
    assert all(ready <= set(old) for ready in polls), [r - set(old) for r in polls if r - set(old)]
    assert all(ready == set(old) for ready in polls), ("both old pods took traffic throughout", polls)
    assert broken_name in poller.listed, "the Service selected the broken pod, which was never ready"
    assert poller.old_failures == 0 and poller.old_answers > 0
    print(
        f"\nrollout: {len(polls)} polls of the Service's ready pods ({broken_phase_polls - first} before the"
        " rollback), broken pod never"
        f" ready in any; old pods answered {poller.old_answers}/{poller.old_answers + poller.old_failures};"
        f" broken revision -> rolled back and whole in {rollback_s:.1f}s"
    )


@pytest.fixture
def prometheus_on_operator(tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus scraping the test operator's metrics, evaluating the chart's rules (shortened by values)."""
    _, promtool = prom.binaries()
    values = [
        "monitoring.prometheusRule.enabled=true",
        "monitoring.prometheusRule.alerts.GLMOpsCanaryFailing.for=1s",
        "monitoring.prometheusRule.alerts.GLMOpsCanaryFailing.window=2m",
    ]
    rule = prom.chart_monitoring(values)["PrometheusRule"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    job = {"job_name": "glmops-operator", "static_configs": [{"targets": [f"127.0.0.1:{TEST_METRICS_PORT}"]}]}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [job],
    }
    with prom.running(config, tmp_path) as url:
        yield url


def _firing(prometheus: str, namespace: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{prometheus}/api/v1/alerts").json()
    return [
        a
        for a in answer["data"]["alerts"]
        if a["labels"]["alertname"] == "GLMOpsCanaryFailing"
        and a["labels"].get("namespace") == namespace
        and a["state"] == "firing"
    ]


def test_a_deployment_whose_every_pod_fails_says_so_and_its_alert_fires(
    kubectl: Kubectl, namespace: str, prometheus_on_operator: str
) -> None:
    obj = B("all-fail").accelerator("GB300").tensor(4).replicas(2).build()
    obj["metadata"]["annotations"] = {FAULT: "garbled"}
    started = time.monotonic()
    kubectl.apply(obj, "-n", namespace)

    def all_failed() -> dict[str, Any]:
        glmd = kubectl.get("glmd", "all-fail", namespace)
        reports = glmd.get("status", {}).get("canary", {}).get("pods", {})
        assert len(reports) == 2 and not any(r["passed"] for r in reports.values()), reports
        return glmd

    glmd = eventually(all_failed, timeout=90, what="both pods to fail their canaries")
    failed_s = time.monotonic() - started
    assert glmd["status"]["canary"]["summary"].startswith("0/2 pods passed; failing all-fail-")
    assert glmd["status"]["canary"]["summary"].endswith("(+1 more)")
    ready = {c["type"]: c for c in glmd["status"]["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "NoReplicaReady", ready
    assert glmd["status"].get("readyReplicas", 0) == 0
    for pod in serving_pods(kubectl, namespace, "all-fail"):
        assert conditions(pod)["Ready"]["status"] == "False"
        assert conditions(pod)[CANARY_CONDITION]["reason"] == Reason.CANARY_FAILED

    alerts = eventually(
        lambda: _firing(prometheus_on_operator, namespace), timeout=90, interval=1, what="GLMOpsCanaryFailing firing"
    )
    firing_s = time.monotonic() - started
    assert {a["labels"]["glmdeployment"] for a in alerts} == {"all-fail"}
    assert {a["labels"]["check"] for a in alerts} <= {"smoke", "gsm8k", "null-content", "copy"}
    assert alerts[0]["annotations"]["runbook_url"].endswith("#glmopscanaryfailing")
    print(
        f"\nall pods failing: both reported in {failed_s:.1f}s; GLMOpsCanaryFailing firing at {firing_s:.1f}s for"
        f" checks {sorted(a['labels']['check'] for a in alerts)}"
    )
