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

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from glm_operator.api.constants import CANARY_CONDITION, VLLM_PORT, Reason
from glm_operator.render.security import vllm_security_context
from tests.conftest import TEST_METRICS_PORT, OperatorProcess
from tests.realvllm.rendered import rendered_pod
from tests.support.cluster import REPO, Cluster, eventually
from tests.support.cpu_pod import (
    ACCELERATOR,
    CANARY_TIMEOUT_S,
    IMAGE_USER,
    MODEL,
    NAME,
    START_TIMEOUT_S,
    TP_FLAG,
    Served,
    access_policy,
    canaries_fail_and_gate_holds,
    condition,
    cpu_manifest,
    figures_fixture,
    fill_node_cache,
    node_fixtures,
    real_pod_marks,
    serve,
    server_up,
    timed,
)
from tests.support.glmd import failed_canary_report
from tests.support.realnode import NODE_NAME, RealNode, gpu_stand_in

# The first test waits for the image import and the server's start.
pytestmark = real_pod_marks("the CPU vLLM image in a real pod (built and imported: 15 min cold, 3-5 min warm)", 1800)


notes = figures_fixture("real-vllm-pod-figures.json", "real vLLM pod e2e")
cpu_image, node = node_fixtures()


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
    kubectl.wait_established("glmdeployments.glmops.dev")
    cluster = Cluster(node.bin_dir, node.state_dir, kubectl.kubeconfig, kubectl)
    policy = json.dumps(access_policy(node_cache))  # what the chart's value would pass
    process = OperatorProcess(cluster, {"GLMOPS_ACCESS_POLICY": policy}, name="operator-real-vllm-pod")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def node_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node's model cache with the tiny model, owned by the image's user."""
    return fill_node_cache(tmp_path_factory.mktemp("node-model-cache"), IMAGE_USER)


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
    with serve(node, namespace, cpu_manifest(namespace, cpu_image[0], node_cache), notes) as served:
        yield served


@pytest.fixture(autouse=True)
def _save_on_failure(request: pytest.FixtureRequest, served: Served) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        served.notes["failed"] = True


def test_the_operator_s_pod_runs_the_rendered_command_from_the_cpu_image_on_the_real_node(
    served: Served, cpu_image: tuple[str, str], tmp_path: Path
) -> None:
    pod = eventually(lambda: served.pod()["spec"].get("nodeName") and served.pod(), timeout=120, what="scheduling")
    assert pod["spec"]["nodeName"] == NODE_NAME
    container = pod["spec"]["containers"][0]
    values = tmp_path / "values.yaml"  # `glmctl render --access-policy`, as the operator runs
    values.write_text(yaml.safe_dump(access_policy(served.manifest["spec"]["modelCache"]["nodeCache"]["path"])))
    rendered = rendered_pod(served.manifest, str(values))
    # What the operator made is what `glmctl render` prints for the same GLMDeployment: no test-only rendering.
    assert [*container["command"], *container["args"]] == rendered.argv
    assert rendered.argv[:3] == ["vllm", "serve", MODEL] and rendered.argv[rendered.argv.index(TP_FLAG) + 1] == "8"
    assert {e["name"]: e.get("value") for e in container["env"]} == rendered.env
    assert container["image"] == cpu_image[0]
    gpus = {ACCELERATOR.resource_name: str(ACCELERATOR.gpus_per_node)}
    assert container["resources"]["limits"] == gpus == container["resources"]["requests"]
    assert container["securityContext"] == vllm_security_context()
    assert CANARY_CONDITION in [g["conditionType"] for g in pod["spec"]["readinessGates"]]
    server_up(served)


def test_the_server_runs_without_capabilities_under_the_runtime_s_seccomp_profile(served: Served) -> None:
    pod = served.pod()
    exec_in = ("exec", "-n", served.namespace, pod["metadata"]["name"], "-c", "vllm", "--")
    status = served.kubectl.run(*exec_in, "cat", "/proc/1/status").stdout
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)}
    assert fields["Uid"].split()[0] == str(IMAGE_USER)
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"


def test_the_random_model_fails_its_canaries_and_the_pod_stays_out_of_the_service(served: Served) -> None:
    canaries_fail_and_gate_holds(served)
    namespace, pod = served.namespace, served.pod()
    metrics = httpx.get(f"http://127.0.0.1:{TEST_METRICS_PORT}/metrics", timeout=10).text
    labels = f'glmdeployment="{NAME}",namespace="{namespace}"'
    assert re.search(rf'glmops_canary_runs_total{{{labels},result="fail"}} [1-9]', metrics), metrics
    # The answers came from vLLM in the pod: its own null-content counter counted the operator's questions.
    counted = httpx.get(f"http://{pod['status']['podIP']}:{VLLM_PORT}/metrics", timeout=10).text
    nulls = [line for line in counted.splitlines() if line.startswith("glmops_chat_null_content_total{")]
    assert nulls and sum(float(line.rsplit(" ", 1)[1]) for line in nulls) >= 1, nulls


def test_a_server_killed_in_its_pod_is_held_out_and_judged_again_as_soon_as_it_is_back(
    served: Served, node: RealNode
) -> None:
    """The kubelet restarts a killed server container in place (same pod): the gate says so and re-runs the suite.

    With the random model the gate is already False, so nothing leaves the Service here (tests/e2e/test_canary_gate.py
    shows a passing pod taken out and back); what this shows for real is that the kubelet's restart reaches the gate
    through the pod's status, and that the new server is judged once it is up, not on the old one's backoff."""
    pod = served.pod()
    name = pod["metadata"]["name"]
    (server,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "vllm"]
    last = failed_canary_report(served.kubectl, served.namespace, NAME, name)["checkedAt"]
    killed = time.monotonic()
    # SIGKILL from outside, as the kernel's OOM killer ends a container: no handler runs, the kubelet restarts it.
    node.ctr("tasks", "kill", "--signal", "SIGKILL", server["containerID"].split("://", 1)[1])

    def held_out() -> dict[str, Any]:
        current = served.pod()
        (now,) = [c for c in current["status"]["containerStatuses"] if c["name"] == "vllm"]
        assert now["restartCount"] == server["restartCount"] + 1, now
        gate = condition(current, CANARY_CONDITION)
        assert gate["reason"] == Reason.SERVER_RESTARTED and gate["status"] == "False", gate
        return current

    current = eventually(held_out, timeout=120, interval=0.5, what="the gate to see the restart")
    timed(served.notes, "server killed -> gate ServerRestarted s", killed)
    assert current["metadata"]["uid"] == pod["metadata"]["uid"], "the same pod: its container restarted in place"
    assert condition(current, "Ready")["status"] == "False"
    back = eventually(
        lambda: condition(served.pod(), "ContainersReady").get("status") == "True" and time.monotonic(),
        timeout=START_TIMEOUT_S,
        interval=1,
        what="the restarted server up",
    )
    timed(served.notes, "server killed -> back up s", killed)

    def judged_again() -> dict[str, Any]:
        report = failed_canary_report(served.kubectl, served.namespace, NAME, name)
        assert report["checkedAt"] > last, report
        return report

    eventually(judged_again, timeout=CANARY_TIMEOUT_S, interval=1, what="the new server's canaries")
    served.notes["back up -> judged again s"] = round(time.monotonic() - back, 1)
    gate = condition(served.pod(), CANARY_CONDITION)
    assert (gate["status"], gate["reason"]) == ("False", Reason.CANARY_FAILED), gate
