"""The model cache of a GLMDeployment's pods (spec.modelCache), and the claim and download Job of its shared mode.

Pure: a plan and the spec in, Kubernetes objects out. Weights go into the Hugging Face cache layout
(`hub/models--org--name/...`) under /root/.cache/huggingface, the directory vLLM's loader reads by repo id, so a
cache filled by the download Job or the node's init container is found with HF_HUB_OFFLINE=1 and no network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import LABEL_ROLE
from glm_operator.api.storage import FALLBACK_SIZE, HEADROOM, CacheMode, size_for
from glm_operator.render.plan import Plan
from glm_operator.render.pod_settings import pod_identity
from glm_operator.render.security import vllm_security_context

HF_CACHE = "/root/.cache/huggingface"
VOLUME = "model-cache"
DOWNLOAD_CONTAINER = "download"
DOWNLOAD_BACKOFF_LIMIT = 2  # a retried pod resumes the shards already on the claim; more retries hide a real fault
ROLE_DOWNLOAD = "download"
DOWNLOAD_POD_ANNOTATIONS_ENV = "GLMOPS_MODEL_DOWNLOAD_POD_ANNOTATIONS"

# Run by `python3 -c` in the vLLM image (it ships huggingface_hub). Arguments come from the environment, never
# from the script's text, so a model id cannot be read as code.
DOWNLOAD_SCRIPT = """\
import os
from huggingface_hub import snapshot_download
path = snapshot_download(repo_id=os.environ["GLMOPS_MODEL"], revision=os.environ.get("GLMOPS_REVISION") or None)
print("downloaded", os.environ["GLMOPS_MODEL"], "to", path)
"""
# The per-node cache: one download per model+revision and node. The lock is per model+revision, so two pods of one
# deployment on a node wait for one download; the marker is written last, so a download cut short is resumed.
NODE_CACHE_SCRIPT = """\
import fcntl, os, pathlib
from huggingface_hub import snapshot_download
key = os.environ["GLMOPS_CACHE_KEY"]
state = pathlib.Path(os.environ["HF_HOME"]) / "glmops"
state.mkdir(parents=True, exist_ok=True)
with open(state / (key + ".lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    marker = state / (key + ".complete")
    if marker.exists():
        print("cached on this node:", os.environ["GLMOPS_MODEL"])
    else:
        snapshot_download(repo_id=os.environ["GLMOPS_MODEL"], revision=os.environ.get("GLMOPS_REVISION") or None)
        marker.write_text(os.environ["GLMOPS_MODEL"] + "@" + (os.environ.get("GLMOPS_REVISION") or "main") + "\\n")
"""


@dataclass(frozen=True)
class CacheSize:
    """The size of the emptyDir or shared claim, and where it came from (said in status and docs)."""

    quantity: str
    source: Literal["spec", "catalog", "fallback"]

    def describe(self) -> str:
        if self.source == "spec":
            return f"{self.quantity} (set in the spec)"
        if self.source == "catalog":
            return f"{self.quantity} (the model catalog's checkpoint size plus {HEADROOM:.0%} headroom)"
        return f"{self.quantity} (the model is not in the catalog; the fallback size)"


def catalog_size(weight_gb: float | None) -> CacheSize:
    """The checkpoint's size plus headroom in whole GiB, or the fallback for a model the catalog does not know."""
    if weight_gb is None:
        return CacheSize(FALLBACK_SIZE, "fallback")
    return CacheSize(size_for(weight_gb), "catalog")


def cache_size(plan: Plan, glmd: GLMDeployment) -> CacheSize:
    """The size of the volume the mode in use needs: set in the spec, else from the catalog."""
    cache = glmd.spec.model_cache
    wanted = cache.shared.size if cache.mode is CacheMode.SHARED and cache.shared else cache.size_limit
    return CacheSize(wanted, "spec") if wanted else catalog_size(plan.weight_gb)


def claim_name(deployment: str) -> str:
    """The shared claim of a deployment: stable, so a retained claim is found again by a re-created deployment."""
    return f"{deployment}-model-cache"


def revision_key(model_repo: str, revision: str | None) -> str:
    """A short hash of model and revision: a new one means a new download."""
    return hashlib.sha256(f"{model_repo}@{revision or ''}".encode()).hexdigest()[:10]


def download_job_name(plan: Plan, glmd: GLMDeployment) -> str:
    """`<deployment>-download-<hash of model and revision>`, within the 63 characters a Job name may have."""
    return f"{plan.name[:42]}-download-{revision_key(plan.model_repo, glmd.spec.model.revision)}"


def _volume_source(plan: Plan, glmd: GLMDeployment) -> dict[str, Any]:
    cache = glmd.spec.model_cache
    mode = cache.mode
    if mode is CacheMode.CLAIM:
        return {"persistentVolumeClaim": {"claimName": cache.persistent_volume_claim}}
    if mode is CacheMode.SHARED:
        return {"persistentVolumeClaim": {"claimName": claim_name(plan.name), "readOnly": True}}
    if mode is CacheMode.NODE and cache.node_cache is not None:
        return {"hostPath": {"path": cache.node_cache.path, "type": "DirectoryOrCreate"}}
    return {"emptyDir": {"sizeLimit": cache_size(plan, glmd).quantity}}


def _download_env(plan: Plan, glmd: GLMDeployment) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": HF_CACHE},
        {"name": "GLMOPS_MODEL", "value": plan.model_repo},
    ]
    if glmd.spec.model.revision:
        env.append({"name": "GLMOPS_REVISION", "value": glmd.spec.model.revision})
    token = glmd.spec.model.token_secret
    if token is not None:  # a Secret of the deployment's namespace: a SecretKeyRef names no other
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    return env


def _node_cache_init(plan: Plan, glmd: GLMDeployment) -> dict[str, Any]:
    key = revision_key(plan.model_repo, glmd.spec.model.revision)
    return {
        "name": "fill-node-cache",
        "image": plan.pinned_image,
        "command": ["python3", "-c", NODE_CACHE_SCRIPT],
        "env": [*_download_env(plan, glmd), {"name": "GLMOPS_CACHE_KEY", "value": key}],
        "volumeMounts": [{"name": VOLUME, "mountPath": HF_CACHE}],
        "securityContext": vllm_security_context(),
    }


def attach_model_cache(pod_spec: dict[str, Any], plan: Plan, glmd: GLMDeployment) -> None:
    """Add the cache volume, its mount and environment to each container, and the node cache's fill step."""
    mode = glmd.spec.model_cache.mode
    pod_spec.setdefault("volumes", []).append({"name": VOLUME, **_volume_source(plan, glmd)})
    read_only = mode is CacheMode.SHARED
    for container in pod_spec["containers"]:
        mount: dict[str, Any] = {"name": VOLUME, "mountPath": HF_CACHE}
        if read_only:
            mount["readOnly"] = True
        container.setdefault("volumeMounts", []).append(mount)
        if mode in (CacheMode.SHARED, CacheMode.NODE):
            # The weights are on the volume before vLLM starts; offline, it never reaches for the Hub. HF_HOME names
            # the directory the download used, whatever user the container runs as.
            container.setdefault("env", []).extend(
                [{"name": "HF_HOME", "value": HF_CACHE}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
            )
    if mode is CacheMode.NODE:
        pod_spec.setdefault("initContainers", []).append(_node_cache_init(plan, glmd))


def _owned_meta(plan: Plan, name: str, labels: dict[str, str], owner: Mapping[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": plan.namespace, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
    return meta


def shared_claim(plan: Plan, glmd: GLMDeployment, labels: dict[str, str], owner: Mapping[str, Any]) -> dict[str, Any]:
    """The claim of the shared mode; without an owner when retained, so deleting the deployment keeps it."""
    shared = glmd.spec.model_cache.shared
    assert shared is not None
    spec: dict[str, Any] = {
        "accessModes": [m.value for m in shared.access_modes],
        "resources": {"requests": {"storage": cache_size(plan, glmd).quantity}},
    }
    if shared.storage_class_name:
        spec["storageClassName"] = shared.storage_class_name
    meta = _owned_meta(plan, claim_name(plan.name), labels, None if shared.retain else owner)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


@dataclass(frozen=True)
class DownloadSettings:
    """Operator-wide settings of download Jobs."""

    # Test-only: annotations on the download pods, by GLMDeployment name ("*": every one), so the fake kubelet
    # (cluster/kwok-stages.yaml) knows which exit code to report. Real clusters leave it empty.
    pod_annotations: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DownloadSettings:
        raw = json.loads(env.get(DOWNLOAD_POD_ANNOTATIONS_ENV) or "{}")
        return cls({str(k): {str(a): str(b) for a, b in dict(v).items()} for k, v in dict(raw).items()})

    def annotations(self, deployment: str) -> dict[str, str]:
        return {**self.pod_annotations.get("*", {}), **self.pod_annotations.get(deployment, {})}


def _download_pod_settings(glmd: GLMDeployment) -> dict[str, Any]:
    """What the download pod takes from spec.pod: it pulls the same image (pull secrets, ServiceAccount) onto the
    same node pool (tolerations, nodeSelector, priority). Not the GPU affinity, requests or volumes of the serving
    pods, and not their annotations: a service mesh's injected sidecar would keep the Job from ever completing."""
    pod = glmd.spec.pod
    out = pod_identity(pod)
    if pod.node_selector:
        out["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        out["tolerations"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in pod.tolerations]
    return out


def download_job(
    plan: Plan, glmd: GLMDeployment, labels: dict[str, str], owner: Mapping[str, Any], settings: DownloadSettings
) -> dict[str, Any]:
    """The one-time Job that fills the shared claim with the model at its revision (owned: deleted with it)."""
    shared = glmd.spec.model_cache.shared
    assert shared is not None
    pod_labels = {**labels, LABEL_ROLE: ROLE_DOWNLOAD}
    container = {
        "name": DOWNLOAD_CONTAINER,
        "image": plan.pinned_image,
        "command": ["python3", "-c", DOWNLOAD_SCRIPT],
        "env": _download_env(plan, glmd),
        "volumeMounts": [{"name": VOLUME, "mountPath": HF_CACHE}],
        "terminationMessagePolicy": "FallbackToLogsOnError",  # the failure's last lines reach the Job's pod
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
        "securityContext": vllm_security_context(),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim_name(plan.name)}}],
    }
    pod_spec.update(_download_pod_settings(glmd))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _owned_meta(plan, download_job_name(plan, glmd), labels, owner),
        "spec": {
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "activeDeadlineSeconds": shared.download_deadline_seconds,
            "template": {
                "metadata": {
                    "labels": {**glmd.spec.pod.labels, **pod_labels},
                    "annotations": settings.annotations(plan.name),
                },
                "spec": pod_spec,
            },
        },
    }


@dataclass(frozen=True)
class DownloadState:
    """Where a download Job stands."""

    phase: Literal["Pending", "Running", "Succeeded", "Failed"]
    message: str


def download_state(job: dict[str, Any] | None, name: str) -> DownloadState:
    """The state of the download Job `name` as listed (None: not created yet)."""
    if job is None:
        return DownloadState("Pending", f"creating download Job {name}")
    conditions = (job.get("status") or {}).get("conditions") or []
    done = {c.get("type"): c for c in conditions if c.get("status") == "True"}
    if "Complete" in done:
        return DownloadState("Succeeded", f"download Job {name} succeeded")
    failed = done.get("Failed")
    if failed is not None:
        reason = failed.get("reason") or "Failed"
        detail = failed.get("message") or "no message"
        return DownloadState("Failed", f"download Job {name} failed: {reason}: {detail}")
    active = int((job.get("status") or {}).get("active") or 0)
    retries = int((job.get("status") or {}).get("failed") or 0)
    tried = f" after {retries} failed attempt(s)" if retries else ""
    return DownloadState("Running", f"download Job {name} running ({active} pod(s) active{tried})")
