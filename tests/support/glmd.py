"""Reading a GLMDeployment's pods and owned objects back from the cluster, for tests that check them."""

from __future__ import annotations

import re
from typing import Any

import yaml

from glm_operator.api.constants import CANARY_CONDITION, Reason
from tests.support.cluster import Kubectl


def owned_objects(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, list[str]]]:
    """{deployment: {kind: [names]}} of what glmops made in `namespace` (Deployments, Services, PDBs, ConfigMaps)."""
    out = kubectl.run("get", "deploy,sts,svc,pdb,cm", "-n", namespace, "-l", "glmops.dev/deployment", "-o", "json")
    owned: dict[str, dict[str, list[str]]] = {}
    for item in yaml.safe_load(out.stdout)["items"]:
        parent = item["metadata"]["labels"]["glmops.dev/deployment"]
        owned.setdefault(parent, {}).setdefault(item["kind"], []).append(item["metadata"]["name"])
    return owned


def failed_canary_report(kubectl: Kubectl, namespace: str, name: str, pod: str) -> dict[str, Any]:
    """status.canary.pods[pod] of GLMDeployment `name` once it reports a failure (raises AssertionError until then)."""
    reports = kubectl.get("glmd", name, namespace).get("status", {}).get("canary", {}).get("pods", {})
    assert pod in reports and not reports[pod]["passed"], reports
    report: dict[str, Any] = reports[pod]
    return report


def serving_pods(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    """The deployment's pods that are not being deleted."""
    return [
        p
        for p in kubectl.get("pods", namespace=namespace)["items"]
        if (p["metadata"].get("labels") or {}).get("glmops.dev/deployment") == name
        and not p["metadata"].get("deletionTimestamp")
    ]


def conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}


def assert_random_model_failed(report: dict[str, Any], pod: dict[str, Any]) -> float:
    """The tiny random model's verdict, in a pod's canary report and on its gate: every chat answer ends inside the
    never-closed reasoning block (null content) and completions give wrong numbers; the pod is not Ready. Returns the
    null-content rate the report gives."""
    assert {"smoke", "gsm8k", "null-content", "copy"} <= set(report["failed"]), report
    message = report["message"]
    assert re.search(r"smoke 0 \(threshold [0-9.]+\): 0/\d+ correct", message), message
    null_rate = re.search(r"null-content ([0-9.]+) \(threshold 0\.05\)", message)
    assert null_rate and float(null_rate[1]) > 0.05, message  # decided at the second empty answer
    gate = conditions(pod)[CANARY_CONDITION]
    assert (gate["status"], gate["reason"]) == ("False", Reason.CANARY_FAILED) and "null-content" in gate["message"]
    assert conditions(pod)["Ready"]["status"] == "False"
    return float(null_rate[1])


def endpoint_conditions(kubectl: Kubectl, namespace: str, service: str, ip: str) -> list[dict[str, Any]]:
    """The conditions of every endpoint of `service` on `ip`, from its EndpointSlices (there is at least one)."""
    slices = kubectl.get("endpointslices", namespace=namespace)["items"]
    ours = [s for s in slices if s["metadata"]["labels"].get("kubernetes.io/service-name") == service]
    assert ours, f"Service {service} has an EndpointSlice"
    return [e["conditions"] for s in ours for e in s.get("endpoints") or [] if ip in e["addresses"]]
