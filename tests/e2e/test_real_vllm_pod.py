"""The operator end to end with a real vLLM in a real pod: the CPU image on the real node, its canaries failing.

A GLMDeployment of the real-vLLM tests' spec (tests/realvllm/rendered.py: GLM-5.3 on H200, TP 8, ngram speculation)
goes onto the real-node cluster (tests/support/realnode.py) with the operator running beside it. The operator renders
the serving pod; the scheduler puts it on the real node; the kubelet runs the node cache's fill step and then `vllm
serve` as rendered, from the CPU image (hack/build-vllm-cpu-image.sh, imported into the node's containerd: nothing
is pulled), under the rendered securityContext and probes. The operator asks the pod on its own IP; the random model
fails the canaries; the readiness gate keeps the pod out of its Service; status and Events name the failing checks.

What differs from a GPU cluster, and why (each difference is in the objects this test makes, for anyone to read):
- The node stands in for an H200 node. For this module it carries the label NVIDIA's GPU Feature Discovery sets
  and advertises the catalog's 8 nvidia.com/gpu as an extended resource on its status (`kubectl patch
  --subresource=status`, as any node-level extended resource is advertised), so the operator's node selection and
  GPU request place the pod unchanged. No device plugin serves that resource: the scheduler and the kubelet count
  it, the container gets no device, and vLLM runs on its CPU platform. Both are taken off the node afterwards.
- The GLMDeployment sets, through its own fields, what a user of the CPU image would: the image; the real node's
  label and toleration; the model cache as a node cache (spec.modelCache.nodeCache) that holds the tiny model under
  the rendered repository id, as a node that downloaded it earlier would, so `vllm serve zai-org/GLM-5.3` loads it
  offline; `--enforce-eager` (spec.engine.extraArgs: no torch.compile at start-up on 2 shared cores);
  VLLM_CPU_KVCACHE_SPACE (spec.engine.env); a 1 GiB /dev/shm (spec.pod.shmSize).
- One rendered flag cannot run here: --tensor-parallel-size 8 (the tiny model has 2 attention heads; one CPU
  process serves it). A `vllm` mounted over the image's (a ConfigMap key through spec.pod.volumes and a subPath
  mount: PATH in spec.engine.env is refused at admission, it picks which binary runs) sets it to 1, says so in the
  pod's log, and runs the image's own launcher, kept beside it in the ConfigMap, with every other argument as the
  operator rendered it.
- The node cache is a directory of the test's, so the operator runs with its access policy's
  podPolicy.nodeCacheDirectories set to it (GLMOPS_ACCESS_POLICY, the chart's value), as a cluster administrator
  allows a node directory.

Not part of `make test`: `make realvllm-pod-test` runs it (the image build and import take minutes; README).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from glm_operator.api.constants import CANARY_CONDITION, LABEL_DEPLOYMENT, VLLM_PORT, Reason
from glm_operator.catalog.accelerators import load_accelerators
from glm_operator.render.security import vllm_security_context
from glm_operator.render.storage import revision_key
from tests.conftest import ARTIFACTS, TEST_METRICS_PORT, OperatorProcess
from tests.realvllm.rendered import REPLACED, SPEC, rendered_pod
from tests.support.cluster import REPO, Cluster, Kubectl, eventually
from tests.support.glmd import failed_canary_report
from tests.support.realnode import (
    NODE_NAME,
    REAL_NODE_AND_PODMAN,
    TAINT_KEY,
    TOLERATION,
    RealNode,
    gpu_stand_in,
)

RUN_ENV = "GLMOPS_REALVLLM_POD"
pytestmark = [
    *REAL_NODE_AND_PODMAN,
    pytest.mark.skipif(
        not os.environ.get(RUN_ENV),
        reason="the CPU vLLM image in a real pod runs in `make realvllm-pod-test` (a 6.7 GB image built and "
        "imported into the real node: about 15 min cold, 3-5 min warm)",
    ),
    pytest.mark.timeout(1800),  # the first test waits for the image import and the server's start
]

NAME = SPEC["metadata"]["name"]
MODEL = SPEC["spec"]["model"]["name"]
ACCELERATOR = load_accelerators().get(SPEC["spec"]["accelerator"]["type"])
IMAGE_USER = 65532  # images/vllm-cpu/Dockerfile
ARCHIVE_LABEL = "dev.glmops.imported-from"
LAUNCHER_DIR = "/opt/glmops-cpu-test/bin"
IMAGE_VLLM = "/opt/vllm/bin/vllm"  # the image's own launcher (images/vllm-cpu/vllm), first on the image's PATH
IMAGE_LAUNCHER_KEY = "image-vllm"  # a copy of it in the ConfigMap, which the test's launcher hands over to
TP_FLAG = "--tensor-parallel-size"
TP_VALUE, TP_REASON = REPLACED[TP_FLAG][0], REPLACED[TP_FLAG][1]
# The shell the image's Debian base ships (dash): the rendered arguments, the one CPU adaptation, the image's vllm.
LAUNCHER = f"""#!/bin/sh
# vllm ahead of the image's on PATH (tests/e2e/test_real_vllm_pod.py): the command glmops rendered, with
# {TP_FLAG} set to {TP_VALUE}: {TP_REASON}.
set -eu
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
    image: str
    manifest: dict[str, Any]
    applied_at: float
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def kubectl(self) -> Kubectl:
        return self.node.kubectl

    def pod(self) -> dict[str, Any]:
        pods = [
            p
            for p in self.kubectl.get("pods", namespace=self.namespace)["items"]
            if p["metadata"]["labels"].get(LABEL_DEPLOYMENT) == NAME and not p["metadata"].get("deletionTimestamp")
        ]
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


def _timed(notes: dict[str, Any], key: str, started: float) -> None:
    notes[key] = round(time.monotonic() - started, 1)


@pytest.fixture(scope="module")
def notes() -> Iterator[dict[str, Any]]:
    """Figures of this run, printed and kept with the artifacts."""
    figures: dict[str, Any] = {}
    yield figures
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "real-vllm-pod-figures.json").write_text(json.dumps(figures, indent=2))
    print(f"\nreal vLLM pod e2e: {figures}")


@pytest.fixture(scope="module")
def cpu_image(notes: dict[str, Any]) -> tuple[str, str]:
    """The CPU image and its archive, as hack/build-vllm-cpu-image.sh reports them (a no-op when up to date)."""
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "hack" / "build-vllm-cpu-image.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    assert done.returncode == 0, f"hack/build-vllm-cpu-image.sh failed:\n{done.stderr[-4000:]}"
    _timed(notes, "image build or reuse s", started)
    report = dict(line.split("=", 1) for line in done.stdout.split())
    notes["image size GB"] = round(int(report["size"]) / 1e9, 2)
    return report["image"], report["archive"]


@pytest.fixture(scope="module")
def node(real_node: RealNode, cpu_image: tuple[str, str], notes: dict[str, Any]) -> RealNode:
    """The real node with the CPU image in its containerd, imported from the archive (there is no registry).

    The node's containerd keeps its images across runs; one it imported from this very archive (the name carries
    the build's context hash) is labelled so, and not read again (6.7 GB, about 2 minutes).
    """
    real_node.ensure_up()
    image, archive = cpu_image
    imported_from = f"{ARCHIVE_LABEL}={Path(archive).name}"
    started = time.monotonic()
    if imported_from in real_node.ctr("images", "ls", f"name=={image}"):
        notes["image already imported"] = True
    else:
        real_node.ctr("images", "import", archive, timeout=1800)
        real_node.ctr("images", "label", image, imported_from)
    _timed(notes, "image import s", started)
    assert image in real_node.ctr("images", "ls", "--quiet").split()
    return real_node


@pytest.fixture(scope="module")
def h200_stand_in(node: RealNode) -> Iterator[None]:
    """The real node labelled as the catalog selects H200 nodes and advertising its GPUs as an extended resource."""
    with gpu_stand_in(node.kubectl, ACCELERATOR):
        yield


@pytest.fixture(scope="module")
def operator(node: RealNode, node_cache: Path) -> Iterator[OperatorProcess]:
    """The operator as a process beside the real-node cluster; its canaries reach pods on the node's bridge."""
    kubectl = node.kubectl
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl.run("wait", "--for=condition=Established", "crd/glmdeployments.glmops.dev", "--timeout=60s")
    cluster = Cluster(node.bin_dir, node.state_dir, kubectl.kubeconfig, kubectl)
    policy = json.dumps(_access_policy(node_cache))  # what the chart's value would pass
    process = OperatorProcess(cluster, {"GLMOPS_ACCESS_POLICY": policy}, name="operator-real-vllm-pod")
    process.start()
    yield process
    process.stop()


def _access_policy(node_cache: Path | str) -> dict[str, Any]:
    """The chart values' podPolicy that lets the pods mount the test's node cache."""
    return {"podPolicy": {"nodeCacheDirectories": [str(node_cache)]}}


@pytest.fixture(scope="module")
def node_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node's model cache (HF_HOME) that already holds the tiny model under the rendered repository id.

    The Hugging Face cache layout vLLM reads offline (hub/models--org--name, refs/main naming the snapshot), and the
    marker glmops' fill step writes after a download (render/storage.py), owned by the image's user.
    """
    out = subprocess.run([str(REPO / "hack" / "vllm-cpu-env.sh"), "model"], capture_output=True, text=True, check=True)
    model = Path(out.stdout.strip().splitlines()[-1])
    root = tmp_path_factory.mktemp("node-model-cache")
    repo = root / "hub" / f"models--{MODEL.replace('/', '--')}"
    revision = hashlib.sha1(model.name.encode()).hexdigest()  # a commit id: the tiny model's build
    shutil.copytree(model, repo / "snapshots" / revision, ignore=shutil.ignore_patterns(".complete"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    (root / "glmops").mkdir()
    (root / "glmops" / f"{revision_key(MODEL, None)}.complete").write_text(f"{MODEL}@main\n")
    for path in [root, *root.rglob("*")]:
        os.chown(path, IMAGE_USER, IMAGE_USER)
    return root


def cpu_manifest(namespace: str, image: str, cache: Path) -> dict[str, Any]:
    """SPEC with the CPU image's settings, each through a GLMDeployment field (module docstring)."""
    manifest = copy.deepcopy(SPEC)
    manifest["metadata"] = {"name": NAME, "namespace": namespace}
    spec = manifest["spec"]
    spec["engine"] |= {
        "image": image,
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


@pytest.fixture(scope="module")
def served(
    node: RealNode,
    cpu_image: tuple[str, str],
    h200_stand_in: None,
    operator: OperatorProcess,
    node_cache: Path,
    notes: dict[str, Any],
) -> Iterator[Served]:
    """The GLMDeployment applied in a namespace of its own; the namespace is gone before the node's GPUs go."""
    namespace = f"real-vllm-pod-{uuid.uuid4().hex[:6]}"
    kubectl = node.kubectl
    kubectl.run("create", "namespace", namespace)
    launcher = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cpu-launcher", "namespace": namespace},
        "data": {"vllm": LAUNCHER, IMAGE_LAUNCHER_KEY: (REPO / "images" / "vllm-cpu" / "vllm").read_text()},
    }
    kubectl.apply(launcher)
    manifest = cpu_manifest(namespace, cpu_image[0], node_cache)
    kubectl.apply(manifest)
    served = Served(node, namespace, cpu_image[0], manifest, time.monotonic(), notes)
    try:
        yield served
    finally:
        if notes.get("failed"):
            served.save("failed")
        kubectl.run("delete", "namespace", namespace, "--wait=true", "--timeout=150s", timeout=160, check=False)


@pytest.fixture(autouse=True)
def _save_on_failure(request: pytest.FixtureRequest, served: Served) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        served.notes["failed"] = True


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), {})


def test_the_operator_s_pod_runs_the_rendered_command_from_the_cpu_image_on_the_real_node(
    served: Served, tmp_path: Path
) -> None:
    pod = eventually(lambda: served.pod()["spec"].get("nodeName") and served.pod(), timeout=120, what="scheduling")
    assert pod["spec"]["nodeName"] == NODE_NAME
    container = pod["spec"]["containers"][0]
    values = tmp_path / "values.yaml"  # `glmctl render --access-policy`, as the operator runs
    values.write_text(yaml.safe_dump(_access_policy(served.manifest["spec"]["modelCache"]["nodeCache"]["path"])))
    rendered = rendered_pod(served.manifest, str(values))
    # What the operator made is what `glmctl render` prints for the same GLMDeployment: no test-only rendering.
    assert [*container["command"], *container["args"]] == rendered.argv
    assert rendered.argv[:3] == ["vllm", "serve", MODEL] and rendered.argv[rendered.argv.index(TP_FLAG) + 1] == "8"
    assert {e["name"]: e.get("value") for e in container["env"]} == rendered.env
    assert container["image"] == served.image
    gpus = {ACCELERATOR.resource_name: str(ACCELERATOR.gpus_per_node)}
    assert container["resources"]["limits"] == gpus == container["resources"]["requests"]
    assert container["securityContext"] == vllm_security_context()
    assert CANARY_CONDITION in [g["conditionType"] for g in pod["spec"]["readinessGates"]]

    # The kubelet's startup and readiness probes (/health, as rendered) pass: the server is up, the gate not yet.
    def containers_ready() -> dict[str, Any]:
        current = served.pod()
        statuses = current["status"].get("containerStatuses") or []
        assert statuses and statuses[0]["restartCount"] == 0, statuses
        assert _condition(current, "ContainersReady").get("status") == "True", current["status"].get("conditions")
        return current

    pod = eventually(containers_ready, timeout=START_TIMEOUT_S, interval=2, what="the vLLM server in the pod up")
    _timed(served.notes, "apply to server up s", served.applied_at)
    name = pod["metadata"]["name"]
    fill = served.logs(name, "fill-node-cache")
    assert f"cached on this node: {MODEL}" in fill, fill
    log = served.logs(name, "vllm")
    assert f"glmops CPU test launcher: {TP_FLAG} 8 -> {TP_VALUE}" in log, log[-3000:]
    assert "glmops patch null-content-metrics" in log, log[-3000:]  # the plugin, loaded by the server in the image
    models = httpx.get(f"http://{pod['status']['podIP']}:{VLLM_PORT}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_the_server_runs_without_capabilities_under_the_runtime_s_seccomp_profile(served: Served) -> None:
    pod = served.pod()
    exec_in = ("exec", "-n", served.namespace, pod["metadata"]["name"], "-c", "vllm", "--")
    status = served.kubectl.run(*exec_in, "cat", "/proc/1/status").stdout
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)}
    assert fields["Uid"].split()[0] == str(IMAGE_USER)
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"


def _endpoint_conditions(kubectl: Kubectl, namespace: str, ip: str) -> list[dict[str, Any]]:
    slices = kubectl.get("endpointslices", namespace=namespace)["items"]
    ours = [s for s in slices if s["metadata"]["labels"].get("kubernetes.io/service-name") == NAME]
    assert ours, "the GLMDeployment's Service has an EndpointSlice"
    return [e["conditions"] for s in ours for e in s.get("endpoints") or [] if ip in e["addresses"]]


def test_the_random_model_fails_its_canaries_and_the_pod_stays_out_of_the_service(served: Served) -> None:
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
    _timed(served.notes, "canary verdict after server up s", started)
    assert {"smoke", "gsm8k", "null-content", "copy"} <= set(report["failed"]), report
    message = report["message"]
    assert re.search(r"smoke 0 \(threshold [0-9.]+\): 0/\d+ correct", message), message
    null_rate = re.search(r"null-content ([0-9.]+) \(threshold 0\.05\)", message)
    assert null_rate and float(null_rate[1]) > 0.05, message  # decided at the second empty answer

    # The real kubelet reports the gate: the pod runs, answers on its IP, and is not Ready.
    current = served.pod()
    gate = _condition(current, CANARY_CONDITION)
    assert (gate["status"], gate["reason"]) == ("False", Reason.CANARY_FAILED) and "null-content" in gate["message"]
    assert _condition(current, "ContainersReady")["status"] == "True"
    assert _condition(current, "Ready")["status"] == "False"
    assert httpx.get(f"http://{pod_ip}:{VLLM_PORT}/health", timeout=10).status_code == 200
    # The endpoint slice controller lists it not ready, so kube-proxy sends the Service's traffic nowhere.
    assert [c.get("ready") for c in _endpoint_conditions(kubectl, namespace, pod_ip)] == [False]
    cluster_ip = kubectl.get("service", NAME, namespace)["spec"]["clusterIP"]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://{cluster_ip}:{VLLM_PORT}/health", timeout=5)

    status = kubectl.get("glmd", NAME, namespace)["status"]
    assert status.get("readyReplicas", 0) == 0
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoReplicaReady")
    assert status["canary"]["summary"].startswith(f"0/1 pods passed; failing {pod_name}")
    events = kubectl.run("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}").stdout
    failure = [line for line in events.splitlines() if Reason.CANARY_FAILED in line]
    assert failure and "null-content" in failure[0] and pod_name in failure[0], events

    metrics = httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics", timeout=10).text
    labels = f'glmdeployment="{NAME}",namespace="{namespace}"'
    assert re.search(rf'glmops_canary_runs_total{{{labels},result="fail"}} [1-9]', metrics), metrics
    # The answers came from vLLM in the pod: its own null-content counter counted the operator's questions.
    counted = httpx.get(f"http://{pod_ip}:{VLLM_PORT}/metrics", timeout=10).text
    nulls = [line for line in counted.splitlines() if line.startswith("glmops_chat_null_content_total{")]
    assert nulls and sum(float(line.rsplit(" ", 1)[1]) for line in nulls) >= 1, nulls
