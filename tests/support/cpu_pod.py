"""A GLMDeployment served by the CPU vLLM image in a real pod on the real node: what the two tests of it share.

tests/e2e/test_real_vllm_pod.py runs the image the tests build (hack/build-vllm-cpu-image.sh, imported into the
node); tests/e2e/test_real_vllm_built_image.py runs the image the operator built for the deployment in the cluster.
The deployment is the real-vLLM tests' spec (tests/realvllm/rendered.py) with the settings a user of the CPU image
would give through its own fields; test_real_vllm_pod.py's docstring says each one and why.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from glm_operator.api.constants import LABEL_DEPLOYMENT, LABEL_SERVING, VLLM_PORT, Reason
from glm_operator.catalog.accelerators import load_accelerators
from glm_operator.render.storage import revision_key
from tests.conftest import ARTIFACTS
from tests.realvllm.rendered import REPLACED, SPEC
from tests.support.cluster import REPO, Kubectl, eventually
from tests.support.glmd import assert_random_model_failed, endpoint_conditions, failed_canary_report
from tests.support.realnode import NODE_NAME, REAL_NODE_AND_PODMAN, TAINT_KEY, TOLERATION, RealNode

RUN_ENV = "GLMOPS_REALVLLM_POD"


def real_pod_marks(why: str, timeout_s: int) -> list[pytest.MarkDecorator]:
    """pytestmark of a module that runs the CPU image on the real node: only under `make realvllm-pod-test`."""
    return [
        *REAL_NODE_AND_PODMAN,
        pytest.mark.skipif(not os.environ.get(RUN_ENV), reason=f"{why} runs in `make realvllm-pod-test`"),
        pytest.mark.timeout(timeout_s),
    ]


NAME = SPEC["metadata"]["name"]
MODEL = SPEC["spec"]["model"]["name"]
ACCELERATOR = load_accelerators().get(SPEC["spec"]["accelerator"]["type"])
LAUNCHER_DIR = "/opt/glmops-cpu-test/bin"
IMAGE_VLLM = "/opt/vllm/bin/vllm"  # the image's own launcher (images/vllm-cpu/vllm), first on the image's PATH
IMAGE_LAUNCHER_KEY = "image-vllm"  # a copy of it in the ConfigMap, which the test's launcher hands over to
TP_FLAG = "--tensor-parallel-size"
TP_VALUE, TP_REASON = REPLACED[TP_FLAG][0], REPLACED[TP_FLAG][1]
# Under pipeline parallelism admission sets the split of GLM-5.3's 78 layers (rule vllm-63170); vLLM refuses a split
# that does not add up to the model's layers.
PARTITION_REASON = "a split of GLM-5.3's 78 layers; the tiny model has 2, and vLLM's default splits them 1,1"
# The shell the image's Debian base ships (dash): the rendered arguments, the one CPU adaptation, the image's vllm.
LAUNCHER = f"""#!/bin/sh
# vllm ahead of the image's on PATH (tests/e2e/test_real_vllm_pod.py): the command glmops rendered, with
# {TP_FLAG} set to {TP_VALUE}: {TP_REASON}.
set -eu
if [ -n "${{VLLM_PP_LAYER_PARTITION:-}}" ]; then
  echo "glmops CPU test launcher: VLLM_PP_LAYER_PARTITION $VLLM_PP_LAYER_PARTITION unset ({PARTITION_REASON})" >&2
  unset VLLM_PP_LAYER_PARTITION
fi
n=$#
previous=
found=
while [ "$n" -gt 0 ]; do
  arg=$1
  shift
  n=$((n - 1))
  if [ "$previous" = {TP_FLAG} ]; then
    echo "glmops CPU test launcher: {TP_FLAG} $arg -> {TP_VALUE} ({TP_REASON})" >&2
    arg={TP_VALUE}
    found=1
  fi
  previous=$arg
  set -- "$@" "$arg"
done
[ -n "$found" ] || {{ echo "glmops CPU test launcher: the rendered command has no {TP_FLAG}" >&2; exit 64; }}
exec /opt/vllm/bin/python3 {LAUNCHER_DIR}/{IMAGE_LAUNCHER_KEY} "$@"
"""
# Small GSM8K waves: every question in flight is a generation on 2 shared cores.
CANARY = {"gsm8k": {"concurrency": 8}, "copyFidelity": {"trials": 1}}
START_TIMEOUT_S = 900  # the fill step and vLLM's start: 65-300 s seen on 2 shared cores
CANARY_TIMEOUT_S = 600


@dataclass
class Served:
    node: RealNode
    namespace: str
    manifest: dict[str, Any]
    applied_at: float
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def kubectl(self) -> Kubectl:
        return self.node.kubectl

    def pods(self) -> list[dict[str, Any]]:
        """The deployment's live pods: the serving pod, or a group's leader and workers."""
        return [
            p
            for p in self.kubectl.get("pods", namespace=self.namespace)["items"]
            if p["metadata"]["labels"].get(LABEL_DEPLOYMENT) == NAME and not p["metadata"].get("deletionTimestamp")
        ]

    def pod(self) -> dict[str, Any]:
        """The one pod that serves HTTP (a group's leader)."""
        pods = [p for p in self.pods() if p["metadata"]["labels"].get(LABEL_SERVING) == "true"]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]

    def logs(self, pod: str, container: str) -> str:
        return self.kubectl.run("logs", "-n", self.namespace, pod, "-c", container, check=False).stdout

    def save(self, tag: str) -> None:
        """The namespace's objects, the pod's logs and the node's description, for a failed run."""
        out = ARTIFACTS / "real-vllm-pod"
        out.mkdir(parents=True, exist_ok=True)
        dump = self.kubectl.run("get", "all,glmd,events,configmaps", "-n", self.namespace, "-o", "yaml", check=False)
        (out / f"{tag}-objects.yaml").write_text(dump.stdout)
        (out / f"{tag}-node.txt").write_text(self.kubectl.run("describe", "node", NODE_NAME, check=False).stdout)
        for pod in self.kubectl.get("pods", namespace=self.namespace)["items"]:
            for container in ("fill-node-cache", "vllm"):
                (out / f"{tag}-{pod['metadata']['name']}-{container}.log").write_text(
                    self.logs(pod["metadata"]["name"], container)
                )


IMAGE_USER = 65532  # images/vllm-cpu/Dockerfile
ARCHIVE_LABEL = "dev.glmops.imported-from"


def figures_fixture(file: str, title: str) -> Any:
    """A module's `notes` fixture: the figures its tests record, printed at the end and kept as ARTIFACTS/`file`."""

    @pytest.fixture(scope="module", name="notes")
    def notes() -> Iterator[dict[str, Any]]:
        figures: dict[str, Any] = {}
        yield figures
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / file).write_text(json.dumps(figures, indent=2))
        print(f"\n{title}: {figures}")

    return notes


def node_fixtures() -> tuple[Any, Any]:
    """A module's `cpu_image` (built when out of date) and `node` fixtures (the real node, with that image in its
    containerd)."""

    @pytest.fixture(scope="module", name="cpu_image")
    def cpu_image(notes: dict[str, Any]) -> tuple[str, str]:
        return build_cpu_image(notes)

    @pytest.fixture(scope="module", name="node")
    def node(real_node: RealNode, cpu_image: tuple[str, str], notes: dict[str, Any]) -> RealNode:
        real_node.ensure_up()  # an earlier module may have stopped it
        import_cpu_image(real_node, *cpu_image, notes)
        return real_node

    return cpu_image, node


def build_cpu_image(notes: dict[str, Any]) -> tuple[str, str]:
    """The CPU image and its archive, as hack/build-vllm-cpu-image.sh reports them (a no-op when up to date)."""
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "hack" / "build-vllm-cpu-image.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    assert done.returncode == 0, f"hack/build-vllm-cpu-image.sh failed:\n{done.stderr[-4000:]}"
    timed(notes, "image build or reuse s", started)
    report = dict(line.split("=", 1) for line in done.stdout.split())
    notes["image size GB"] = round(int(report["size"]) / 1e9, 2)
    return report["image"], report["archive"]


def import_cpu_image(node: RealNode, image: str, archive: str, notes: dict[str, Any]) -> None:
    """The CPU image in the node's containerd, imported from the archive (there is no registry).

    The node's containerd keeps its images across runs; one it imported from this very archive (the name carries
    the build's context hash) is labelled so, and not read again (6.7 GB, about 2 minutes).
    """
    imported_from = f"{ARCHIVE_LABEL}={Path(archive).name}"
    started = time.monotonic()
    if imported_from in node.ctr("images", "ls", f"name=={image}"):
        notes["image already imported"] = True
    else:
        node.ctr("images", "import", archive, timeout=1800)
        node.ctr("images", "label", image, imported_from)
    timed(notes, "image import s", started)
    assert image in node.ctr("images", "ls", "--quiet").split()


def timed(notes: dict[str, Any], key: str, started: float) -> None:
    notes[key] = round(time.monotonic() - started, 1)


def access_policy(node_cache: Path | str) -> dict[str, Any]:
    """The chart values' podPolicy that lets the pods mount the test's node cache."""
    return {"podPolicy": {"nodeCacheDirectories": [str(node_cache)]}}


def fill_node_cache(root: Path, owner: int) -> Path:
    """A node's model cache (HF_HOME) at `root` that already holds the tiny model under the rendered repository id.

    The Hugging Face cache layout vLLM reads offline (hub/models--org--name, refs/main naming the snapshot), and the
    marker glmops' fill step writes after a download (render/storage.py), owned by `owner`: the user the image runs
    as, as on a node whose fill step downloaded it.
    """
    out = subprocess.run([str(REPO / "hack" / "vllm-cpu-env.sh"), "model"], capture_output=True, text=True, check=True)
    model = Path(out.stdout.strip().splitlines()[-1])
    repo = root / "hub" / f"models--{MODEL.replace('/', '--')}"
    revision = hashlib.sha1(model.name.encode()).hexdigest()  # a commit id: the tiny model's build
    shutil.copytree(model, repo / "snapshots" / revision, ignore=shutil.ignore_patterns(".complete"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    (root / "glmops").mkdir()
    (root / "glmops" / f"{revision_key(MODEL, None)}.complete").write_text(f"{MODEL}@main\n")
    for path in [root, *root.rglob("*")]:
        os.chown(path, owner, owner)
    return root


def cpu_manifest(namespace: str, image: str | None, cache: Path) -> dict[str, Any]:
    """SPEC with the CPU image's settings, each through a GLMDeployment field (test_real_vllm_pod's docstring).

    With `image` None the deployment names no image: the operator picks glmops' patched image of its vLLM version.
    """
    manifest = copy.deepcopy(SPEC)
    manifest["metadata"] = {"name": NAME, "namespace": namespace}
    spec = manifest["spec"]
    spec["engine"] |= {
        **({"image": image} if image else {}),
        "extraArgs": ["--enforce-eager"],
        "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}],
    }
    spec["modelCache"] = {"nodeCache": {"path": str(cache)}}
    spec["pod"] = {
        "nodeSelector": {TAINT_KEY: "true"},
        "tolerations": [TOLERATION],
        "shmSize": "1Gi",
        "volumes": [{"name": "cpu-launcher", "configMap": {"name": "cpu-launcher", "defaultMode": 0o755}}],
        "volumeMounts": [
            {"name": "cpu-launcher", "mountPath": LAUNCHER_DIR, "readOnly": True},
            {"name": "cpu-launcher", "mountPath": IMAGE_VLLM, "subPath": "vllm", "readOnly": True},
        ],
    }
    spec["canary"] = CANARY
    return manifest


def group_manifest(namespace: str, image: str, cache: Path) -> dict[str, Any]:
    """cpu_manifest as a replica over two H200 nodes (TP8 x PP2), which glmops renders as a two-pod group.

    The launcher makes it TP1 x PP2 on this CPU, one pipeline stage per pod. No speculative decoding (vLLM runs
    none under pipeline parallelism). Not --enforce-eager: vLLM's CPU model runner allocates the buffer a later
    pipeline stage receives into only while it warms up the compiled model (vllm/v1/worker/cpu_model_runner.py
    warming_up_model returns at once in eager mode, as it does under VLLM_CPU_CI_ENV; gpu_model_runner.py _dummy_run
    allocates intermediate_tensors), so in eager mode the second stage fails its first request (AssertionError in
    sync_and_gather_intermediate_tensors, vLLM 0.32.0). The model is compiled with Inductor, the CPU platform's
    backend (vllm/platforms/cpu.py overrides --compilation-config's), with the image's C++ compiler.
    """
    manifest = cpu_manifest(namespace, image, cache)
    spec = manifest["spec"]
    spec["parallelism"] = {"tensor": 8, "pipeline": 2}
    spec["engine"].pop("speculative", None)
    spec["engine"]["extraArgs"] = []
    return manifest


@contextmanager
def serve(node: RealNode, namespace: str, manifest: dict[str, Any], notes: dict[str, Any]) -> Iterator[Served]:
    """The launcher's ConfigMap and the GLMDeployment applied in a namespace of its own, deleted afterwards."""
    kubectl = node.kubectl
    kubectl.run("create", "namespace", namespace)
    launcher = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cpu-launcher", "namespace": namespace},
        "data": {"vllm": LAUNCHER, IMAGE_LAUNCHER_KEY: (REPO / "images" / "vllm-cpu" / "vllm").read_text()},
    }
    kubectl.apply(launcher)
    kubectl.apply(manifest)
    served = Served(node, namespace, manifest, time.monotonic(), notes)
    try:
        yield served
    finally:
        if notes.get("failed"):
            served.save(f"failed-{namespace}")
        kubectl.run("delete", "namespace", namespace, "--wait=true", "--timeout=150s", timeout=160, check=False)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), {})


def server_up(served: Served, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    """The pod once the kubelet's startup and readiness probes (/health, as rendered) pass: server up, gate not yet.

    Checks the fill step found the cached model, the launcher's one adaptation ran, the plugin was loaded by the
    server in the image, and the server serves the deployment's model on the pod's IP.
    """

    def containers_ready() -> dict[str, Any]:
        current = served.pod()
        statuses = current["status"].get("containerStatuses") or []
        assert statuses and statuses[0]["restartCount"] == 0, statuses
        assert condition(current, "ContainersReady").get("status") == "True", current["status"].get("conditions")
        return current

    pod = eventually(containers_ready, timeout=timeout, interval=2, what="the vLLM server in the pod up")
    timed(served.notes, "apply to server up s", served.applied_at)
    name = pod["metadata"]["name"]
    fill = served.logs(name, "fill-node-cache")
    assert f"cached on this node: {MODEL}" in fill, fill
    log = served.logs(name, "vllm")
    assert f"glmops CPU test launcher: {TP_FLAG} 8 -> {TP_VALUE}" in log, log[-3000:]
    assert "glmops patch null-content-metrics" in log, log[-3000:]  # the plugin, loaded by the server in the image
    models = httpx.get(f"http://{pod['status']['podIP']}:{VLLM_PORT}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    return pod


def canaries_fail_and_gate_holds(served: Served) -> dict[str, Any]:
    """The random model fails its canaries; the gate keeps the running pod out of the Service. The pod's report."""
    kubectl, namespace = served.kubectl, served.namespace
    pod = served.pod()
    pod_name, pod_ip = pod["metadata"]["name"], pod["status"]["podIP"]
    started = time.monotonic()
    report = eventually(
        lambda: failed_canary_report(kubectl, namespace, NAME, pod_name),
        timeout=CANARY_TIMEOUT_S,
        interval=2,
        what="the canaries to fail on the pod",
    )
    timed(served.notes, "canary verdict after server up s", started)
    # The real kubelet reports the gate: the pod runs, answers on its IP, and is not Ready.
    current = served.pod()
    assert_random_model_failed(report, current)
    assert condition(current, "ContainersReady")["status"] == "True"
    assert httpx.get(f"http://{pod_ip}:{VLLM_PORT}/health", timeout=10).status_code == 200
    # The endpoint slice controller lists it not ready, so kube-proxy sends the Service's traffic nowhere.
    assert [c.get("ready") for c in endpoint_conditions(kubectl, namespace, NAME, pod_ip)] == [False]
    cluster_ip = kubectl.get("service", NAME, namespace)["spec"]["clusterIP"]
    try:
        httpx.get(f"http://{cluster_ip}:{VLLM_PORT}/health", timeout=5)
    except httpx.TransportError:
        pass
    else:
        raise AssertionError("the Service answered though its only pod failed its canaries")

    status = kubectl.get("glmd", NAME, namespace)["status"]
    assert status.get("readyReplicas", 0) == 0
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoReplicaReady")
    assert status["canary"]["summary"].startswith(f"0/1 pods passed; failing {pod_name}")
    events = kubectl.run("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}").stdout
    failure = [line for line in events.splitlines() if Reason.CANARY_FAILED in line]
    assert failure and "null-content" in failure[0] and pod_name in failure[0], events
    return report
