"""A replica that spans two nodes, formed by the real LeaderWorkerSet controller and judged by the canary gate.

The release's controller (cluster/lws.sh) turns the LeaderWorkerSet glmops renders into a leader pod and a worker
StatefulSet; kwok runs both pods on two fake H200 nodes, and the simulator fleet answers for the leader on its
loopback IP. What LWS promises for a group (the leader address, one group recreated when a pod of it is lost) and
what glmops promises on top (no traffic to a group before its canaries pass) are held here; the figures are printed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from glm_operator.api.constants import CANARY_CONDITION, Reason
from glm_operator.catalog.accelerators import load_accelerators
from glm_operator.render.fleet import fake_node
from tests.conftest import OperatorProcess, install_lws, uninstall_lws
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import Kubectl, eventually

pytestmark = pytest.mark.cluster
NAME = "grp"
GROUP = f"{NAME}-group"  # the LeaderWorkerSet: not the serving Service's name, which LWS would take for its own
# Labels and the environment variable the LWS controller writes (sigs.k8s.io/lws api/leaderworkerset/v1).
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_ADDRESS = "LWS_LEADER_ADDRESS"


@pytest.fixture(scope="module")
def lws_for_this_module(operator: OperatorProcess) -> Iterator[None]:
    """The real LWS controller, installed once for this module's tests and uninstalled after them.

    One install for the module rather than one per test (tests/conftest.py leader_worker_set): each uninstall
    removes the API the operator watches (tests/conftest.py uninstall_lws says what that may do).
    """
    install_lws()
    yield
    uninstall_lws(operator)


@pytest.fixture(autouse=True)
def _running(lws_for_this_module: None, operator: OperatorProcess, sim_fleet: object) -> None:
    """The LWS controller, the operator and the simulators."""


def _group(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    """The group's live pods by worker index ("0" is the leader)."""
    return {
        p["metadata"]["labels"][WORKER_INDEX]: p
        for p in kubectl.get("pods", namespace=namespace)["items"]
        if p["metadata"]["labels"].get(LWS_NAME) == GROUP and not p["metadata"].get("deletionTimestamp")
    }


def _running_group(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    pods = _group(kubectl, namespace)
    assert set(pods) == {"0", "1"}, sorted(pods)
    assert all(p["status"].get("phase") == "Running" for p in pods.values()), "both pods running"
    return pods


def _serving(kubectl: Kubectl, namespace: str) -> set[str]:
    """The uids of the pods the deployment's Service sends traffic to (a recreated leader keeps its name).

    The EndpointSlice controller publishes a pod as a ready endpoint exactly when it matches the Service's selector,
    is Ready and is not terminating; kwok's loopback pod IPs are refused in EndpointSlices, so that rule is applied
    here (as tests/integration/test_rollout_faults.py does).
    """
    selector = kubectl.get("service", NAME, namespace)["spec"]["selector"]
    return {
        p["metadata"]["uid"]
        for p in kubectl.get("pods", namespace=namespace)["items"]
        if selector.items() <= p["metadata"]["labels"].items()
        and not p["metadata"].get("deletionTimestamp")
        and _conds(p).get("Ready") == "True"
    }


def _conds(pod: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """The command line as the kubelet starts it: $(VAR) replaced from the container's environment."""
    out = []
    for arg in args:
        for key, value in env.items():
            arg = arg.replace(f"$({key})", value)
        out.append(arg)
    return out


def test_a_two_node_replica_forms_one_lws_group_that_serves_only_after_its_canaries(
    kubectl: Kubectl, namespace: str
) -> None:
    start = time.monotonic()
    kubectl.apply(B(NAME).accelerator("H200").tensor(8).pipeline(2).build(), "-n", namespace)
    lws = eventually(lambda: kubectl.get("leaderworkerset", GROUP, namespace), timeout=60, what="the LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"

    pods = eventually(lambda: _running_group(kubectl, namespace), timeout=120, what="the leader and worker running")
    leader, worker = pods["0"], pods["1"]
    assert leader["spec"]["nodeName"] != worker["spec"]["nodeName"], "one node per pod of the group"
    address = _env(leader)[LEADER_ADDRESS]
    assert _env(worker)[LEADER_ADDRESS] == address
    assert address == f"{leader['metadata']['name']}.{leader['spec']['subdomain']}.{namespace}", address
    # The name resolves only through a headless Service of that subdomain that selects the group's pods.
    subdomain = kubectl.get("service", leader["spec"]["subdomain"], namespace)["spec"]
    assert subdomain["clusterIP"] == "None" and subdomain["publishNotReadyAddresses"] is True, subdomain
    assert subdomain["selector"].items() <= leader["metadata"]["labels"].items()
    worker_cmd = _expand(worker["spec"]["containers"][0]["args"], _env(worker))
    assert worker_cmd[worker_cmd.index("--master-addr") + 1] == address
    assert worker_cmd[worker_cmd.index("--node-rank") + 1] == "1" and "--headless" in worker_cmd
    leader_cmd = _expand(leader["spec"]["containers"][0]["args"], _env(leader))
    assert leader_cmd[leader_cmd.index("--nnodes") + 1] == "2"
    assert leader_cmd[leader_cmd.index("--node-rank") + 1] == "0"
    formed = time.monotonic() - start

    leader_uid = leader["metadata"]["uid"]
    eventually(lambda: _serving(kubectl, namespace) == {leader_uid}, timeout=180, what="the leader to serve")
    passed = time.monotonic() - start
    leader = _group(kubectl, namespace)["0"]
    gate = next(c for c in leader["status"]["conditions"] if c["type"] == CANARY_CONDITION)
    assert gate["status"] == "True" and gate["reason"] == Reason.CANARY_PASSED
    print(
        f"\n[figures] LWS group formed (both pods running) {formed:.1f}s, passed its canaries and served {passed:.1f}s"
    )

    # A worker lost: LWS recreates the whole group, and the Service stops sending to it until the new group passes.
    worker_name = worker["metadata"]["name"]
    stopped_after, back = _lose_and_reform(
        kubectl, namespace, lambda: kubectl.run("delete", "pod", worker_name, "-n", namespace, "--wait=false")
    )
    print(
        f"[figures] worker lost -> group no longer served {stopped_after:.1f}s, new group passed and served {back:.1f}s"
    )


def _lose_and_reform(kubectl: Kubectl, namespace: str, lose: Callable[[], object]) -> tuple[float, float]:
    """Lose part of the serving group (`lose`): seconds until the group is out of the Service, and until a whole new
    group (leader and worker both recreated) serves, which its gate allowed only once its canaries passed."""
    old = _running_group(kubectl, namespace)
    old_uids = {p["metadata"]["uid"] for p in old.values()}
    assert _serving(kubectl, namespace) == {old["0"]["metadata"]["uid"]}, "the group serves before it is hurt"
    lost = time.monotonic()
    lose()
    eventually(lambda: not _serving(kubectl, namespace), timeout=60, interval=0.1, what="the group to stop serving")
    stopped_after = time.monotonic() - lost

    def reformed() -> dict[str, dict[str, Any]]:
        pods = _running_group(kubectl, namespace)
        # The worker goes with its leader, and the leader with its worker: LWS recreates the group whole.
        assert not old_uids & {p["metadata"]["uid"] for p in pods.values()}, "leader and worker both recreated"
        return pods

    pods = eventually(reformed, timeout=120, what="LWS to recreate the group")
    new_uid = pods["0"]["metadata"]["uid"]
    eventually(lambda: _serving(kubectl, namespace) == {new_uid}, timeout=180, what="the new group to serve")
    back = time.monotonic() - lost
    conditions = {c["type"]: c for c in _group(kubectl, namespace)["0"]["status"]["conditions"]}
    gate, ready = conditions[CANARY_CONDITION], conditions["Ready"]
    assert gate["status"] == "True" and gate["reason"] == Reason.CANARY_PASSED
    # The readiness gate held the new leader out of the Service until its canaries passed, never before.
    assert ready["lastTransitionTime"] >= gate["lastTransitionTime"], (ready, gate)
    return stopped_after, back


GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"


def test_a_lost_leader_takes_its_group_out_of_the_service_until_a_new_group_passes(
    kubectl: Kubectl, namespace: str
) -> None:
    pods = _serving_group(kubectl, namespace)
    leader = pods["0"]["metadata"]["name"]
    # The worker goes with its leader: LWS owns the worker StatefulSet by the leader pod.
    stopped_after, back = _lose_and_reform(
        kubectl, namespace, lambda: kubectl.run("delete", "pod", leader, "-n", namespace, "--wait=false")
    )
    print(f"\n[figures] leader lost -> group no longer served {stopped_after:.1f}s, new group served {back:.1f}s")


def test_a_worker_container_restarting_in_place_recreates_the_group_which_serves_only_after_it_passes(
    kubectl: Kubectl, namespace: str
) -> None:
    worker = _serving_group(kubectl, namespace)["1"]
    (server,) = [c for c in worker["status"]["containerStatuses"] if c["name"] == "vllm"]
    # kwok restarts no container: this writes what a kubelet writes once it has started the container again. The
    # LWS controller reads the restart count (RecreateGroupOnPodRestart): the group goes whole, not just the pod.
    patch = {"status": {"containerStatuses": [{"name": "vllm", "restartCount": server["restartCount"] + 1}]}}
    stopped_after, back = _lose_and_reform(
        kubectl,
        namespace,
        lambda: kubectl.run(
            "patch",
            "pod",
            worker["metadata"]["name"],
            "-n",
            namespace,
            "--subresource=status",
            "--type=strategic",
            "-p",
            json.dumps(patch),
        ),  # fmt: skip
    )
    print(f"\n[figures] worker restarted -> group no longer served {stopped_after:.1f}s, new group served {back:.1f}s")


def _serving_group(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    """The test deployment (TP8 x PP2 on H200: one group of two pods) applied, once its leader serves."""
    kubectl.apply(B(NAME).accelerator("H200").tensor(8).pipeline(2).build(), "-n", namespace)
    pods = eventually(lambda: _running_group(kubectl, namespace), timeout=120, what="the leader and worker running")
    leader_uid = pods["0"]["metadata"]["uid"]
    eventually(lambda: _serving(kubectl, namespace) == {leader_uid}, timeout=180, what="the leader to serve")
    return pods


@pytest.fixture
def four_more_h200_nodes(kubectl: Kubectl) -> Iterator[None]:
    """Room for two groups of two nodes and the rollout's surge group: the test fleet has two H200 nodes."""
    nodes = [fake_node(load_accelerators().get("H200"), index) for index in range(2, 6)]
    for node in nodes:
        kubectl.apply(node)
    yield
    for node in nodes:
        kubectl.run("delete", "node", node["metadata"]["name"], "--wait=false", check=False)


def _groups(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Live pods by group index, then worker index."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for p in kubectl.get("pods", namespace=namespace)["items"]:
        labels = p["metadata"]["labels"]
        if labels.get(LWS_NAME) == GROUP and not p["metadata"].get("deletionTimestamp"):
            out.setdefault(labels[GROUP_INDEX], {})[labels[WORKER_INDEX]] = p
    return out


def test_a_rolling_update_of_two_groups_keeps_both_serving_and_never_serves_a_half_formed_or_mixed_group(
    kubectl: Kubectl, namespace: str, four_more_h200_nodes: None
) -> None:
    kubectl.apply(B(NAME).accelerator("H200").tensor(8).pipeline(2).replicas(2).build(), "-n", namespace)
    eventually(lambda: len(_serving(kubectl, namespace)) == 2, timeout=240, what="both groups to serve")
    before = {p["metadata"]["labels"][REVISION] for g in _groups(kubectl, namespace).values() for p in g.values()}
    assert len(before) == 1

    started = time.monotonic()
    kubectl.apply(
        B(NAME).accelerator("H200").tensor(8).pipeline(2).replicas(2).env("GLMOPS_ROLL", "1").build(), "-n", namespace
    )
    fewest, seen, revisions = 2, 0, set()
    deadline = started + 420
    while time.monotonic() < deadline:
        serving, groups = _serving(kubectl, namespace), _groups(kubectl, namespace)
        seen += 1
        fewest = min(fewest, len(serving))
        for group in groups.values():
            leader = group.get("0")
            if leader is None or leader["metadata"]["uid"] not in serving:
                continue
            worker = group.get("1")
            # Served only with its worker running, and both of one revision: never half-formed, never mixed.
            assert worker is not None and worker["status"].get("phase") == "Running", (leader, worker)
            revision = leader["metadata"]["labels"][REVISION]
            assert worker["metadata"]["labels"][REVISION] == revision
            revisions.add(revision)
        leaders = [g.get("0") for g in groups.values()]
        if (
            len(serving) == 2
            and len(groups) == 2
            and all(
                p is not None and p["metadata"]["labels"][REVISION] not in before and p["metadata"]["uid"] in serving
                for p in leaders
            )
        ):
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"the rollout did not finish in 420 s; groups: {sorted(_groups(kubectl, namespace))}")
    assert fewest == 2, f"maxUnavailable 0: {fewest} group(s) served at one point"
    assert len(revisions - before) == 1, "the new revision served"
    print(f"\n[figures] rolling update of 2 groups: {time.monotonic() - started:.1f}s, {seen} looks, never < 2 served")
