"""Model storage (spec.modelCache): the volume each mode renders, the shared claim's download gate, the findings."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import yaml

from glm_operator.api import GLMDeployment
from glm_operator.catalog.bundle import Catalogs
from glm_operator.cli.render import render
from glm_operator.planner.deployment import Observed, Outcome, plan
from glm_operator.planner.stored import parse_stored
from glm_operator.render.plan import build_plan
from glm_operator.render.storage import DownloadSettings, download_state
from glm_operator.render.workloads import render_objects
from glm_operator.rules.engine import admit, evaluate
from glm_operator.rules.storage import quantity_bytes
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import REPO

CATALOGS = Catalogs.packaged()
OWNER = {"apiVersion": "glmops.dev/v1alpha1", "kind": "GLMDeployment", "name": "glm", "uid": "uid-1"}
FP8 = "zai-org/GLM-5.3"  # 756 GB in the catalog
BF16 = "zai-org/GLM-5"  # 1510 GB


def single_node(model: str = FP8) -> B:
    return B("glm").model(model).accelerator("H200").tensor(8).vllm("0.33.0")


def multi_node() -> B:
    return single_node().pipeline(2)


def shared(builder: B, **fields: Any) -> B:
    return builder.set("spec.modelCache.shared", fields)


def pod_spec(builder: B) -> dict[str, Any]:
    glmd = GLMDeployment.model_validate(builder.namespace("ns").build())
    objects = render_objects(build_plan(glmd, CATALOGS), glmd, OWNER, lws_available=False)
    workload = next(o for o in objects if o["kind"] in ("Deployment", "StatefulSet"))
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def cache_volume(spec: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in spec["volumes"] if v["name"] == "model-cache")


def env_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}


# --- Rendering ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "builder, volume",
    [
        # 756 GB x 1.1 = 831.6e9 bytes = 774.5 GiB, rounded up.
        (single_node(), {"emptyDir": {"sizeLimit": "775Gi"}}),
        (single_node(BF16), {"emptyDir": {"sizeLimit": "1547Gi"}}),
        (single_node("nobody/unknown-model"), {"emptyDir": {"sizeLimit": "1Ti"}}),
        (single_node().set("spec.modelCache.sizeLimit", "2Ti"), {"emptyDir": {"sizeLimit": "2Ti"}}),
        (
            single_node().set("spec.modelCache.persistentVolumeClaim", "weights"),
            {"persistentVolumeClaim": {"claimName": "weights"}},
        ),
        (shared(single_node()), {"persistentVolumeClaim": {"claimName": "glm-model-cache", "readOnly": True}}),
        (
            single_node().set("spec.modelCache.nodeCache", {"path": "/var/lib/glmops/nvme"}),
            {"hostPath": {"path": "/var/lib/glmops/nvme", "type": "DirectoryOrCreate"}},
        ),
    ],
    ids=["catalog-fp8", "catalog-bf16", "unknown-model-fallback", "size-limit-set", "user-claim", "shared", "node"],
)
def test_each_cache_mode_renders_its_volume(builder: B, volume: dict[str, Any]) -> None:
    assert cache_volume(pod_spec(builder)) == {"name": "model-cache", **volume}


@pytest.mark.parametrize(
    "builder, read_only, offline, init",
    [
        (single_node(), False, False, False),
        (single_node().set("spec.modelCache.persistentVolumeClaim", "weights"), False, False, False),
        (shared(single_node()), True, True, False),
        (single_node().set("spec.modelCache.nodeCache", {}), False, True, True),
    ],
    ids=["emptyDir", "user-claim", "shared", "node"],
)
def test_only_filled_caches_run_offline_and_only_the_shared_claim_is_read_only(
    builder: B, read_only: bool, offline: bool, init: bool
) -> None:
    spec = pod_spec(builder)
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "model-cache")
    assert mount["mountPath"] == "/root/.cache/huggingface"
    assert mount.get("readOnly", False) is read_only
    assert (env_of(spec).get("HF_HUB_OFFLINE") == "1") is offline
    assert ("initContainers" in spec) is init


def test_statefulset_groups_mount_the_shared_claim_read_only_too() -> None:
    spec = pod_spec(shared(multi_node()))
    assert cache_volume(spec)["persistentVolumeClaim"]["readOnly"] is True
    assert env_of(spec)["HF_HUB_OFFLINE"] == "1"


def test_node_cache_fills_once_per_node_under_a_lock_keyed_by_model_and_revision() -> None:
    spec = pod_spec(single_node().set("spec.model.revision", "v1.0").set("spec.modelCache.nodeCache", {}))
    init = spec["initContainers"][0]
    script = init["command"][2]
    assert init["command"][:2] == ["python3", "-c"] and "fcntl.flock" in script and ".complete" in script
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["GLMOPS_MODEL"] == FP8 and env["GLMOPS_REVISION"] == "v1.0" and len(env["GLMOPS_CACHE_KEY"]) == 10
    assert init["volumeMounts"] == [{"name": "model-cache", "mountPath": "/root/.cache/huggingface"}]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # it only writes files root owns


def test_quantities_are_read_in_binary_and_decimal_units() -> None:
    assert [quantity_bytes(q) for q in ("1Ki", "1.5T", "800Gi", "7")] == [1024, 1.5e12, 800 * 2**30, 7]


# --- The planner's download gate --------------------------------------------------------------------------------------


def stored(builder: B) -> dict[str, Any]:
    body = copy.deepcopy(admit(builder.namespace("ns").build(), CATALOGS).patched)
    body["metadata"] |= {"uid": "uid-1", "generation": 1}
    return body


def job_with(conditions: list[dict[str, Any]], name: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "status": {"conditions": conditions, **status},
    }


def conditions(outcome: Outcome) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in outcome.status_patch()["conditions"]}


def first_plan(builder: B) -> tuple[dict[str, Any], Outcome]:
    body = stored(builder)
    return body, plan(parse_stored(body), Observed(), CATALOGS)


def job_name(outcome: Outcome) -> str:
    return next(o["metadata"]["name"] for o in outcome.apply if o["kind"] == "Job")


def test_shared_cache_first_creates_only_the_claim_and_the_download_job() -> None:
    _body, outcome = first_plan(shared(single_node(), storageClassName="fast"))
    assert [o["kind"] for o in outcome.apply] == ["PersistentVolumeClaim", "Job"]
    claim, job = outcome.apply
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "775Gi"}},
        "storageClassName": "fast",
    }
    assert "ownerReferences" not in claim["metadata"]  # retained by default
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert job["spec"]["backoffLimit"] == 2 and job["spec"]["activeDeadlineSeconds"] == 21600
    conds = conditions(outcome)
    assert conds["Progressing"]["status"] == "True" and conds["Progressing"]["reason"] == "ModelDownloading"
    assert conds["Ready"]["reason"] == "ModelDownloading" and conds["Degraded"]["status"] == "False"


def test_download_job_fetches_the_served_repo_at_its_revision_with_the_namespaced_token() -> None:
    builder = shared(single_node()).set("spec.model.revision", "abc123")
    builder = builder.set("spec.model.tokenSecret", {"name": "hf", "key": "token"})
    _body, outcome = first_plan(builder)
    job = next(o for o in outcome.apply if o["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["GLMOPS_MODEL"]["value"] == FP8 and env["GLMOPS_REVISION"]["value"] == "abc123"
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert "snapshot_download" in container["command"][2] and container["command"][:2] == ["python3", "-c"]
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "glm-model-cache"}


def test_the_download_pod_is_locked_down_and_pulls_as_the_serving_pods_do() -> None:
    pod = {
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccountName": "glm-sa",
        "priorityClassName": "inference",
        "nodeSelector": {"pool": "gpu-a"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "glm", "effect": "NoSchedule"}],
        "labels": {"team": "ml", "app.kubernetes.io/part-of": "glm"},
        "annotations": {"sidecar.istio.io/inject": "true"},
    }
    _body, outcome = first_plan(shared(single_node()).set("spec.pod", pod))
    job = next(o for o in outcome.apply if o["kind"] == "Job")
    template = job["spec"]["template"]
    spec = template["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["serviceAccountName"] == "glm-sa"
    assert spec["priorityClassName"] == "inference" and spec["nodeSelector"] == {"pool": "gpu-a"}
    assert spec["tolerations"] == pod["tolerations"]
    assert template["metadata"]["labels"]["team"] == "ml"
    # A mesh sidecar would never exit, and the Job would never complete.
    assert "sidecar.istio.io/inject" not in template["metadata"]["annotations"]
    (container,) = spec["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "nvidia.com/gpu" not in container["resources"]["requests"] and "affinity" not in spec


def test_without_pod_settings_the_download_pod_has_only_its_own() -> None:
    _body, outcome = first_plan(shared(single_node()))
    spec = next(o for o in outcome.apply if o["kind"] == "Job")["spec"]["template"]["spec"]
    assert not {"imagePullSecrets", "serviceAccountName", "priorityClassName", "nodeSelector", "tolerations"} & set(
        spec
    )


@pytest.mark.parametrize(
    "job_status, phase",
    [
        ({}, "Running"),
        ({"active": 1, "failed": 1}, "Running"),
        ({"conditions": [{"type": "Complete", "status": "True"}]}, "Succeeded"),
        ({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}, "Failed"),
        ({"conditions": [{"type": "Failed", "status": "False"}]}, "Running"),
    ],
)
def test_download_state_follows_the_jobs_conditions(job_status: dict[str, Any], phase: str) -> None:
    job = {"metadata": {"name": "j"}, "status": job_status}
    assert download_state(job, "j").phase == phase
    assert download_state(None, "j").phase == "Pending"


def test_a_running_download_keeps_the_workload_back() -> None:
    body, first = first_plan(shared(single_node()))
    name = job_name(first)
    owned = (*first.apply[:1], job_with([], name, active=1))
    outcome = plan(parse_stored(body), Observed(owned=owned), CATALOGS)
    assert outcome.apply == () and outcome.delete == ()
    assert "running (1 pod(s) active)" in conditions(outcome)["Progressing"]["message"]


def test_a_succeeded_download_lets_the_workload_mount_the_claim() -> None:
    body, first = first_plan(shared(single_node()))
    done = job_with([{"type": "Complete", "status": "True"}], job_name(first))
    outcome = plan(parse_stored(body), Observed(owned=(first.apply[0], done)), CATALOGS)
    kinds = [o["kind"] for o in outcome.apply]
    assert kinds == ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]  # the Job and claim are not re-sent
    conds = conditions(outcome)
    assert (
        conds["Progressing"]["reason"] == "Applied"
        and "shared claim glm-model-cache" in conds["Progressing"]["message"]
    )


def test_a_failed_download_is_degraded_with_the_jobs_message_and_a_warning() -> None:
    body, first = first_plan(shared(single_node()))
    failed = job_with(
        [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the limit",
            }
        ],
        job_name(first),
    )
    outcome = plan(parse_stored(body), Observed(owned=(first.apply[0], failed)), CATALOGS)
    conds = conditions(outcome)
    assert conds["Degraded"]["status"] == "True" and conds["Degraded"]["reason"] == "ModelDownloadFailed"
    assert "BackoffLimitExceeded: Job has reached the limit" in conds["Degraded"]["message"]
    assert conds["Progressing"]["status"] == "False"
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", "ModelDownloadFailed")]
    assert outcome.apply == ()


def test_a_new_revision_is_a_new_job_and_the_old_one_goes_while_the_old_workload_keeps_serving() -> None:
    body, first = first_plan(shared(single_node()))
    old = job_with([{"type": "Complete", "status": "True"}], job_name(first))
    running = plan(parse_stored(body), Observed(owned=(first.apply[0], old)), CATALOGS)
    deployment = next(o for o in running.apply if o["kind"] == "Deployment")
    moved = stored(shared(single_node()).set("spec.model.revision", "v2"))
    outcome = plan(parse_stored(moved), Observed(owned=(first.apply[0], old, deployment)), CATALOGS)
    assert [o["kind"] for o in outcome.apply] == ["Job"] and job_name(outcome) != old["metadata"]["name"]
    assert outcome.delete == (("batch/v1", "Job", old["metadata"]["name"]),)
    assert conditions(outcome)["Progressing"]["reason"] == "ModelDownloading"


@pytest.mark.parametrize("retain, owned", [(True, False), (False, True)])
def test_retain_decides_whether_the_claim_is_owned(retain: bool, owned: bool) -> None:
    _body, outcome = first_plan(shared(single_node(), retain=retain))
    claim = outcome.apply[0]
    assert ("ownerReferences" in claim["metadata"]) is owned


def test_leaving_the_shared_mode_deletes_the_job_but_never_a_retained_claim() -> None:
    body, first = first_plan(shared(single_node()))
    done = job_with([{"type": "Complete", "status": "True"}], job_name(first))
    claim = first.apply[0]
    outcome = plan(parse_stored(stored(single_node())), Observed(owned=(claim, done)), CATALOGS)
    assert outcome.delete == (("batch/v1", "Job", done["metadata"]["name"]),)
    owned_claim = {**claim, "metadata": {**claim["metadata"], "ownerReferences": [OWNER]}}
    outcome = plan(parse_stored(stored(single_node())), Observed(owned=(owned_claim, done)), CATALOGS)
    assert ("v1", "PersistentVolumeClaim", "glm-model-cache") in outcome.delete
    assert body  # the first body is unchanged by planning


def test_test_annotations_reach_only_the_named_deployments_download_pods() -> None:
    settings = DownloadSettings.from_env(
        {"GLMOPS_MODEL_DOWNLOAD_POD_ANNOTATIONS": '{"glm": {"a": "1"}, "x": {"b": "2"}}'}
    )
    outcome = plan(parse_stored(stored(shared(single_node()))), Observed(), CATALOGS, settings)
    job = next(o for o in outcome.apply if o["kind"] == "Job")
    assert job["spec"]["template"]["metadata"]["annotations"] == {"a": "1"}


# --- Findings ------------------------------------------------------------------------------------------------------


def findings(builder: B) -> dict[tuple[str, str], str]:
    return {
        (f.rule, f.severity): f.message for f in evaluate(builder.build(), CATALOGS) if f.rule.startswith("storage/")
    }


@pytest.mark.parametrize(
    "builder, rule, severity, fragment",
    [
        (
            shared(single_node()).set("spec.modelCache.persistentVolumeClaim", "weights"),
            "storage/one-mode",
            "error",
            "spec.modelCache: persistentVolumeClaim, shared: sets 2 cache modes at once",
        ),
        (
            shared(single_node()).set("spec.modelCache.nodeCache", {}),
            "storage/one-mode",
            "error",
            "Keep one of shared, nodeCache",
        ),
        (shared(single_node(), size="500Gi"), "storage/size", "error", "spec.modelCache.shared.size: 500Gi: smaller"),
        (shared(single_node(), size="800Gi"), "storage/size", "error", None),
        (single_node(BF16).set("spec.modelCache.sizeLimit", "1Ti"), "storage/size", "warning", "Set at least 1547Gi"),
        (single_node().set("spec.modelCache.sizeLimit", "1Ti"), "storage/size", "warning", None),
        (
            shared(single_node(), accessModes=["ReadOnlyMany"]),
            "storage/access-modes",
            "error",
            "no writable access mode",
        ),
        (
            shared(single_node().replicas(2), accessModes=["ReadWriteOnce"]),
            "storage/access-modes",
            "warning",
            "2 pods mount the claim",
        ),
        (shared(single_node(), accessModes=["ReadWriteOnce"]), "storage/access-modes", "warning", None),
        (
            shared(single_node()).set("spec.modelCache.sizeLimit", "1Ti"),
            "storage/size-limit",
            "warning",
            "spec.modelCache.sizeLimit: 1Ti: sizes the emptyDir, which shared replaces",
        ),
        (
            single_node().set("spec.modelCache.persistentVolumeClaim", "w").set("spec.modelCache.sizeLimit", "1Ti"),
            "storage/size-limit",
            "warning",
            None,
        ),
    ],
)
def test_storage_findings(builder: B, rule: str, severity: str, fragment: str | None) -> None:
    found = findings(builder)
    if fragment is None:
        assert (rule, severity) not in found
    else:
        assert fragment in found[(rule, severity)]
        assert found[(rule, severity)].endswith(".")


def test_two_modes_are_refused_at_admission_with_the_field_and_the_fix() -> None:
    result = admit(shared(single_node()).set("spec.modelCache.nodeCache", {}).build(), CATALOGS)
    assert not result.allowed
    assert "spec.modelCache: shared, nodeCache" in result.rejection()


def test_glmctl_render_shows_the_claim_and_download_job_before_the_workload() -> None:
    out = io.StringIO()
    assert render([str(REPO / "samples/pvc-cached.yaml")], lws=False, stdout=out) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out.getvalue())]
    assert kinds[:3] == ["PersistentVolumeClaim", "Job", "ConfigMap"] and "Deployment" in kinds
