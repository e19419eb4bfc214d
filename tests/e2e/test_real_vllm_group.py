"""A replica that spans two pods, for real: vLLM's CPU image as a LeaderWorkerSet group on the real node.

The real-vLLM pod test's deployment (tests/support/cpu_pod.py) asks for TP8 x PP2 on H200: two nodes' GPUs, so
glmops renders a LeaderWorkerSet, and the real LWS controller (cluster/lws.sh) makes the leader pod and the worker
StatefulSet. Both pods run `vllm serve` from the CPU image as rendered: the worker `--headless`, with
`--master-addr $(LWS_LEADER_ADDRESS)` (the leader's name in LWS's headless Service, resolved by the node's
CoreDNS) and `--node-rank $(LWS_WORKER_INDEX)`; the leader serves the API once both pipeline stages joined. The
operator asks the leader, the random model fails the canaries, the gate keeps the group out of the Service; losing
the worker makes LWS recreate the whole group.

What the test relaxes beyond test_real_vllm_pod.py's differences (its docstring), and why:
- One real node holds both pods: it advertises two H200 nodes' GPUs (16), and there is no anti-affinity or
  topology to relax (glmops renders none: each pod asks for a node's worth of GPUs, which keeps them apart on GPUs).
- The launcher unsets the VLLM_PP_LAYER_PARTITION admission sets for GLM-5.3's 78 layers (rule vllm-63170): the
  tiny model has 2, split 1,1 by vLLM.
- Not `--enforce-eager`: the model is compiled as vLLM compiles it on a CPU (Inductor, with the image's C++
  compiler), which the second pipeline stage needs; and no speculative decoding (tests/support/cpu_pod.py
  group_manifest says why).

Not part of `make test`: `make realvllm-pod-test` runs it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from glm_operator.api.constants import CANARY_CONDITION, VLLM_PORT, Reason
from tests.conftest import OperatorProcess
from tests.support.cluster import REPO, Cluster, eventually, run_script
from tests.support.cpu_pod import (
    ACCELERATOR,
    CANARY_TIMEOUT_S,
    IMAGE_USER,
    MODEL,
    NAME,
    START_TIMEOUT_S,
    Served,
    access_policy,
    canaries_fail_and_gate_holds,
    condition,
    figures_fixture,
    fill_node_cache,
    group_manifest,
    node_fixtures,
    real_pod_marks,
    serve,
    server_up,
    timed,
)
from tests.support.glmd import endpoint_conditions
from tests.support.realnode import NODE_NAME, RealNode, env, gpu_stand_in

pytestmark = real_pod_marks("the CPU vLLM image as a two-pod group (the 6.7 GB image imported)", 2400)
# Labels and environment variables the LWS controller writes (sigs.k8s.io/lws api/leaderworkerset/v1).
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_ADDR = "127.0.45.7"  # the controller's loopback address for this cluster (cluster/lws.sh)


notes = figures_fixture("real-vllm-group-figures.json", "real vLLM group e2e")
cpu_image, node = node_fixtures()


@pytest.fixture(scope="module")
def leader_worker_set(node: RealNode) -> Iterator[None]:
    """The real LWS controller on the real-node cluster, uninstalled afterwards."""
    lws_env = {**env(), "GLMOPS_LWS_ADDR": LWS_ADDR}
    run_script("lws.sh", "up", env=lws_env, timeout=900)
    yield
    run_script("lws.sh", "down", env=lws_env, timeout=300)


@pytest.fixture(scope="module")
def node_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fill_node_cache(tmp_path_factory.mktemp("node-model-cache"), IMAGE_USER)


@pytest.fixture(scope="module")
def operator(node: RealNode, leader_worker_set: None, node_cache: Path) -> Iterator[OperatorProcess]:
    """The operator beside the cluster, started after LWS is installed so it renders LeaderWorkerSets at once."""
    kubectl = node.kubectl
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl.wait_established("glmdeployments.glmops.dev")
    cluster = Cluster(node.bin_dir, node.state_dir, kubectl.kubeconfig, kubectl)
    policy = json.dumps(access_policy(node_cache))
    process = OperatorProcess(cluster, {"GLMOPS_ACCESS_POLICY": policy}, name="operator-real-vllm-group")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def served(
    node: RealNode, cpu_image: tuple[str, str], operator: OperatorProcess, node_cache: Path, notes: dict[str, Any]
) -> Iterator[Served]:
    namespace = f"real-vllm-group-{uuid.uuid4().hex[:6]}"
    manifest = group_manifest(namespace, cpu_image[0], node_cache)
    with gpu_stand_in(node.kubectl, ACCELERATOR, nodes=2), serve(node, namespace, manifest, notes) as served:
        yield served


@pytest.fixture(autouse=True)
def _save_on_failure(request: pytest.FixtureRequest, served: Served) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        served.notes["failed"] = True


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


def _group(served: Served) -> dict[str, dict[str, Any]]:
    """The group's live pods by LWS worker index ("0" is the leader)."""
    return {p["metadata"]["labels"][WORKER_INDEX]: p for p in served.pods() if WORKER_INDEX in p["metadata"]["labels"]}


def _running_group(served: Served) -> dict[str, dict[str, Any]]:
    pods = _group(served)
    assert set(pods) == {"0", "1"}, sorted(pods)
    assert all(p["status"].get("phase") == "Running" for p in pods.values()), "both pods running"
    return pods


def test_the_group_forms_on_the_real_node_and_its_leader_serves_both_pipeline_stages(served: Served) -> None:
    pods = eventually(lambda: _running_group(served), timeout=300, interval=2, what="the leader and worker running")
    leader, worker = pods["0"], pods["1"]
    assert leader["spec"]["nodeName"] == worker["spec"]["nodeName"] == NODE_NAME
    address = _env(leader)[LEADER_ADDRESS]
    assert address == f"{leader['metadata']['name']}.{leader['spec']['subdomain']}.{served.namespace}"
    args = worker["spec"]["containers"][0]["args"]
    assert args[args.index("--master-addr") + 1] == f"$({LEADER_ADDRESS})" and "--headless" in args
    assert args[args.index("--nnodes") + 1] == "2"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"

    leader = server_up(served, timeout=START_TIMEOUT_S)
    timed(served.notes, "group formed and leader serving s", served.applied_at)
    worker_log = served.logs(worker["metadata"]["name"], "vllm")
    leader_log = served.logs(leader["metadata"]["name"], "vllm")
    for log in (leader_log, worker_log):
        assert "VLLM_PP_LAYER_PARTITION 38,40 unset" in log, log[-3000:]
    # Both ranks of one world: the worker reached the leader at the address LWS gave it, through the node's DNS.
    assert f"head node address {address}:29501" in worker_log, worker_log[-3000:]
    assert "world_size=2 rank=1" in worker_log and "world_size=2 rank=0" in leader_log, worker_log[-3000:]
    answer = httpx.post(
        f"http://{leader['status']['podIP']}:{VLLM_PORT}/v1/completions",
        json={"model": MODEL, "prompt": "1 2 3 4", "max_tokens": 8, "temperature": 0},
        timeout=120,
    )
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 8, answer.text


def test_the_canaries_judge_the_group_and_the_gate_keeps_it_out_of_the_service(served: Served) -> None:
    started = time.monotonic()
    canaries_fail_and_gate_holds(served)
    timed(served.notes, "canary verdict on the group s", started)
    worker = _group(served)["1"]
    assert "glmops.dev/serving" not in worker["metadata"]["labels"], "a headless worker is never in the Service"


# Canaries the random model passes: the null-content check alone, at a rate of 1 (any chat answer does). A user
# could set the same; here it lets the group pass, so that the Service's traffic to a serving group, and how soon it
# stops when the group loses its worker, are measured on the real node.
PASSABLE = {
    "smoke": {"enabled": False},
    "gsm8k": {"enabled": False},
    "copyFidelity": {"enabled": False},
    "nullContent": {"maxRate": 1.0, "samples": 4},
}


def _serving_through_the_service(served: Served, leader: dict[str, Any]) -> bool:
    """The leader is the Service's one ready endpoint and the Service's address answers (kube-proxy on the node)."""
    ip = leader["status"]["podIP"]
    assert [c.get("ready") for c in endpoint_conditions(served.kubectl, served.namespace, NAME, ip)] == [True]
    cluster_ip = served.kubectl.get("service", NAME, served.namespace)["spec"]["clusterIP"]
    models = httpx.get(f"http://{cluster_ip}:{VLLM_PORT}/v1/models", timeout=5)
    assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == [MODEL], models.text
    return True


def _serves(served: Served, leader: dict[str, Any], group: str, figure: str, since: float) -> None:
    """Wait for `group` (led by `leader`) to pass and serve through its Service; record the time since `since`."""
    eventually(
        lambda: _serving_through_the_service(served, leader),
        timeout=CANARY_TIMEOUT_S,
        interval=1,
        what=f"{group} to pass and serve",
    )
    timed(served.notes, figure, since)


def test_a_group_that_passes_serves_through_its_service_and_a_dead_worker_takes_it_out(
    served: Served, node: RealNode
) -> None:
    kubectl, namespace = served.kubectl, served.namespace
    patched = time.monotonic()
    kubectl.run(
        "patch", "glmd", NAME, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {"canary": PASSABLE}})
    )
    leader = served.pod()
    # The next attempt (on the failed gate's backoff) reads the new canaries: the group passes and serves.
    _serves(served, leader, "the group", "passable canaries -> group serving s", patched)
    gate = condition(served.pod(), CANARY_CONDITION)
    assert (gate["status"], gate["reason"]) == ("True", Reason.CANARY_PASSED), gate

    # The worker's vLLM dies (SIGKILL from outside, as an OOM kill): the kubelet restarts the container, LWS
    # (RecreateGroupOnPodRestart) recreates the whole group, and the Service stops sending to it at once.
    pods = _running_group(served)
    old = {p["metadata"]["uid"] for p in pods.values()}
    (server,) = [c for c in pods["1"]["status"]["containerStatuses"] if c["name"] == "vllm"]
    lost = time.monotonic()
    node.ctr("tasks", "kill", "--signal", "SIGKILL", server["containerID"].split("://", 1)[1])
    ip = leader["status"]["podIP"]

    def out_of_service() -> bool:
        conditions = endpoint_conditions(kubectl, namespace, NAME, ip)
        assert all(c.get("ready") is not True for c in conditions), conditions
        return True

    eventually(out_of_service, timeout=120, interval=0.2, what="the group out of the Service")
    timed(served.notes, "worker killed -> group out of the Service s", lost)

    def reformed() -> dict[str, dict[str, Any]]:
        pods = _running_group(served)
        assert not old & {p["metadata"]["uid"] for p in pods.values()}, "leader and worker both recreated"
        return pods

    eventually(reformed, timeout=300, interval=2, what="LWS to recreate the group")
    new_leader = server_up(served, timeout=START_TIMEOUT_S)
    timed(served.notes, "worker killed -> new group up s", lost)
    _serves(served, new_leader, "the new group", "worker killed -> new group serving s", lost)
    conditions = {c["type"]: c for c in served.pod()["status"]["conditions"]}
    gate, ready = conditions[CANARY_CONDITION], conditions["Ready"]
    # The new leader served only once its own canaries passed.
    assert gate["status"] == "True" and ready["lastTransitionTime"] >= gate["lastTransitionTime"], (ready, gate)
