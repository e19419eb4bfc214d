"""The GLMDeployment planner, branch by branch, without a cluster."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.deployment import Observed, image_request, plan
from glm_operator.planner.stored import Stored, parse_stored
from glm_operator.render.imagebuild import BuildSettings
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()
CATALOGS_WITH_REGISTRY = replace(CATALOGS, images=CATALOGS.images.with_patched_registry("reg.local/glmops"))
BUILDS = BuildSettings.from_env(
    {"GLMOPS_IMAGE_BUILD_ENABLED": "true", "GLMOPS_IMAGE_BUILD_REGISTRY": "reg.local/glmops"}
)


def stored(builder: B, generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The object as the API server stores it: admitted (with Auto's repairs), with uid and generation."""
    obj = builder.namespace("ns").build()
    result = admit(obj, CATALOGS)
    body = copy.deepcopy(result.patched)
    body["metadata"] |= {"uid": "uid-1", "generation": generation}
    if status is not None:
        body["status"] = status
    return body


def parsed(builder: B, generation: int = 1, status: dict[str, Any] | None = None) -> Stored:
    """The stored object as the refresh hands it to the planner: parsed once."""
    return parse_stored(stored(builder, generation, status))


def conditions(outcome: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in outcome.status_patch()["conditions"]}


def single_node() -> B:
    return B("glm").model("zai-org/GLM-5.3").accelerator("H200").tensor(8).vllm("0.33.0")


def test_refused_spec_renders_nothing_and_says_it_is_blocked() -> None:
    body = stored(single_node().image("vllm/vllm-openai:v0.33.0"))
    # Stored before a rule existed (or with admission bypassed): the rules now refuse it.
    body["spec"]["parallelism"]["pipeline"] = 2
    body["spec"]["engine"]["env"] = [{"name": "VLLM_PP_LAYER_PARTITION", "value": "39,39"}]
    outcome = plan(parse_stored(body), Observed(), CATALOGS)
    conds = conditions(outcome)
    assert outcome.apply == () and outcome.delete == ()
    assert conds["Validated"]["status"] == "False" and conds["Progressing"]["reason"] == "Blocked"
    assert [e.type for e in outcome.events] == ["Warning"]


def test_single_node_replicas_become_a_deployment_service_pdb_and_canary_config() -> None:
    outcome = plan(parsed(single_node()), Observed(), CATALOGS)
    assert [o["kind"] for o in outcome.apply] == ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
    conds = conditions(outcome)
    assert (
        conds["Progressing"]["reason"] == "Applied" and "Deployment for 1 replica(s)" in conds["Progressing"]["message"]
    )
    assert conds["Degraded"]["status"] == "False" and conds["Ready"]["reason"] == "NoReplicaReady"
    patch = outcome.status_patch()
    assert patch["observedGeneration"] == 1 and patch["readyReplicas"] == 0 and "canary" not in patch
    assert patch["selector"] == "app.kubernetes.io/instance=glm,app.kubernetes.io/managed-by=glmops," + (
        "app.kubernetes.io/name=vllm,glmops.dev/deployment=glm,glmops.dev/serving=true"
    )
    assert patch["plan"]["image"].startswith("ghcr.io/glmops/vllm-openai:v0.33.0")


@pytest.mark.parametrize("lws, kinds", [(True, ["LeaderWorkerSet"]), (False, ["StatefulSet", "StatefulSet"])])
def test_multi_node_replicas_use_leaderworkerset_when_served_else_statefulsets(lws: bool, kinds: list[str]) -> None:
    body = stored(
        B("big").model("zai-org/GLM-5.3").accelerator("H200").tensor(8).pipeline(2).vllm("0.33.0").replicas(2)
    )
    outcome = plan(parse_stored(body), Observed(lws_available=lws), CATALOGS)
    workloads = [o["kind"] for o in outcome.apply if o["kind"] in ("LeaderWorkerSet", "StatefulSet", "Deployment")]
    assert workloads == kinds


def test_owned_objects_the_plan_no_longer_renders_are_deleted_and_reported() -> None:
    old = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big"}}
    body = stored(B("big").model("zai-org/GLM-5.3").accelerator("H200").tensor(8).pipeline(2).vllm("0.33.0"))
    outcome = plan(parse_stored(body), Observed(owned=(old,), lws_available=True), CATALOGS)
    assert outcome.delete == (("apps/v1", "Deployment", "big"),)
    assert any(e.reason == "Pruned" and "Deployment/big" in e.message for e in outcome.events)


def test_ready_replicas_come_from_the_observed_workload() -> None:
    current = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "glm"},
        "status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1},
    }
    outcome = plan(parsed(single_node()), Observed(owned=(current,)), CATALOGS)
    assert conditions(outcome)["Ready"]["reason"] == "AllReplicasReady"
    assert outcome.status_patch()["readyReplicas"] == 1 and outcome.delete == ()


def test_a_deployment_that_unloads_the_plugin_is_reported_degraded() -> None:
    body = stored(single_node().env("VLLM_PLUGINS", "other"))
    conds = conditions(plan(parse_stored(body), Observed(), CATALOGS))
    assert conds["Degraded"]["status"] == "True" and conds["Degraded"]["reason"] == "PatchesNotLoaded"


def glmimage(phase: str | None, image: str, ref: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if ref:
        status["imageRef"] = ref
    if phase == "Failed":
        status["conditions"] = [{"type": "Built", "status": "False", "reason": "BuildFailed", "message": "oom"}]
    return {"metadata": {"name": "cuda-x"}, "spec": {"image": image}, "status": status}


def test_image_builds_ask_for_the_glmimage_of_the_patched_image() -> None:
    catalogs = CATALOGS_WITH_REGISTRY
    request = image_request(parsed(single_node()), catalogs, BUILDS)
    assert request is not None and request["spec"]["image"] == "reg.local/glmops/vllm-openai:v0.33.0-glmops.1"
    assert image_request(parsed(single_node().image("vllm/vllm-openai:v0.33.0")), catalogs, BUILDS) is None


@pytest.mark.parametrize(
    "phase, reason, event", [(None, "WaitingForImage", False), ("Failed", "ImageBuildFailed", True)]
)
def test_no_workload_until_the_image_is_built(phase: str | None, reason: str, event: bool) -> None:
    wanted = "reg.local/glmops/vllm-openai:v0.33.0-glmops.1"
    outcome = plan(parsed(single_node()), Observed(glmimage=glmimage(phase, wanted)), CATALOGS_WITH_REGISTRY)
    conds = conditions(outcome)
    assert outcome.apply == ()
    assert conds["Progressing"]["reason"] == reason and conds["Ready"]["status"] == "False"
    assert any(e.type == "Warning" for e in outcome.events) == event


def test_a_built_image_is_run_pinned_by_digest() -> None:
    wanted = "reg.local/glmops/vllm-openai:v0.33.0-glmops.1"
    built = glmimage("Succeeded", wanted, f"{wanted}@sha256:{'a' * 64}")
    outcome = plan(parsed(single_node()), Observed(glmimage=built), CATALOGS_WITH_REGISTRY)
    deployment = next(o for o in outcome.apply if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith("@sha256:" + "a" * 64)
    assert conditions(outcome)["ImageBuilding"]["reason"] == "Built"


def test_an_unchanged_condition_keeps_its_transition_time() -> None:
    first = plan(parsed(single_node()), Observed(), CATALOGS).status_patch()
    for c in first["conditions"]:
        c["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    again = plan(parsed(single_node(), status={"conditions": first["conditions"]}), Observed(), CATALOGS)
    assert all(c["lastTransitionTime"] == "2026-01-01T00:00:00Z" for c in again.status_patch()["conditions"])


def test_a_refused_catalog_extension_is_a_condition_and_a_warning_on_every_deployment() -> None:
    outcome = plan(parsed(single_node()), Observed(catalog_error="configmap ns/cm: widgets: bad"), CATALOGS)
    cond = conditions(outcome)["CatalogLoaded"]
    assert cond["status"] == "False" and cond["reason"] == "CatalogInvalid" and "widgets: bad" in cond["message"]
    assert any(e.type == "Warning" and e.reason == "CatalogInvalid" for e in outcome.events)
    assert conditions(plan(parsed(single_node()), Observed(), CATALOGS))["CatalogLoaded"]["status"] == "True"
