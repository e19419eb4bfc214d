"""The vLLM command line, environment and Kubernetes objects rendered for each sample."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import CANARY_CONDITION
from glm_operator.catalog.bundle import Catalogs
from glm_operator.cli.main import main
from glm_operator.render.plan import build_plan
from glm_operator.render.workloads import render_objects, serving_selector
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import REPO

CATALOGS = Catalogs.packaged()
OWNER = {"apiVersion": "glmops.dev/v1alpha1", "kind": "GLMDeployment", "name": "x", "uid": "uid-1"}


def rendered(obj: dict[str, Any], lws: bool = True) -> tuple[Any, list[dict[str, Any]]]:
    obj.setdefault("metadata", {}).setdefault("namespace", "ns")
    result = admit(obj, CATALOGS)
    assert result.allowed, result.rejection()
    glmd = GLMDeployment.model_validate(result.patched)
    plan = build_plan(glmd, CATALOGS)
    return plan, render_objects(plan, glmd, OWNER, lws)


def sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "samples" / name).read_text())
    return doc


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def kind(objs: list[dict[str, Any]], k: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == k]


@pytest.mark.parametrize(
    "name, tp, pp, dp, ep, nodes, image",
    [
        ("baseline-h200-glm53-fp8.yaml", "8", "1", "1", False, 1, "ghcr.io/glmops/vllm-openai:v0.32.0-glmops.1"),
        ("baseline-gb200-glm53-nvfp4.yaml", "4", "1", "1", False, 1, "ghcr.io/glmops/vllm-openai:v0.32.0-glmops.1"),
        ("vllm-58729-fixed.yaml", "1", "1", "8", True, 2, "ghcr.io/glmops/vllm-openai:v0.30.0-glmops.1"),
        ("vllm-63170-h200-pp8-fixed.yaml", "1", "8", "1", False, 1, "vllm/vllm-openai:v0.30.0"),
        ("vllm-63170-rtx-pp2-fixed.yaml", "8", "2", "1", False, 2, "vllm/vllm-openai:v0.30.0"),
        ("vllm-52833-fixed.yaml", "8", "1", "1", True, 1, "vllm/vllm-openai-rocm:v0.27.1"),
    ],
)
def test_sample_renders_the_parallelism_and_image_the_spec_says(
    name: str, tp: str, pp: str, dp: str, ep: bool, nodes: int, image: str
) -> None:
    plan, _ = rendered(sample(name))
    args = plan.leader_args
    assert args[:3] == ["vllm", "serve", sample(name)["spec"]["model"]["name"]]
    assert (flag(args, "--tensor-parallel-size"), flag(args, "--pipeline-parallel-size")) == (tp, pp)
    assert flag(args, "--data-parallel-size") == dp
    assert ("--enable-expert-parallel" in args) == ep
    assert plan.nodes_per_replica == nodes and plan.image == image
    assert flag(args, "--reasoning-parser") == "glm45" and flag(args, "--tool-call-parser") == "glm47"


@pytest.mark.parametrize(
    "lookup, keys",
    [
        ({}, {}),
        ({"promptLookupMax": 3}, {"prompt_lookup_max": 3}),
        ({"promptLookupMin": 2, "promptLookupMax": 4}, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}),
    ],
)
def test_ngram_renders_only_the_lookup_bounds_that_are_set(lookup: dict[str, int], keys: dict[str, int]) -> None:
    doc = sample("baseline-h200-glm53-fp8.yaml")
    doc["spec"]["engine"]["speculative"] = {"method": "ngram", "numSpeculativeTokens": 3, **lookup}
    plan, _ = rendered(doc)
    assert json.loads(flag(plan.leader_args, "--speculative-config") or "") == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        **keys,
    }


def test_mtp_renders_the_speculative_config_json() -> None:
    plan, _ = rendered(sample("vllm-52833-fixed.yaml"))
    assert json.loads(flag(plan.leader_args, "--speculative-config") or "") == {
        "method": "mtp",
        "num_speculative_tokens": 3,
    }


def test_repairs_reach_the_container_env() -> None:
    _, objs = rendered(sample("vllm-63170-rtx-pp2-auto.yaml"))
    lws = kind(objs, "LeaderWorkerSet")[0]
    env = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"]
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": "38,40"} in env


def test_the_leader_worker_set_is_not_named_like_any_service_it_would_take_for_its_group_dns() -> None:
    # The LWS controller gives a group's pods their DNS names through a headless Service named after the
    # LeaderWorkerSet, and reuses a Service of that name if one exists: the serving Service's name would leave
    # workers unable to resolve their leader.
    _, objs = rendered(sample("vllm-63170-rtx-pp2-fixed.yaml"))
    (lws,) = kind(objs, "LeaderWorkerSet")
    assert lws["metadata"]["name"] == "glm53-nvfp4-rtx-pp2tp8-group"
    assert lws["metadata"]["name"] not in {o["metadata"]["name"] for o in kind(objs, "Service")}


def test_rocm_sparse_attention_gets_aiter_switched_on_and_the_bmm_switches_kept() -> None:
    plan, _ = rendered(sample("vllm-52833-fixed.yaml"))
    env = {e["name"]: e["value"] for e in plan.env}
    assert env["VLLM_ROCM_USE_AITER"] == "1"
    assert env["VLLM_ROCM_USE_AITER_FP4BMM"] == env["VLLM_ROCM_USE_AITER_FP8BMM"] == "0"


def test_single_node_replica_is_a_gated_deployment_that_never_drops_capacity() -> None:
    _, objs = rendered(sample("baseline-h200-glm53-fp8.yaml"))
    dep = kind(objs, "Deployment")[0]
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    pod = dep["spec"]["template"]["spec"]
    assert pod["readinessGates"] == [{"conditionType": CANARY_CONDITION}]
    assert pod["enableServiceLinks"] is False
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 1800
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}
    ]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert {v["name"] for v in pod["volumes"]} == {"shm", "model-cache"}


def test_every_object_is_owned_by_the_glmdeployment() -> None:
    _, objs = rendered(sample("baseline-h200-glm53-fp8.yaml"))
    assert {o["kind"] for o in objs} == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}
    for o in objs:
        assert o["metadata"]["ownerReferences"] == [{**OWNER, "controller": True, "blockOwnerDeletion": True}]


@pytest.mark.parametrize("name, size", [("vllm-58729-fixed.yaml", 2), ("vllm-63170-rtx-pp2-fixed.yaml", 2)])
def test_multi_node_replica_is_a_leader_worker_set_with_leader_and_headless_workers(name: str, size: int) -> None:
    _, objs = rendered(sample(name))
    lws = kind(objs, "LeaderWorkerSet")[0]["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == size
    leader = lws["leaderTemplate"]["spec"]["containers"][0]["args"]
    worker = lws["workerTemplate"]["spec"]["containers"][0]["args"]
    assert flag(leader, "--nnodes") == flag(worker, "--nnodes") == str(size)
    assert flag(leader, "--node-rank") == "0" and flag(worker, "--node-rank") == "$(LWS_WORKER_INDEX)"
    assert flag(leader, "--master-addr") == flag(worker, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
    assert "--headless" in worker and "--headless" not in leader
    assert flag(leader, "--port") == "8000" and "--port" not in worker
    assert "readinessGates" in lws["leaderTemplate"]["spec"]
    assert "startupProbe" not in lws["workerTemplate"]["spec"]["containers"][0]


def test_without_leader_worker_set_multi_node_replicas_become_indexed_stateful_sets() -> None:
    obj = sample("vllm-63170-rtx-pp2-fixed.yaml")
    obj["spec"]["replicas"] = 2
    _, objs = rendered(obj, lws=False)
    sets = kind(objs, "StatefulSet")
    assert [s["metadata"]["name"] for s in sets] == ["glm53-nvfp4-rtx-pp2tp8-0", "glm53-nvfp4-rtx-pp2tp8-1"]
    assert all(s["spec"]["replicas"] == 2 for s in sets)
    script = sets[0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--master-addr glm53-nvfp4-rtx-pp2tp8-0-0.glm53-nvfp4-rtx-pp2tp8-nodes.ns.svc" in script
    assert script.count("--headless") == 1 and '--node-rank "$GLMOPS_NODE_RANK"' in script
    assert any(s["spec"].get("clusterIP") == "None" for s in kind(objs, "Service"))


def test_alias_model_downloads_the_real_repository_and_serves_under_the_alias() -> None:
    plan, _ = rendered(B("a").model("zai-org/GLM-5.3-FP8").accelerator("H200").tensor(8).build())
    assert plan.leader_args[2] == "zai-org/GLM-5.3"
    assert flag(plan.leader_args, "--served-model-name") == "zai-org/GLM-5.3-FP8"


def test_token_secret_and_cache_claim_are_wired() -> None:
    obj = (
        B("t")
        .accelerator("H200")
        .tensor(8)
        .set("spec.model.tokenSecret", {"name": "hf"})
        .set("spec.modelCache", {"persistentVolumeClaim": "weights"})
        .build()
    )
    _, objs = rendered(obj)
    pod = kind(objs, "Deployment")[0]["spec"]["template"]["spec"]
    env = pod["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}} in env
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "weights"}} in pod["volumes"]


def test_command_hash_changes_with_the_command_only() -> None:
    a, _ = rendered(B("h").accelerator("H200").tensor(8).build())
    b, _ = rendered(B("h").accelerator("H200").tensor(8).replicas(3).build())
    c, _ = rendered(B("h").accelerator("H200").tensor(8).set("spec.engine.kvCacheDtype", "fp8").build())
    assert a.command_hash == b.command_hash != c.command_hash


def test_glmctl_render_refuses_what_admission_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(REPO / "samples" / "vllm-58729-broken.yaml")]) == 1
    assert "rule vllm-58729" in capsys.readouterr().err
    assert main(["render", "--no-lws", str(REPO / "samples" / "vllm-58729-fixed.yaml")]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert "StatefulSet" in kinds and "LeaderWorkerSet" not in kinds


@pytest.mark.parametrize("name", ["baseline-h200-glm53-fp8.yaml", "vllm-58729-fixed.yaml"])
def test_the_status_selector_picks_the_serving_pods_the_service_sends_traffic_to(name: str) -> None:
    plan, objs = rendered(sample(name))
    wanted = dict(term.split("=", 1) for term in serving_selector(plan.name).split(","))
    (service,) = kind(objs, "Service")
    assert service["spec"]["selector"] == wanted
    templates = [o["spec"]["template"] for o in kind(objs, "Deployment")] + [
        o["spec"]["leaderWorkerTemplate"][t]
        for o in kind(objs, "LeaderWorkerSet")
        for t in ("leaderTemplate", "workerTemplate")
    ]
    selected = [t for t in templates if wanted.items() <= t["metadata"]["labels"].items()]
    assert len(selected) == 1 and "readinessGates" in selected[0]["spec"]


def test_glmctl_render_writes_no_yaml_anchors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(REPO / "samples" / "vllm-63170-h200-pp8-fixed.yaml")]) == 0
    out = capsys.readouterr().out
    assert "&id" not in out and "*id" not in out
