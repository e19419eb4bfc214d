"""In-cluster image builds on the real control plane: deployments wait for the build, then run its digest.

The operator runs with image builds on, pushing to a registry on a closed loopback port (so the
"already in the registry?" check fails fast and the build goes ahead). kwok plays the builder: the
build pod's annotations (the operator's test-only GLMOPS_IMAGE_BUILD_POD_ANNOTATIONS) say which exit
code and termination message its container ends with, as the build script's digest or the kubelet's log
tail would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OperatorProcess
from tests.support.builders import GLMDeploymentBuilder
from tests.support.cluster import Cluster, Kubectl, eventually
from tests.support.wheel import build_plugin_wheel

pytestmark = pytest.mark.cluster
BUILD_NAMESPACE = "glmops-test-builds"
REGISTRY = "127.0.0.1:1/glmops"  # nothing listens there: the digest check fails and the build runs
DIGEST = "sha256:" + "5e" * 32
GOOD = "vllm-cuda-v0-33-0-glmops-1"
BAD = "vllm-cuda-v0-32-0-glmops-1"
BUILD_LOG_TAIL = "#9 ERROR: failed to push 127.0.0.1:1/glmops/vllm-openai:v0.32.0-glmops.1: connection refused"
FAKE_BUILDS = {
    # A build long enough to see the deployment wait, then the digest the build script writes as the message.
    GOOD: {"glmops.dev/fake-run-ms": "4000", "glmops.dev/fake-termination-message": DIGEST},
    # A failed build: the kubelet's FallbackToLogsOnError puts the log's tail into the message.
    BAD: {"glmops.dev/fake-exit-code": "1", "glmops.dev/fake-termination-message": BUILD_LOG_TAIL},
}


def _delete_images(kubectl: Kubectl) -> None:
    for name in (GOOD, BAD):
        kubectl.run("delete", "glmimage", name, "--ignore-not-found", "--wait=true", check=False)


@pytest.fixture(scope="module")
def build_operator(
    cluster: Cluster, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator with image builds on, in place of the session's (two operators would fight)."""
    kubectl = cluster.kubectl
    wheel = build_plugin_wheel(tmp_path_factory.mktemp("plugin"))
    kubectl.run("create", "namespace", BUILD_NAMESPACE, check=False)
    auth = {"auths": {"127.0.0.1:1": {"username": "bot", "password": "secret"}}}
    kubectl.run(
        "create", "secret", "docker-registry", "push", "-n", BUILD_NAMESPACE,
        "--from-file=.dockerconfigjson=/dev/stdin", input=json.dumps(auth), check=False,
    )  # fmt: skip
    _delete_images(kubectl)
    env = {
        "GLMOPS_IMAGE_BUILD_ENABLED": "true",
        "GLMOPS_IMAGE_BUILD_REGISTRY": REGISTRY,
        "GLMOPS_IMAGE_BUILD_INSECURE": "true",
        "GLMOPS_IMAGE_BUILD_NAMESPACE": BUILD_NAMESPACE,
        "GLMOPS_IMAGE_BUILD_PUSH_SECRET": "push",
        "GLMOPS_IMAGE_BUILD_PLUGIN_WHEEL": str(wheel),
        "GLMOPS_IMAGE_BUILD_POLL_SECONDS": "1",
        "GLMOPS_IMAGE_BUILD_POD_ANNOTATIONS": json.dumps(FAKE_BUILDS),
    }
    operator.stop()
    builds = OperatorProcess(cluster, extra_env=env, name="operator-image-build")
    try:
        builds.start()
        yield builds
    finally:
        builds.stop()
        _delete_images(kubectl)
        operator.start()


def _condition(kubectl: Kubectl, namespace: str, name: str, type_: str) -> dict[str, Any]:
    conds = kubectl.get("glmd", name, namespace).get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == type_), {})


def _deployment_image(kubectl: Kubectl, namespace: str, name: str) -> str | None:
    items = kubectl.get("deploy", namespace=namespace)["items"]
    found = [d for d in items if d["metadata"]["name"] == name]
    return found[0]["spec"]["template"]["spec"]["containers"][0]["image"] if found else None


def _jobs(kubectl: Kubectl, image: str) -> list[str]:
    out = kubectl.run("get", "jobs", "-n", BUILD_NAMESPACE, "-l", f"glmops.dev/image={image}", "-o", "name")
    return out.stdout.split()


def _apply(kubectl: Kubectl, namespace: str, name: str, version: str) -> None:
    kubectl.apply(GLMDeploymentBuilder(name).accelerator("H200").tensor(8).vllm(version).build(), "-n", namespace)


def test_deployments_wait_for_the_build_then_share_its_pinned_digest(
    kubectl: Kubectl, build_operator: OperatorProcess, namespace: str
) -> None:
    ref = f"{REGISTRY}/vllm-openai:v0.33.0-glmops.1"
    _apply(kubectl, namespace, "first", "0.33.0")
    waiting = eventually(
        lambda: (
            _condition(kubectl, namespace, "first", "ImageBuilding").get("reason") == "Building"
            and _condition(kubectl, namespace, "first", "ImageBuilding")
        ),
        timeout=30,
        what="the deployment to wait under ImageBuilding",
    )
    assert waiting["status"] == "True" and GOOD in waiting["message"]
    # No workload before the digest is known: a workload that exists already runs the pinned digest (the fake
    # build can finish between two reads on a loaded machine, so its absence alone would be a race).
    early = _deployment_image(kubectl, namespace, "first")
    assert early in (None, f"{ref}@{DIGEST}"), f"a workload ran {early} before its image was built and pinned"
    assert _condition(kubectl, namespace, "first", "Ready")["status"] == "False"

    image = eventually(
        lambda: (i := kubectl.get("glmimage", GOOD))["status"].get("phase") == "Succeeded" and i,
        timeout=60,
        what="the GLMImage to be built",
    )
    assert (image["status"]["digest"], image["status"]["imageRef"]) == (DIGEST, f"{ref}@{DIGEST}")
    assert eventually(lambda: _deployment_image(kubectl, namespace, "first"), timeout=30) == f"{ref}@{DIGEST}"
    # The workload is applied before the status that records it is written: wait for the status too.
    pinned = eventually(
        lambda: kubectl.get("glmd", "first", namespace)["status"]["plan"].get("imageDigest"),
        timeout=30,
        what="status.plan.imageDigest",
    )
    assert pinned == DIGEST
    assert eventually(
        lambda: _condition(kubectl, namespace, "first", "ImageBuilding")["reason"] == "Built",
        timeout=30,
        what="ImageBuilding to say Built",
    )

    _apply(kubectl, namespace, "second", "0.33.0")
    assert eventually(lambda: _deployment_image(kubectl, namespace, "second"), timeout=30) == f"{ref}@{DIGEST}"
    assert len(_jobs(kubectl, GOOD)) == 1, "one build serves every deployment of that version and platform"


def test_a_failed_build_leaves_the_deployment_unrendered_with_the_log_tail(
    kubectl: Kubectl, build_operator: OperatorProcess, namespace: str
) -> None:
    _apply(kubectl, namespace, "broken", "0.32.0")
    failed = eventually(
        lambda: (c := _condition(kubectl, namespace, "broken", "ImageBuilding")).get("reason") == "BuildFailed" and c,
        timeout=60,
        what="ImageBuilding False/BuildFailed",
    )
    assert failed["status"] == "False"
    assert BUILD_LOG_TAIL in failed["message"] and f"kubectl delete glmimage {BAD}" in failed["message"]
    image = kubectl.get("glmimage", BAD)["status"]
    assert image["phase"] == "Failed" and image["logTail"] == BUILD_LOG_TAIL
    assert _condition(kubectl, namespace, "broken", "Progressing")["reason"] == "ImageBuildFailed"
    assert _deployment_image(kubectl, namespace, "broken") is None


def test_the_build_job_mounts_the_context_and_the_push_secret(
    kubectl: Kubectl, build_operator: OperatorProcess, namespace: str
) -> None:
    _apply(kubectl, namespace, "ctx", "0.33.0")
    job_name = eventually(lambda: _jobs(kubectl, GOOD)[0].removeprefix("job.batch/"), timeout=30, what="a build Job")
    job = kubectl.get("job", job_name, BUILD_NAMESPACE)
    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    context = kubectl.get("configmap", volumes["context-src"]["configMap"]["name"], BUILD_NAMESPACE)
    assert "FROM vllm/vllm-openai:v${VLLM_VERSION}" in context["data"]["Dockerfile"]
    assert list(context["binaryData"]) == [Path(build_operator.env["GLMOPS_IMAGE_BUILD_PLUGIN_WHEEL"]).name]
    assert volumes["docker-config"]["secret"]["secretName"] == "push"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "GLMImage"
