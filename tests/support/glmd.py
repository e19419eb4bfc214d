"""Reading a GLMDeployment's pods and owned objects back from the cluster, for tests that check them."""

from __future__ import annotations

from typing import Any

import yaml

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
