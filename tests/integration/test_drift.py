"""Drift as the real API server stores objects: what glmops applied reads back as unchanged, any edit as drift."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.deployment import Observed, plan
from glm_operator.planner.drift import needs_apply
from glm_operator.planner.stored import parse_stored
from tests.support.cluster import REPO, Kubectl, eventually

pytestmark = pytest.mark.cluster
SAMPLES = {
    "baseline-h200-glm53-fp8.yaml": "glm53-fp8-h200-tp8",  # a Deployment
    "vllm-58729-fixed.yaml": "glm53-mxfp4-gb200-dp8ep",  # StatefulSet groups (no LeaderWorkerSet API here)
}
KINDS = "deploy,sts,svc,pdb,cm"


@pytest.fixture(autouse=True)
def _operator(operator: object) -> None:
    """The operator applies the objects, as in production."""


def _owned(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    out = kubectl.run("get", KINDS, "-n", namespace, "-l", f"glmops.dev/deployment={name}", "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def _settled(kubectl: Kubectl, namespace: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    def ready() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        glmd = kubectl.get("glmd", name, namespace)
        assert glmd.get("status", {}).get("observedGeneration") == glmd["metadata"]["generation"]
        owned = _owned(kubectl, namespace, name)
        assert {o["kind"] for o in owned} >= {"Service", "ConfigMap", "PodDisruptionBudget"}, owned
        return glmd, owned

    return eventually(ready, timeout=90, what="the owned objects")


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_objects_as_the_api_server_stores_them_need_no_apply(kubectl: Kubectl, namespace: str, sample: str) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(REPO / "samples" / sample))
    glmd, owned = _settled(kubectl, namespace, SAMPLES[sample])
    outcome = plan(parse_stored(glmd), Observed(owned=tuple(owned), lws_available=False), Catalogs.packaged())
    assert outcome.delete == ()
    assert [(o["kind"], o["metadata"]["name"]) for o in outcome.apply] == [], "re-applying unchanged objects"


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]["template"]["spec"]
    container: dict[str, Any] = spec["containers"][0]
    return container


TAMPERING: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "a container argument changed": ("Deployment", lambda o: _container(o)["args"].append("--enforce-eager")),
    "the image changed": ("Deployment", lambda o: _container(o).update(image="example.com/other/vllm:latest")),
    "a sidecar added": ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"].append({"name": "x"})),
    "replicas changed": ("Deployment", lambda o: o["spec"].update(replicas=5)),
    "the readiness gate removed": ("Deployment", lambda o: o["spec"]["template"]["spec"].pop("readinessGates")),
    "a label we set removed": ("Service", lambda o: o["metadata"]["labels"].pop("app.kubernetes.io/managed-by")),
    "a port changed": ("Service", lambda o: o["spec"]["ports"][0].update(port=9999)),
    "the canary data edited": ("ConfigMap", lambda o: o["data"].update({k: "x" for k in o["data"]})),
    "being deleted": ("PodDisruptionBudget", lambda o: o["metadata"].update(deletionTimestamp="2026-12-01T00:00Z")),
}


def test_every_kind_of_edit_to_what_glmops_renders_is_drift(kubectl: Kubectl, namespace: str) -> None:
    sample = "baseline-h200-glm53-fp8.yaml"
    kubectl.run("apply", "-n", namespace, "-f", str(REPO / "samples" / sample))
    glmd, owned = _settled(kubectl, namespace, SAMPLES[sample])
    rendered = plan(parse_stored(glmd), Observed(owned=(), lws_available=False), Catalogs.packaged()).apply
    by_kind = {o["kind"]: o for o in owned}
    for what, (kind, edit) in TAMPERING.items():
        live = copy.deepcopy(by_kind[kind])
        edit(live)
        (desired,) = [o for o in rendered if o["kind"] == kind]
        assert needs_apply(desired, live), what
    # What others may add is not drift: a controller's annotation, a label of another tool, status.
    live = copy.deepcopy(by_kind["Deployment"])
    live["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "7"
    live["metadata"]["labels"]["team"] = "infra"
    (desired,) = [o for o in rendered if o["kind"] == "Deployment"]
    assert not needs_apply(desired, live)
