"""Reconciliation on the real control plane: owned objects, pods on the right nodes, drift, updates, delete."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from tests.support.builders import gate_patch
from tests.support.cluster import REPO, Kubectl, eventually

pytestmark = pytest.mark.cluster
SAMPLES = REPO / "samples"


@pytest.fixture(autouse=True)
def _operator(operator: object) -> None:
    """Every test here needs the running operator."""


def _owned(kubectl: Kubectl, namespace: str, name: str) -> dict[str, list[str]]:
    out = kubectl.run(
        "get", "deploy,sts,svc,pdb,cm", "-n", namespace, "-l", f"glmops.dev/deployment={name}", "-o", "json"
    ).stdout
    kinds: dict[str, list[str]] = {}
    for item in yaml.safe_load(out)["items"]:
        kinds.setdefault(item["kind"], []).append(item["metadata"]["name"])
    return kinds


def _condition(kubectl: Kubectl, namespace: str, name: str, type_: str) -> dict[str, Any]:
    conds = kubectl.get("glmd", name, namespace).get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == type_), {})


def _pods(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.get("pods", namespace=namespace)["items"]
    return [
        p
        for p in items
        if p["metadata"]["labels"].get("glmops.dev/deployment") == name and not p["metadata"].get("deletionTimestamp")
    ]


def _pass_gate(kubectl: Kubectl, namespace: str, pod: str) -> None:
    patch = gate_patch()
    kubectl.run("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=strategic", "-p", patch)


@pytest.fixture
def baseline(kubectl: Kubectl, namespace: str) -> str:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "baseline-h200-glm53-fp8.yaml"))
    name = "glm53-fp8-h200-tp8"
    eventually(lambda: "Deployment" in _owned(kubectl, namespace, name), timeout=60, what="the Deployment")
    # The objects are applied before the status that records them is written: wait for both.
    eventually(
        lambda: "plan" in (kubectl.get("glmd", name, namespace).get("status") or {}), timeout=30, what="status.plan"
    )
    return name


def test_single_node_replica_runs_vllm_on_an_h200_node_with_eight_gpus(
    kubectl: Kubectl, namespace: str, baseline: str
) -> None:
    owned = _owned(kubectl, namespace, baseline)
    assert owned == {
        "ConfigMap": [f"{baseline}-canary"],
        "Deployment": [baseline],
        "Service": [baseline],
        "PodDisruptionBudget": [baseline],
    }
    pod = eventually(
        lambda: next(
            iter(p for p in _pods(kubectl, namespace, baseline) if p["status"].get("phase") == "Running"), None
        ),
        timeout=60,
    )
    assert pod["spec"]["nodeName"].startswith("gpu-h200-")
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    args = container["args"]
    assert args[0] == "zai-org/GLM-5.3" and args[args.index("--tensor-parallel-size") + 1] == "8"
    assert container["image"] == "ghcr.io/glmops/vllm-openai:v0.32.0-glmops.1"
    owner = kubectl.get("deployment", baseline, namespace)["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("GLMDeployment", baseline, True)
    status = kubectl.get("glmd", baseline, namespace)["status"]
    assert status["plan"]["image"] == container["image"] and status["plan"]["gpusPerPod"] == 8
    assert _condition(kubectl, namespace, baseline, "Progressing")["status"] == "True"


def test_ready_follows_the_readiness_gate_of_the_pods(kubectl: Kubectl, namespace: str, baseline: str) -> None:
    pod = eventually(
        lambda: next(
            iter(p for p in _pods(kubectl, namespace, baseline) if p["status"].get("phase") == "Running"), None
        ),
        timeout=60,
    )
    assert _condition(kubectl, namespace, baseline, "Ready").get("status") == "False"
    _pass_gate(kubectl, namespace, pod["metadata"]["name"])

    def ready() -> bool:
        status = kubectl.get("glmd", baseline, namespace)["status"]
        assert status.get("readyReplicas") == 1, status.get("readyReplicas")
        return _condition(kubectl, namespace, baseline, "Ready")["status"] == "True"

    eventually(ready, timeout=60, what="readyReplicas 1 and Ready True")
    assert "READY" in kubectl.run("get", "glmd", "-n", namespace).stdout


@pytest.mark.parametrize("kind", ["deployment", "service", "configmap", "poddisruptionbudget"])
def test_a_deleted_owned_object_is_restored(kubectl: Kubectl, namespace: str, baseline: str, kind: str) -> None:
    name = f"{baseline}-canary" if kind == "configmap" else baseline
    uid = kubectl.get(kind, name, namespace)["metadata"]["uid"]
    kubectl.run("delete", kind, name, "-n", namespace)
    eventually(
        lambda: kubectl.get(kind, name, namespace)["metadata"]["uid"] != uid,
        timeout=60,
        what=f"the operator to re-create the {kind}",
    )


def _refuse_services(kubectl: Kubectl, namespace: str) -> str:
    """An in-server policy refusing every new Service in `namespace` (as a quota or another team's policy would)."""
    name = f"refuse-services-{namespace}"[:63]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["services"]}
                ]
            },
            "validations": [{"expression": "false", "message": "no new Services here today"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    kubectl.run("apply", "-f", "-", input=yaml.safe_dump_all([policy, binding]))
    probe = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probe"}, "spec": {"ports": [{"port": 1}]}}
    )
    eventually(  # the API server enforces a new binding once its informer has it
        lambda: (
            kubectl.run("create", "--dry-run=server", "-n", namespace, "-f", "-", input=probe, check=False).returncode
            != 0
        ),
        timeout=30,
        what="the policy to refuse Services",
    )
    return name


def test_a_restore_the_api_server_refuses_is_retried_until_it_is_allowed(
    kubectl: Kubectl, namespace: str, baseline: str
) -> None:
    """No event follows a refused re-creation: the operator itself must try again (with backoff) and say why."""
    policy = _refuse_services(kubectl, namespace)
    try:
        kubectl.run("delete", "service", baseline, "-n", namespace)

        def warned() -> dict[str, Any]:
            events = kubectl.get("events", namespace=namespace)["items"]
            found = [e for e in events if e.get("reason") == "RefreshFailed"]
            assert found, [e.get("reason") for e in events]
            return found[0]

        event = eventually(warned, timeout=60, what="a RefreshFailed Warning on the GLMDeployment")
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == baseline
        assert "no new Services here today" in event["message"], "the API server's reason, where kubectl shows it"
        time.sleep(3)
        assert kubectl.run("get", "service", baseline, "-n", namespace, check=False).returncode != 0
    finally:
        kubectl.run("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy, check=False)
    eventually(
        lambda: kubectl.get("service", baseline, namespace)["metadata"]["name"] == baseline,
        timeout=60,
        what="the Service re-created by a retry once the policy is gone",
    )


def test_an_edited_owned_object_is_put_back(kubectl: Kubectl, namespace: str, baseline: str) -> None:
    kubectl.run("scale", "deployment", baseline, "-n", namespace, "--replicas=3")
    eventually(
        lambda: kubectl.get("deployment", baseline, namespace)["spec"]["replicas"] == 1,
        timeout=60,
        what="the replica count to be restored",
    )


def test_a_spec_change_is_rendered_and_applied(kubectl: Kubectl, namespace: str, baseline: str) -> None:
    before = kubectl.get("glmd", baseline, namespace)["status"]["plan"]["commandHash"]
    kubectl.run(
        "patch",
        "glmd",
        baseline,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"replicas":2,"engine":{"kvCacheDtype":"fp8"}}}',
    )

    def rolled() -> bool:
        dep = kubectl.get("deployment", baseline, namespace)
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        return dep["spec"]["replicas"] == 2 and args[args.index("--kv-cache-dtype") + 1] == "fp8"

    eventually(rolled, timeout=60, what="the Deployment to carry the new spec")
    eventually(
        lambda: kubectl.get("glmd", baseline, namespace)["status"]["plan"]["commandHash"] != before,
        timeout=30,
        what="status.plan to record the new command",
    )


def test_a_rolling_update_keeps_the_old_pod_until_the_new_one_passes_its_gate(
    kubectl: Kubectl, namespace: str, baseline: str
) -> None:
    old = eventually(
        lambda: next(
            iter(p for p in _pods(kubectl, namespace, baseline) if p["status"].get("phase") == "Running"), None
        ),
        timeout=60,
    )
    _pass_gate(kubectl, namespace, old["metadata"]["name"])
    # Only an available old pod is kept through the rollout: the Deployment controller removes unready old pods
    # first. Wait until it counts this one, as a serving pod is counted before anyone changes the spec.
    eventually(
        lambda: (kubectl.get("deployment", baseline, namespace).get("status") or {}).get("availableReplicas") == 1,
        timeout=60,
        what="the old pod to be available",
    )
    kubectl.run(
        "patch", "glmd", baseline, "-n", namespace, "--type=merge", "-p", '{"spec":{"engine":{"kvCacheDtype":"fp8"}}}'
    )

    def new_pod_running() -> dict[str, Any]:
        new = [p for p in _pods(kubectl, namespace, baseline) if p["metadata"]["name"] != old["metadata"]["name"]]
        assert new and new[0]["status"].get("phase") == "Running", new
        return new[0]

    new = eventually(new_pod_running, timeout=60, what="the new pod")
    names = {p["metadata"]["name"] for p in _pods(kubectl, namespace, baseline)}
    assert old["metadata"]["name"] in names, "the old pod serves until the new one is Ready"
    _pass_gate(kubectl, namespace, new["metadata"]["name"])
    eventually(
        lambda: old["metadata"]["name"] not in {p["metadata"]["name"] for p in _pods(kubectl, namespace, baseline)},
        timeout=60,
        what="the old pod to go once the new one is Ready",
    )


def test_deleting_the_glmdeployment_removes_everything_it_owned(
    kubectl: Kubectl, namespace: str, baseline: str
) -> None:
    kubectl.run("delete", "glmd", baseline, "-n", namespace, "--timeout=60s")
    eventually(lambda: _owned(kubectl, namespace, baseline) == {}, timeout=90, what="garbage collection")
    eventually(lambda: _pods(kubectl, namespace, baseline) == [], timeout=90, what="the pods to go")


def test_without_leader_worker_set_a_multi_node_replica_is_an_indexed_stateful_set(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "vllm-63170-rtx-pp2-fixed.yaml"))
    name = "glm53-nvfp4-rtx-pp2tp8"
    eventually(lambda: "StatefulSet" in _owned(kubectl, namespace, name), timeout=60)

    def both_running() -> list[dict[str, Any]]:
        pods = [p for p in _pods(kubectl, namespace, name) if p["status"].get("phase") == "Running"]
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        return pods

    pods = eventually(both_running, timeout=90, what="both nodes of the group")
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-rtx-pro-6000-0", "gpu-rtx-pro-6000-1"}
    script = pods[0]["spec"]["containers"][0]["command"][2]
    assert "--nnodes 2" in script and "--headless" in script and "VLLM_PP_LAYER_PARTITION" not in script
    env = {e["name"]: e for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["VLLM_PP_LAYER_PARTITION"]["value"] == "38,40"
    assert (
        env["GLMOPS_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['apps.kubernetes.io/pod-index']"
    )


def test_with_leader_worker_set_a_multi_node_replica_is_one_group_of_nodes(
    kubectl: Kubectl, namespace: str, leader_worker_set: None
) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "vllm-58729-fixed.yaml"))
    name = "glm53-mxfp4-gb200-dp8ep"

    def lws() -> dict[str, Any]:
        return kubectl.get("leaderworkerset", f"{name}-group", namespace)

    obj = eventually(lws, timeout=60, what="the LeaderWorkerSet")
    template = obj["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]["args"]
    worker = template["workerTemplate"]["spec"]["containers"][0]["args"]
    assert leader[leader.index("--data-parallel-size") + 1] == "8" and "--enable-expert-parallel" in leader
    assert "--headless" in worker and worker[worker.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert "StatefulSet" not in _owned(kubectl, namespace, name)


def test_an_operator_killed_mid_reconcile_leaves_no_duplicate_lost_or_orphaned_object(
    kubectl: Kubectl, namespace: str, operator: Any
) -> None:
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "baseline-gb200-glm53-nvfp4.yaml"))
    operator.stop(kill=True)  # SIGKILL: no graceful shutdown, whatever it was doing
    operator.start()
    name = "glm53-nvfp4-gb200-tp4"

    def settled() -> dict[str, list[str]]:
        owned = _owned(kubectl, namespace, name)
        assert owned == {
            "ConfigMap": [f"{name}-canary"],
            "Deployment": [name],
            "Service": [name],
            "PodDisruptionBudget": [name],
        }, owned
        glmd = kubectl.get("glmd", name, namespace)
        assert glmd["status"].get("observedGeneration") == glmd["metadata"]["generation"]
        return owned

    eventually(settled, timeout=90, what="one of each owned object after the restart")
    sets = [
        r
        for r in kubectl.get("replicasets", namespace=namespace)["items"]
        if r["metadata"]["labels"].get("glmops.dev/deployment") == name
    ]
    assert len(sets) == 1, "no second rollout from a restart"
    eventually(lambda: len(_pods(kubectl, namespace, name)) == 1, timeout=60, what="exactly one pod")
