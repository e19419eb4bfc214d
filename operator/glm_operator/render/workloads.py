"""Kubernetes objects for a serving plan: the workload, its Service, PDB and canary ConfigMap.

Replicas that fit one node become a Deployment (rolling update with no unavailable pod, so a new pod
must pass its readiness gate before an old one goes). Replicas that span nodes become a
LeaderWorkerSet when its CRD is installed (group size = nodes per replica), else one indexed
StatefulSet per replica behind a headless Service.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import (
    CANARY_CONDITION,
    LABEL_DEPLOYMENT,
    LABEL_POD_INDEX,
    LABEL_ROLE,
    LABEL_SERVING,
    MANAGED,
    ROLE_GROUP,
    SERVER_CONTAINER,
    selector,
)
from glm_operator.render import network
from glm_operator.render.plan import HTTP_PORT, LEADER_ADDRESS, NODE_RANK, Plan
from glm_operator.render.pod_settings import merge_pod_settings
from glm_operator.render.security import vllm_security_context
from glm_operator.render.storage import attach_model_cache

STARTUP_PROBE_SECONDS = 3600  # a 750 GB checkpoint can take most of an hour to download and load
SHM_LIMIT = "64Gi"
Owner = dict[str, Any]


def _labels_of(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": name,
        **MANAGED,
        LABEL_DEPLOYMENT: name,
    }


def labels(plan: Plan, role: str | None = None) -> dict[str, str]:
    out = _labels_of(plan.name)
    if role:
        out[LABEL_ROLE] = role
    return out


def serving_labels(name: str) -> dict[str, str]:
    """Labels of the pods that serve HTTP for the GLMDeployment `name` (one per replica or group)."""
    return {**_labels_of(name), LABEL_SERVING: "true"}


def serving_selector(name: str) -> str:
    """`serving_labels` as the label selector string the scale subresource reports (for an HPA or KEDA)."""
    return selector(dict(sorted(serving_labels(name).items())))


def _meta(plan: Plan, name: str, owner: Owner, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": plan.namespace,
        "labels": {**labels(plan), **(extra_labels or {})},
        "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
    }


def _affinity(plan: Plan) -> dict[str, Any]:
    terms = [{"key": k, "operator": "In", "values": list(v)} for k, v in plan.node_selector.items()]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}
        }
    }


def _probes(serving: bool) -> dict[str, Any]:
    if not serving:
        return {}  # headless nodes open no HTTP port
    get = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        # vLLM refuses connections until weights are loaded; /health answers 200 only after that.
        "startupProbe": {**get, "periodSeconds": 10, "failureThreshold": STARTUP_PROBE_SECONDS // 10},
        "livenessProbe": {**get, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
        "readinessProbe": {**get, "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3},
    }


def _volumes() -> list[dict[str, Any]]:
    return [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_LIMIT}}]


def _env(plan: Plan, glmd: GLMDeployment, extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [*extra, *plan.env]
    token = glmd.spec.model.token_secret
    if token is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    if plan.multi_node:
        env.append({"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env.extend(network.network_env(glmd.spec.network, {e["name"] for e in env}))
    return env


def _container(
    plan: Plan,
    glmd: GLMDeployment,
    args: list[str],
    serving: bool,
    extra_env: list[dict[str, Any]],
    shell: str | None = None,
) -> dict[str, Any]:
    gpus = {plan.resource_name: str(plan.gpus_per_pod)}
    container: dict[str, Any] = {
        "name": SERVER_CONTAINER,
        "image": plan.pinned_image,
        "env": _env(plan, glmd, extra_env),
        "resources": {"limits": dict(gpus), "requests": dict(gpus)},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
        "securityContext": vllm_security_context(network.added_capabilities(glmd.spec.network)),
        **_probes(serving),
    }
    if shell is not None:
        container["command"] = ["/bin/sh", "-c", shell]
    else:
        container["command"], container["args"] = args[:2], args[2:]
    if serving:
        container["ports"] = [{"name": "http", "containerPort": HTTP_PORT}]
    network.add_to_container(container, glmd.spec.network, plan.rdma_resource)
    return container


def pod_template(
    plan: Plan,
    glmd: GLMDeployment,
    role: str,
    args: list[str],
    serving: bool,
    gated: bool,
    extra_env: list[dict[str, Any]] | None = None,
    shell: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "enableServiceLinks": False,  # a Service named vllm would inject VLLM_PORT=tcp://... and break vLLM
        "affinity": _affinity(plan),
        "tolerations": [{"key": plan.resource_name, "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 60,
        "containers": [_container(plan, glmd, args, serving, extra_env or [], shell)],
        "volumes": _volumes(),
    }
    attach_model_cache(spec, plan, glmd)
    if gated:
        spec["readinessGates"] = [{"conditionType": CANARY_CONDITION}]
    template = {
        "metadata": {
            "labels": {**labels(plan, role), **({LABEL_SERVING: "true"} if serving else {})},
            "annotations": {"glmops.dev/command-hash": plan.command_hash, **network.pod_annotations(glmd.spec.network)},
        },
        "spec": spec,
    }
    return merge_pod_settings(template, glmd.spec.pod)


def _substitute(args: list[str], leader: str, rank: str) -> list[str]:
    return [a.replace(LEADER_ADDRESS, leader).replace(NODE_RANK, rank) for a in args]


def deployment(plan: Plan, glmd: GLMDeployment, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(plan, plan.name, owner),
        "spec": {
            "replicas": plan.replicas,
            "selector": {"matchLabels": labels(plan, "server")},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "progressDeadlineSeconds": STARTUP_PROBE_SECONDS + 600,
            "template": pod_template(plan, glmd, "server", plan.leader_args, serving=True, gated=True),
        },
    }


def group_set_name(name: str) -> str:
    """The LeaderWorkerSet's name: not the deployment's own, which its serving Service has.

    The LWS controller names the headless Service that gives a group's pods their DNS names (the leader address
    workers connect to) after the LeaderWorkerSet, and reuses whatever Service already has that name
    (sigs.k8s.io/lws pkg/utils/controller CreateHeadlessServiceIfNotExists): with the Service's name, workers could
    never resolve their leader.
    """
    return f"{name}-group"


def leader_worker_set(plan: Plan, glmd: GLMDeployment, owner: Owner) -> dict[str, Any]:
    assert plan.worker_args is not None
    leader_args = _substitute(plan.leader_args, "$(LWS_LEADER_ADDRESS)", "0")
    worker_args = _substitute(plan.worker_args, "$(LWS_LEADER_ADDRESS)", "$(LWS_WORKER_INDEX)")
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(plan, group_set_name(plan.name), owner),
        "spec": {
            "replicas": plan.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "leaderWorkerTemplate": {
                "size": plan.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(plan, glmd, "leader", leader_args, serving=True, gated=True),
                "workerTemplate": pod_template(plan, glmd, "worker", worker_args, serving=False, gated=False),
            },
        },
    }


def _group_script(leader: list[str], worker: list[str]) -> str:
    def line(args: list[str]) -> str:
        return " ".join('"$GLMOPS_NODE_RANK"' if a == NODE_RANK else shlex.quote(a) for a in args)

    return f'if [ "$GLMOPS_NODE_RANK" = "0" ]; then exec {line(leader)}; else exec {line(worker)}; fi'


def stateful_sets(plan: Plan, glmd: GLMDeployment, owner: Owner) -> list[dict[str, Any]]:
    """One indexed StatefulSet per replica; pod 0 leads, the others join it headless."""
    assert plan.worker_args is not None
    out = []
    for replica in range(plan.replicas):
        name = f"{plan.name}-{replica}"
        leader_dns = f"{name}-0.{plan.name}-nodes.{plan.namespace}.svc"
        leader = _substitute(plan.leader_args, leader_dns, NODE_RANK)
        worker = _substitute(plan.worker_args, leader_dns, NODE_RANK)
        rank_env = [
            {
                "name": "GLMOPS_NODE_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}},
            }
        ]
        template = pod_template(
            plan, glmd, "group", [], serving=True, gated=True, extra_env=rank_env, shell=_group_script(leader, worker)
        )
        template["metadata"]["labels"]["glmops.dev/replica"] = str(replica)
        container = template["spec"]["containers"][0]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            container.pop(probe, None)  # one template for leader and headless workers: no HTTP probe fits both
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": _meta(plan, name, owner, {"glmops.dev/replica": str(replica)}),
                "spec": {
                    "replicas": plan.nodes_per_replica,
                    "serviceName": f"{plan.name}-nodes",
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {**labels(plan, ROLE_GROUP), "glmops.dev/replica": str(replica)}},
                    "template": template,
                },
            }
        )
    return out


def services(plan: Plan, owner: Owner, headless: bool) -> list[dict[str, Any]]:
    serving = serving_labels(plan.name)
    if headless:  # StatefulSet groups: only pod 0 of each group serves HTTP
        serving[LABEL_POD_INDEX] = "0"
    out = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(plan, plan.name, owner),
            "spec": {"selector": serving, "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http"}]},
        }
    ]
    if headless:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _meta(plan, f"{plan.name}-nodes", owner),
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels(plan)},
            }
        )
    return out


def disruption_budget(plan: Plan, owner: Owner) -> dict[str, Any]:
    # One serving pod (or group leader) at a time may be drained; more would cut capacity further.
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(plan, plan.name, owner),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": serving_labels(plan.name)}},
    }


def canary_config(plan: Plan, glmd: GLMDeployment, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan, f"{plan.name}-canary", owner),
        "data": {"canary.json": json.dumps(glmd.spec.canary.model_dump(by_alias=True), sort_keys=True)},
    }


def render_objects(plan: Plan, glmd: GLMDeployment, owner: Owner, lws_available: bool) -> list[dict[str, Any]]:
    """Every object the operator applies for one GLMDeployment, in apply order."""
    objects: list[dict[str, Any]] = [canary_config(plan, glmd, owner)]
    if not plan.multi_node:
        objects.append(deployment(plan, glmd, owner))
    elif lws_available:
        objects.append(leader_worker_set(plan, glmd, owner))
    else:
        objects.extend(stateful_sets(plan, glmd, owner))
    objects.extend(services(plan, owner, headless=plan.multi_node and not lws_available))
    objects.append(disruption_budget(plan, owner))
    return objects
