"""A GLMDeployment served from the image the operator built for it, on the real node, gated by its canaries.

The whole path a GPU cluster with image builds on takes, with vLLM's CPU build in the place of the CUDA image:
- Docker Hub's `vllm/vllm-openai:v0.32.0` is, in the cluster's registry (the distribution registry as a pod on the
  real node, tests/support/realbuild.py, set as Docker Hub's mirror), vLLM's CPU build of 0.32.0 laid out as vLLM's
  stock images are: images/vllm-cpu's `stock` target, without the glmops plugin, running as root, with pip in the
  interpreter that runs vLLM and a distribution named vllm (hack/build-vllm-cpu-image.sh stock).
- The GLMDeployment names no image (spec.engine.image unset): the operator, with the chart's image-build settings,
  picks glmops' patched image of vLLM 0.32.0 for the H200's platform in the configured registry, creates the
  GLMImage, and holds the deployment in ImageBuilding. The build Job runs on the real node under the kubelet,
  BuildKit builds the Dockerfile the operator generates (FROM the stock image, the plugin wheel installed into
  vLLM's interpreter, the version checked) and pushes it; the GLMImage pins the digest the registry serves.
- The operator then renders the serving pod with `ref@digest`; the node's containerd pulls it from the registry;
  vLLM starts with the plugin the build installed (its start-up line says so) and serves the tiny model; the
  random model fails the canaries and the gate keeps the pod out of its Service.

The deployment is test_real_vllm_pod.py's (its docstring says each CPU setting and why), but for the image, and
for the node cache, owned by root here: vLLM's stock images run as root, and so does the built image.

Not part of `make test`: `make realvllm-pod-test` runs it (a 6.7 GB base pushed, pulled by the build and by the
node: minutes; README).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glm_operator.api.constants import ConditionType, ImageReason
from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.dockerfile import PLUGIN_VERSION
from glm_operator.render.imagebuild import image_name
from tests.conftest import OperatorProcess
from tests.images.test_operator_image import podman
from tests.support.cluster import REPO, Cluster, eventually
from tests.support.cpu_pod import (
    ACCELERATOR,
    NAME,
    Served,
    access_policy,
    canaries_fail_and_gate_holds,
    cpu_manifest,
    figures_fixture,
    fill_node_cache,
    real_pod_marks,
    serve,
    server_up,
    timed,
)
from tests.support.realbuild import REGISTRY, build_settings_env, import_tool_images, start_registry
from tests.support.realnode import NODE_NAME, RealNode, gpu_stand_in
from tests.support.wheel import build_plugin_wheel

pytestmark = real_pod_marks("the operator's build of the CPU vLLM image (a 6.7 GB base pushed and pulled)", 2400)
NS = "glmops-realvllm-build"
PLATFORM = ACCELERATOR.platform
VERSION = cpu_manifest("x", None, Path("/x"))["spec"]["engine"]["vllmVersion"]
IMAGES = Catalogs.packaged().images.with_patched_registry(f"{REGISTRY}/glmops")
REF = IMAGES.patched_ref(PLATFORM, VERSION)
BUILD_TIMEOUT_S = 1500  # the base's layers (6.7 GB) pulled and unpacked by BuildKit on 2 shared cores
ROOT = 0


notes = figures_fixture("real-vllm-built-image-figures.json", "real vLLM from the built image")


@pytest.fixture(scope="module")
def stock_image(notes: dict[str, Any]) -> str:
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "hack" / "build-vllm-cpu-image.sh"), "stock"], capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, f"hack/build-vllm-cpu-image.sh stock failed:\n{done.stderr[-4000:]}"
    timed(notes, "stock image build or reuse s", started)
    return dict(line.split("=", 1) for line in done.stdout.split())["image"]


@pytest.fixture(scope="module")
def node(real_node: RealNode) -> Iterator[RealNode]:
    real_node.ensure_up()
    import_tool_images(real_node)
    real_node.kubectl.run("create", "namespace", NS, check=False)
    yield real_node
    real_node.kubectl.run("delete", "namespace", NS, "--wait=true", "--timeout=150s", timeout=160, check=False)
    # The pulled image goes: its layers are gigabytes of the node's disk, and the next run builds it again.
    for listed in real_node.ctr("images", "ls", "--quiet").split():
        if listed.startswith(REF):
            real_node.ctr("images", "rm", listed)


@pytest.fixture(scope="module")
def registry(node: RealNode, stock_image: str, notes: dict[str, Any]) -> str:
    """The registry pod with the stock CPU image pushed as Docker Hub's vllm/vllm-openai:v<version> (its mirror)."""
    pod_ip = start_registry(node, NS)
    started = time.monotonic()
    # zstd: gzip of the 6 GB site-packages layer takes minutes on one core; BuildKit and containerd read both.
    podman("push", "--quiet", "--tls-verify=false", "--compression-format=zstd", stock_image,
           f"{pod_ip}:5000/vllm/vllm-openai:v{VERSION}")  # fmt: skip
    timed(notes, "stock image push s", started)
    return pod_ip


@pytest.fixture(scope="module")
def node_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fill_node_cache(tmp_path_factory.mktemp("node-model-cache"), ROOT)


@pytest.fixture(scope="module")
def operator(
    node: RealNode, registry: str, node_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    kubectl = node.kubectl
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl.wait_established("glmimages.glmops.dev")
    wheel = build_plugin_wheel(tmp_path_factory.mktemp("plugin"))
    env = build_settings_env(NS, str(wheel), GLMOPS_ACCESS_POLICY=json.dumps(access_policy(node_cache)))
    cluster = Cluster(node.bin_dir, node.state_dir, kubectl.kubeconfig, kubectl)
    process = OperatorProcess(cluster, env, name="operator-real-vllm-built-image")
    process.start()
    yield process
    process.stop()
    kubectl.run("delete", "glmimage", image_name(PLATFORM, REF), "--ignore-not-found", "--wait=true", check=False)


@pytest.fixture(scope="module")
def served(node: RealNode, operator: OperatorProcess, node_cache: Path, notes: dict[str, Any]) -> Iterator[Served]:
    namespace = f"real-vllm-built-{uuid.uuid4().hex[:6]}"
    with (
        gpu_stand_in(node.kubectl, ACCELERATOR),
        serve(node, namespace, cpu_manifest(namespace, None, node_cache), notes) as served,
    ):
        yield served


@pytest.fixture(autouse=True)
def _save_on_failure(request: pytest.FixtureRequest, served: Served) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        served.notes["failed"] = True


def _deployment_condition(served: Served, kind: str) -> dict[str, Any]:
    status = served.kubectl.get("glmd", NAME, served.namespace).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def test_the_operator_builds_the_deployment_s_image_on_the_real_node(served: Served) -> None:
    kubectl, notes = served.kubectl, served.notes
    glmimage = image_name(PLATFORM, REF)
    # The deployment waits for its image: ImageBuilding, and no serving pod yet.
    waiting = eventually(
        lambda: (c := _deployment_condition(served, ConditionType.IMAGE_BUILDING)).get("status") == "True" and c,
        timeout=120,
        what="the deployment to wait for its image",
    )
    assert glmimage in waiting["message"] or REF in waiting["message"], waiting
    spec = kubectl.get("glmimage", glmimage)["spec"]
    assert (spec["image"], spec["vllmVersion"], spec["platform"]) == (REF, VERSION, PLATFORM)
    steps: set[str] = set()
    told: set[str] = set()

    def finished() -> dict[str, Any] | None:
        status = kubectl.get("glmimage", glmimage).get("status") or {}
        if status.get("step"):
            steps.add(status["step"])
        told.add(_deployment_condition(served, ConditionType.IMAGE_BUILDING).get("message", ""))
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = eventually(finished, timeout=BUILD_TIMEOUT_S, interval=1, what="the GLMImage's build to finish")
    timed(notes, "apply to image built s", served.applied_at)
    notes["build steps seen"] = sorted(steps)
    assert steps, "the GLMImage never reported a step while the build ran"
    assert any(", at " in message for message in told), told  # the deployment's condition carries the step
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)[-4000:]
    assert status["imageRef"] == f"{REF}@{status['digest']}"
    builds = json.loads(kubectl.run("get", "pods", "-n", NS, "-l", f"glmops.dev/image={glmimage}", "-o", "json").stdout)
    assert [p["spec"]["nodeName"] for p in builds["items"]] == [NODE_NAME], "one build, under the real kubelet"


def test_the_serving_pod_runs_the_built_image_by_digest_with_the_plugin_it_installed(served: Served) -> None:
    status = served.kubectl.get("glmimage", image_name(PLATFORM, REF))["status"]
    pod = eventually(lambda: served.pod()["spec"].get("nodeName") and served.pod(), timeout=120, what="scheduling")
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["spec"]["containers"][0]["image"] == status["imageRef"]
    started = time.monotonic()
    pod = server_up(served, timeout=1500)  # the plugin's start-up line is checked there
    timed(served.notes, "built image pulled and server up s", started)
    statuses = pod["status"]["containerStatuses"]
    assert statuses[0]["imageID"].endswith(status["digest"]), statuses
    exec_in = ("exec", "-n", served.namespace, pod["metadata"]["name"], "-c", "vllm", "--")
    probe = "import importlib.metadata as m; print(m.version('glmops-vllm-patches'))"
    installed = served.kubectl.run(*exec_in, "python3", "-c", probe).stdout.split()
    assert installed == [PLUGIN_VERSION], "the plugin in vLLM's interpreter is the one the build installed"


def test_the_canaries_judge_the_built_image_and_the_gate_holds_the_pod_out(served: Served) -> None:
    canaries_fail_and_gate_holds(served)
    image = _deployment_condition(served, ConditionType.IMAGE_BUILDING)
    assert (image["status"], image["reason"]) == ("False", ImageReason.BUILT), image
    assert served.pod()["spec"]["containers"][0]["image"] in image["message"], image
