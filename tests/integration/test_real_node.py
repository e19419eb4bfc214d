"""One real node beside the kwok fleet: a kubelet on containerd and runc, a CNI bridge and kube-proxy.

It runs on its own cluster (own name, ports and pod ranges), so the shared test cluster stays as it
is. The tests run in file order: the last one stops the node and looks for anything left behind.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glm_operator.api.constants import CANARY_CONDITION, Reason
from tests.support.cluster import Kubectl, eventually, run_script
from tests.support.realnode import (
    BRIDGE,
    NEEDS_ROOT_AND_CONTAINERD,
    NODE_NAME,
    NODE_POD_CIDR,
    TOLERATION,
    RealNode,
    host_state,
)
from tests.support.realnode import env as _env
from tests.support.realnode import sh as _sh
from tests.support.realnode import state_dir as _state_dir

pytestmark = [pytest.mark.cluster, *NEEDS_ROOT_AND_CONTAINERD]


@pytest.fixture(scope="module")
def node(real_node: RealNode) -> RealNode:
    """The session's real-node cluster (tests/conftest.py), up even if an earlier module stopped its node."""
    real_node.ensure_up()
    return real_node


@pytest.fixture
def ns(node: RealNode, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"rn-{request.node.name.lower().replace('_', '-')[5:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    node.kubectl.run("create", "namespace", name)
    yield name
    node.kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def echo_pod(node: RealNode, name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    container = {
        "name": "echo",
        "image": node.images["HTTPECHO_IMAGE"],
        "imagePullPolicy": "Never",  # made on this machine; there is no registry to pull from
        "env": env,
        "ports": [{"containerPort": 8080}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeSelector": {"glmops.dev/real-node": "true"},
            "tolerations": [TOLERATION],
            "dnsPolicy": "Default",
            "terminationGracePeriodSeconds": 2,
            "containers": [container],
            **spec,
        },
    }


def service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 (a pod or Service IP of this test)
        body: str = response.read().decode()
        return body


def answer_of(url: str) -> str | None:
    """The body at `url`, or None while nothing answers there yet."""
    try:
        return http_get(url)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in obj["status"].get("conditions", []) if c["type"] == kind), None)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GLMOPS_NODE_POD_CIDR", "127.24.5.0/24", "overlaps GLMOPS_POD_CIDR (kwok's fake pod IPs) 127.24.0.0/16"),
        ("GLMOPS_NODE_POD_CIDR", "10.96.3.0/24", "overlaps GLMOPS_SERVICE_CIDR 10.96.0.0/16"),
        ("GLMOPS_NODE_POD_CIDR", "10.244.0.0/30", "needs an IPv4 range of /28 or wider"),
        ("GLMOPS_NODE_POD_CIDR", "10.244.0.300/24", "not a network"),
        ("GLMOPS_NODE_BRIDGE", "glmops-bridge-too-long", "15 characters at most"),
    ],
)
def test_node_up_refuses_a_bad_setting_naming_it_before_touching_the_host(
    variable: str, value: str, message: str
) -> None:
    proc = subprocess.run(
        [str(Path(__file__).resolve().parents[2] / "cluster" / "node.sh"), "up"],
        env={**_env(), "GLMOPS_CLUSTER": "never-started", variable: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"{variable}: {value}: " in proc.stderr and message in proc.stderr
    assert not (_state_dir().parent / "never-started").exists(), "it stopped before making anything"


def test_node_registers_ready_with_its_own_node_identity(node: RealNode) -> None:
    got = node.kubectl.get("node", NODE_NAME)
    assert condition(got, "Ready") == "True"
    assert {"key": "glmops.dev/real-node", "value": "true", "effect": "NoSchedule"} in got["spec"]["taints"]
    assert "nvidia.com/gpu" not in got["status"]["capacity"]
    assert ipaddress.ip_address(got["status"]["addresses"][0]["address"]) in NODE_POD_CIDR
    info = got["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    # The kubelet talks to the API server as system:node:<name> in system:nodes, not as an admin.
    as_node = Kubectl(node.kubectl.binary, str(node.state_dir / "node.kubeconfig"))
    whoami = json.loads(as_node.run("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert whoami["username"] == f"system:node:{NODE_NAME}"
    assert "system:nodes" in whoami["groups"]
    # The Node authorizer gives a node what its own pods need, never an admin's reach.
    for verb, resource in (("list", "secrets"), ("delete", "namespaces"), ("create", "deployments")):
        answer = as_node.run("auth", "can-i", verb, resource, "--all-namespaces", check=False).stdout.strip()
        assert answer.split()[0] == "no", f"a node may {verb} {resource}: {answer}"


def test_pod_from_a_local_image_serves_http_on_its_pod_ip(node: RealNode, ns: str) -> None:
    started = time.monotonic()
    node.kubectl.apply(echo_pod(node, "echo", {"app": "echo"}), "-n", ns)
    node.kubectl.run("wait", "--for=condition=Ready", "pod/echo", "-n", ns, "--timeout=90s", timeout=100)
    print(f"pod Ready {time.monotonic() - started:.1f}s after create")
    pod = node.kubectl.get("pod", "echo", ns)
    assert pod["spec"]["nodeName"] == NODE_NAME
    pod_ip = pod["status"]["podIP"]
    assert ipaddress.ip_address(pod_ip) in NODE_POD_CIDR
    assert http_get(f"http://{pod_ip}:8080/") == f"pod=echo ip={pod_ip}\n"
    # The API server reaches the kubelet with its own client certificate: logs come back.
    assert "httpecho listening on :8080" in node.kubectl.run("logs", "echo", "-n", ns).stdout


def test_service_cluster_ip_reaches_the_pod_through_kube_proxy(node: RealNode, ns: str) -> None:
    node.kubectl.apply(echo_pod(node, "backend", {"app": "backend"}), "-n", ns)
    node.kubectl.apply(service("backend", {"app": "backend"}), "-n", ns)
    node.kubectl.run("wait", "--for=condition=Ready", "pod/backend", "-n", ns, "--timeout=90s", timeout=100)
    pod_ip = node.kubectl.get("pod", "backend", ns)["status"]["podIP"]
    cluster_ip = node.kubectl.get("service", "backend", ns)["spec"]["clusterIP"]
    # Nothing on the host holds a Service IP: only kube-proxy's NAT rules make it answer.
    assert cluster_ip not in _sh("ip", "-o", "addr")
    answer = eventually(lambda: answer_of(f"http://{cluster_ip}/"), timeout=30, what="the ClusterIP to answer")
    assert answer == f"pod=backend ip={pod_ip}\n"


def test_pods_resolve_services_and_headless_pod_names_through_the_node_s_dns(node: RealNode, ns: str) -> None:
    """The kubelet points pods at the node's CoreDNS, which answers from the API.

    The name a LeaderWorkerSet gives its workers for the leader (`<pod hostname>.<headless Service>.<namespace>`,
    found through the pod's search path) resolves before the leader is Ready, as a group's workers need it while
    the leader is still starting; a Service name resolves to its ClusterIP.
    """
    headless = service("grp", {"app": "leader"})
    headless["spec"] |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    never_ready = {"readinessProbe": {"exec": {"command": ["/nonexistent"]}, "periodSeconds": 1}}
    leader = echo_pod(node, "leader", {"app": "leader"}, hostname="grp-0", subdomain="grp")
    leader["spec"]["containers"][0] |= never_ready
    client = echo_pod(node, "client", {"app": "client"}, dnsPolicy="ClusterFirst")
    for obj in (headless, service("backend", {"app": "client"}), leader, client):
        node.kubectl.apply(obj, "-n", ns)
    node.kubectl.run("wait", "--for=condition=Ready", "pod/client", "-n", ns, "--timeout=90s", timeout=100)
    eventually(lambda: node.kubectl.get("pod", "leader", ns)["status"].get("podIP"), timeout=90, what="leader's IP")
    leader_ip = node.kubectl.get("pod", "leader", ns)["status"]["podIP"]
    assert condition(node.kubectl.get("pod", "leader", ns), "Ready") == "False"
    client_ip = node.kubectl.get("pod", "client", ns)["status"]["podIP"]

    def resolved(name: str) -> str | None:
        return answer_of(f"http://{client_ip}:8080/resolve?name={name}")

    started = time.monotonic()
    assert eventually(lambda: resolved(f"grp-0.grp.{ns}"), timeout=30, what="the leader's name") == f"{leader_ip}\n"
    print(f"leader's name resolved {time.monotonic() - started:.1f}s after the client was Ready")
    cluster_ip = node.kubectl.get("service", "backend", ns)["spec"]["clusterIP"]
    assert resolved("backend") == f"{cluster_ip}\n"
    api_ip = node.kubectl.get("service", "kubernetes", "default")["spec"]["clusterIP"]
    assert resolved("kubernetes.default") == f"{api_ip}\n"
    with pytest.raises(urllib.error.HTTPError) as refused:
        http_get(f"http://{client_ip}:8080/resolve?name=grp-1.grp.{ns}")
    assert refused.value.code == 502, "a pod name the Service has no endpoint for does not resolve"


def _endpoint_ready(node: RealNode, ns: str, svc: str) -> list[bool]:
    slices = node.kubectl.run(
        "get", "endpointslices", "-n", ns, "-l", f"kubernetes.io/service-name={svc}", "-o", "json"
    )
    return [
        bool(ep["conditions"].get("ready"))
        for s in json.loads(slices.stdout)["items"]
        for ep in s.get("endpoints") or []
    ]


def test_readiness_gate_keeps_a_running_pod_out_of_the_service_until_true(node: RealNode, ns: str) -> None:
    gated = echo_pod(node, "gated", {"app": "gated"}, readinessGates=[{"conditionType": CANARY_CONDITION}])
    node.kubectl.apply(gated, "-n", ns)
    node.kubectl.apply(service("gated", {"app": "gated"}), "-n", ns)
    node.kubectl.run("wait", "--for=condition=ContainersReady", "pod/gated", "-n", ns, "--timeout=90s", timeout=100)
    pod = node.kubectl.get("pod", "gated", ns)
    pod_ip, cluster_ip = pod["status"]["podIP"], node.kubectl.get("service", "gated", ns)["spec"]["clusterIP"]
    assert http_get(f"http://{pod_ip}:8080/").startswith("pod=gated"), "the container itself serves"
    eventually(lambda: _endpoint_ready(node, ns, "gated") == [False], timeout=30, what="a not-ready endpoint")
    time.sleep(3)  # give kube-proxy every chance to (wrongly) route to it
    assert condition(node.kubectl.get("pod", "gated", ns), "Ready") == "False"
    assert answer_of(f"http://{cluster_ip}/") is None, (
        "a pod whose readiness gate is unset must not get Service traffic"
    )

    patch = {"status": {"conditions": [{"type": CANARY_CONDITION, "status": "True", "reason": Reason.CANARY_PASSED}]}}
    node.kubectl.run(
        "patch", "pod", "gated", "-n", ns, "--subresource=status", "--type=strategic", "-p", json.dumps(patch)
    )
    eventually(lambda: condition(node.kubectl.get("pod", "gated", ns), "Ready") == "True", timeout=30, what="Ready")
    eventually(lambda: _endpoint_ready(node, ns, "gated") == [True], timeout=30, what="a ready endpoint")
    answer = eventually(lambda: answer_of(f"http://{cluster_ip}/"), timeout=30, what="the ClusterIP to answer")
    assert answer == f"pod=gated ip={pod_ip}\n"


def _gate_states(node: RealNode, ns: str, pod: str) -> tuple[str | None, str | None]:
    got = node.kubectl.get("pod", pod, ns)
    return condition(got, "ContainersReady"), condition(got, "Ready")


def test_kwok_gates_a_pod_s_readiness_as_the_real_kubelet_does(node: RealNode, ns: str) -> None:
    """kwok stands in for the kubelet everywhere else; here both get the same gated pod side by side."""
    gate = {"readinessGates": [{"conditionType": CANARY_CONDITION}]}
    real = echo_pod(node, "real", {"app": "real"}, **gate)
    fake = echo_pod(node, "fake", {"app": "fake"}, **gate)
    fake["spec"]["nodeSelector"] = {"glmops.dev/fake-node": "true"}
    fake["spec"]["tolerations"] = []
    for pod in (real, fake):
        node.kubectl.apply(pod, "-n", ns)
    gated = ("True", "False")
    eventually(lambda: _gate_states(node, ns, "real") == gated, timeout=60, what="the real pod held by its gate")
    eventually(lambda: _gate_states(node, ns, "fake") == gated, timeout=60, what="the kwok pod held by its gate")
    assert node.kubectl.get("pod", "fake", ns)["spec"]["nodeName"] != NODE_NAME

    patch = json.dumps({"status": {"conditions": [{"type": CANARY_CONDITION, "status": "True"}]}})
    for name in ("real", "fake"):
        node.kubectl.run("patch", "pod", name, "-n", ns, "--subresource=status", "--type=strategic", "-p", patch)
    opened = ("True", "True")
    eventually(lambda: _gate_states(node, ns, "real") == opened, timeout=30, what="the real pod let in")
    eventually(lambda: _gate_states(node, ns, "fake") == opened, timeout=30, what="the kwok pod let in")


@pytest.mark.xfail(
    strict=True,
    reason="kwok's pod IPs are loopback (GLMOPS_POD_CIDR, 127.x) and the API server rejects loopback "
    "EndpointSlice addresses, so Services never list kwok pods; a non-loopback range would fix it",
)
def test_kwok_pods_reach_a_service_s_endpoint_slices_as_real_ones_do(node: RealNode, ns: str) -> None:
    fake = echo_pod(node, "fake", {"app": "fake"})
    fake["spec"]["nodeSelector"] = {"glmops.dev/fake-node": "true"}
    fake["spec"]["tolerations"] = []
    node.kubectl.apply(fake, "-n", ns)
    node.kubectl.apply(service("fake", {"app": "fake"}), "-n", ns)
    node.kubectl.run("wait", "--for=condition=Ready", "pod/fake", "-n", ns, "--timeout=60s", timeout=70)
    eventually(lambda: _endpoint_ready(node, ns, "fake") == [True], timeout=20, what="the kwok pod's endpoint")


def test_a_gpu_pod_never_lands_on_the_real_node(node: RealNode, ns: str) -> None:
    gpu = echo_pod(node, "gpu", {"app": "gpu"})
    gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    # It tolerates every taint in play, so only the resource decides where it goes.
    gpu["spec"]["tolerations"].append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    node.kubectl.apply(gpu, "-n", ns)
    # Pinned to the real node and tolerating its taint, it still cannot fit: the node has no GPUs.
    reason = eventually(
        lambda: next(
            c for c in node.kubectl.get("pod", "gpu", ns)["status"]["conditions"] if c["type"] == "PodScheduled"
        ),
        timeout=30,
        what="the scheduler's verdict",
    )
    assert reason["status"] == "False"
    assert "nvidia.com/gpu" in reason["message"]
    # Without the pin it goes to a kwok GPU node, never to the real one.
    del gpu["spec"]["nodeSelector"]
    gpu["metadata"]["name"] = "gpu-unpinned"
    node.kubectl.apply(gpu, "-n", ns)
    eventually(lambda: node.kubectl.get("pod", "gpu-unpinned", ns)["spec"].get("nodeName"), timeout=30, what="a node")
    assert node.kubectl.get("pod", "gpu-unpinned", ns)["spec"]["nodeName"] != NODE_NAME
    node.kubectl.run("delete", "pod", "gpu-unpinned", "-n", ns, "--grace-period=0", "--force", check=False)


def test_a_pod_without_the_toleration_stays_off_the_real_node(node: RealNode, ns: str) -> None:
    # An ordinary CPU pod (as every existing test makes) keeps landing on a kwok CPU node.
    plain = echo_pod(node, "plain", {"app": "plain"})
    del plain["spec"]["nodeSelector"]
    plain["spec"]["tolerations"] = []
    node.kubectl.apply(plain, "-n", ns)
    chosen = eventually(lambda: node.kubectl.get("pod", "plain", ns)["spec"].get("nodeName"), timeout=30, what="a node")
    assert node.kubectl.get("node", chosen)["metadata"]["labels"].get("glmops.dev/fake-node") == "true"
    # Even pinned to the real node, the taint keeps it out.
    pinned = echo_pod(node, "pinned", {"app": "pinned"})
    pinned["spec"]["tolerations"] = []
    node.kubectl.apply(pinned, "-n", ns)
    verdict = eventually(
        lambda: next(
            c for c in node.kubectl.get("pod", "pinned", ns)["status"]["conditions"] if c["type"] == "PodScheduled"
        ),
        timeout=30,
        what="the scheduler's verdict",
    )
    assert verdict["status"] == "False"
    assert "untolerated taint" in verdict["message"]
    assert not node.kubectl.get("pod", "pinned", ns)["spec"].get("nodeName")
    node.kubectl.run("delete", "pod", "plain", "-n", ns, "--grace-period=0", "--force", check=False)


def test_deleting_pods_and_stopping_the_node_leave_nothing_behind(node: RealNode, ns: str) -> None:
    node.kubectl.apply(echo_pod(node, "last", {"app": "last"}), "-n", ns)
    node.kubectl.apply(service("last", {"app": "last"}), "-n", ns)
    node.kubectl.run("wait", "--for=condition=Ready", "pod/last", "-n", ns, "--timeout=90s", timeout=100)
    cluster_ip = node.kubectl.get("service", "last", ns)["spec"]["clusterIP"]
    eventually(lambda: answer_of(f"http://{cluster_ip}/"), timeout=30, what="kube-proxy's rules for the Service")
    # The checks below see what a running node holds, so their emptiness afterwards means something.
    during = eventually(lambda: (h := host_state(node.state_dir))["netns"] and h, timeout=10, what="the pod's netns")
    names = {p.split(":")[0] for p in during["processes"]}
    assert {"containerd", "coredns", "kubelet", "kube-proxy", "containerd-shim-runc-v2", "pause", "httpecho"} <= names
    assert during["mounts"] and during["cgroups"] and during["log links"] and "/run/containerd" in during["dirs"]
    assert any("KUBE-SVC" in r for r in during["rules"])
    assert BRIDGE in during["links"] and len(during["links"]) >= 2, "the bridge and the pods' veths"

    node.kubectl.run("delete", "pod", "last", "-n", ns, "--wait=true", "--timeout=60s", timeout=70)
    run_script("node.sh", "down", env=_env())
    after = host_state(node.state_dir)
    for kind, left in after.items():
        assert left - node.host_before[kind] == set(), f"{kind} left behind by the node"
    assert not during["links"] & after["links"]
    for daemon in ("containerd", "coredns", "kubelet", "kube-proxy"):
        assert not (node.state_dir / "pids" / f"{daemon}.pid").exists()
