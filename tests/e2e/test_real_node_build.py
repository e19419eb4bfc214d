"""A GLMImage built for real on the real node: the operator's build Job in a pod under the kubelet, pushing to a
registry that runs in the cluster, and the image then pulled by digest by the node's containerd.

- The registry: the distribution project's registry (built from its Go module, in an image made here) as a pod on
  the real node, behind a Service with a fixed cluster IP; the node's containerd reaches it over plain HTTP through
  a `hosts.toml` (cluster/node-lib.sh gives containerd a `certs.d` directory, as an administrator configures one).
- The builder: BuildKit's rootless image made here (images/buildkit), imported into the node's containerd under the
  reference the Job renders, so nothing is pulled from outside.
- The operator runs as a process beside the cluster with image builds on, as the chart's values would set them:
  the in-cluster registry (insecure: plain HTTP), Docker Hub mirrored by it (the stock base, a stand-in with pip and
  a `vllm` record: vLLM's images cannot be pulled here), build pods placed on the real node by `nodeSelector` and
  `tolerations`, and requests that fit it.
- Checked: the GLMImage reports the step while Building (read from the real pod's log), then `Succeeded` with the
  digest the registry serves; a pod on the real node runs `ref@digest`, pulled by containerd, with the plugin in its
  interpreter; a GLMImage whose base is missing fails with the real termination message's tail (the registry's
  "not found").
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from glm_operator.api.glmimage import Builder
from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.dockerfile import PLUGIN_VERSION
from glm_operator.render.imagebuild import glmimage_manifest, image_name
from tests.conftest import OperatorProcess
from tests.images.test_operator_image import podman
from tests.support.buildkit import STAND_IN, PlainRegistry
from tests.support.cluster import REPO, Cluster, Kubectl, eventually
from tests.support.realbuild import (
    REGISTRY,
    build_settings_env,
    import_tool_images,
    on_the_real_node,
    start_registry,
)
from tests.support.realnode import NODE_NAME, REAL_NODE_AND_PODMAN, RealNode
from tests.support.wheel import build_plugin_wheel

pytestmark = [*REAL_NODE_AND_PODMAN, pytest.mark.timeout(900)]
VERSION = "0.33.0"
MISSING = "0.32.0"  # a catalog version whose stand-in base is never pushed
NS = "glmops-realbuild"


@pytest.fixture(scope="module")
def node(real_node: RealNode) -> Iterator[RealNode]:
    """The real node with the builder and registry images in its containerd, and a namespace for the test."""
    real_node.ensure_up()  # an earlier module may have stopped it
    import_tool_images(real_node)
    real_node.kubectl.run("create", "namespace", NS, check=False)
    yield real_node
    real_node.kubectl.run("delete", "namespace", NS, "--wait=false", check=False)


@pytest.fixture(scope="module")
def registry(node: RealNode) -> str:
    """The registry pod's IP, with the stand-in for vLLM's stock image pushed to it (as Docker Hub's mirror)."""
    pod_ip = start_registry(node, NS)
    base = subprocess.run(
        [str(REPO / "hack" / "base-image.sh")], capture_output=True, text=True, check=True, timeout=1800
    ).stdout.splitlines()[-1]
    context = node.state_dir / "stand-in"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(STAND_IN)
    tag = f"localhost/glmops/vllm-stand-in:{VERSION}"
    podman("build", "--quiet", "--build-arg", f"BASE={base}", "--build-arg", f"VLLM_VERSION={VERSION}",
           "--tag", tag, str(context))  # fmt: skip
    podman("push", "--quiet", "--tls-verify=false", tag, f"{pod_ip}:5000/vllm/vllm-openai:v{VERSION}")
    return pod_ip


@pytest.fixture(scope="module")
def operator(node: RealNode, registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    kubectl = node.kubectl
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl.wait_established("glmimages.glmops.dev")
    wheel = build_plugin_wheel(tmp_path_factory.mktemp("plugin"))
    cluster = Cluster(node.bin_dir, node.state_dir, kubectl.kubeconfig, kubectl)
    process = OperatorProcess(cluster, build_settings_env(NS, str(wheel)), name="operator-real-node-build")
    process.start()
    yield process
    process.stop()
    for version in (VERSION, MISSING):
        kubectl.run("delete", "glmimage", _name(version), "--ignore-not-found", "--wait=true", check=False)


def _ref(version: str) -> str:
    return Catalogs.packaged().images.with_patched_registry(f"{REGISTRY}/glmops").patched_ref("cuda", version)


def _name(version: str) -> str:
    return image_name("cuda", _ref(version))


def _create_glmimage(kubectl: Kubectl, version: str) -> None:
    images = Catalogs.packaged().images.with_patched_registry(f"{REGISTRY}/glmops")
    body = glmimage_manifest("cuda", version, _ref(version), images.patches_for("cuda", version), Builder.BUILDKIT)
    kubectl.apply(body)


def test_the_build_job_runs_on_the_real_node_and_the_image_is_pulled_there_by_digest(
    node: RealNode, registry: str, operator: OperatorProcess
) -> None:
    kubectl = node.kubectl
    started = time.monotonic()
    _create_glmimage(kubectl, VERSION)
    steps: set[str] = set()

    def finished() -> dict[str, Any] | None:
        status = kubectl.get("glmimage", _name(VERSION)).get("status") or {}
        if status.get("step"):
            steps.add(status["step"])
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = eventually(finished, timeout=600, interval=0.5, what="the GLMImage's build to finish")
    built_s = time.monotonic() - started
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)[-4000:]
    repository, tag = _ref(VERSION).removeprefix(f"{REGISTRY}/").rsplit(":", 1)
    pushed = PlainRegistry(f"{registry}:5000").digest(repository, tag)
    assert status["digest"] == pushed, "the pinned digest is the one pushed"
    assert steps, "the step was never reported while the build ran"
    job = kubectl.run("get", "pods", "-n", NS, "-l", f"glmops.dev/image={_name(VERSION)}", "-o", "json").stdout
    (pod,) = json.loads(job)["items"]
    assert pod["spec"]["nodeName"] == NODE_NAME, "the build ran under the real kubelet"

    # The node's containerd pulls the image by digest from the in-cluster registry, and the plugin is there.
    probe = "import importlib.metadata as m; print(m.version('glmops-vllm-patches'), m.version('vllm'))"
    name = f"pull-{uuid.uuid4().hex[:6]}"
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": on_the_real_node(
                {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": status["imageRef"], "command": ["python3", "-c", probe]}],
                }
            ),
        },
        "-n",
        NS,
    )
    eventually(
        lambda: kubectl.get("pod", name, NS)["status"].get("phase") in ("Succeeded", "Failed"),
        timeout=300,
        what="the pod running the built image by digest",
    )
    ran = kubectl.get("pod", name, NS)
    log = kubectl.run("logs", name, "-n", NS).stdout
    assert ran["status"]["phase"] == "Succeeded", (ran["status"], log)
    assert log.split() == [PLUGIN_VERSION, VERSION]
    statuses = ran["status"]["containerStatuses"]
    assert statuses[0]["imageID"].endswith(status["digest"]), statuses
    print(f"\nGLMImage built on the real node in {built_s:.1f} s; steps seen: {sorted(steps)}")


def test_a_build_whose_base_is_missing_fails_with_the_real_pods_reason(
    node: RealNode, registry: str, operator: OperatorProcess
) -> None:
    kubectl = node.kubectl
    _create_glmimage(kubectl, MISSING)
    status = eventually(
        lambda: (s := kubectl.get("glmimage", _name(MISSING)).get("status") or {}).get("phase") == "Failed" and s,
        timeout=600,
        interval=1,
        what="the GLMImage to fail",
    )
    built = next(c for c in status["conditions"] if c["type"] == "Built")
    assert built["reason"] == "BuildFailed", built
    assert f"vllm/vllm-openai:v{MISSING}" in status["logTail"] and "not found" in status["logTail"], status["logTail"]
    assert status.get("step") is None
