"""The cluster with one real node (kubelet, containerd, runc, CNI bridge, kube-proxy) beside the kwok fleet.

It is its own cluster (own name, ports and pod ranges), so the shared test cluster stays as it is; one session
fixture (tests/conftest.py `real_node`) starts it for every test that needs it. `host_state` records what a node
leaves on the host, so the last test of tests/integration/test_real_node.py can prove that stopping it leaves
nothing behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.cluster import REPO, Kubectl, eventually, run_script

if TYPE_CHECKING:  # tests/conftest.py imports this module in the plugin's environment too, which has no glm_operator
    from glm_operator.catalog.accelerators import Accelerator

NODE_NAME = "glmops-realnode-test-node"
NODE_POD_CIDR = ipaddress.ip_network("10.244.0.0/24")
BRIDGE = "glmops-br0"
ENV = {
    "GLMOPS_CLUSTER": "glmops-realnode-test",
    "GLMOPS_APISERVER_PORT": "24443",
    "GLMOPS_ETCD_PORT": "24379",
    "GLMOPS_KCM_PORT": "24257",
    "GLMOPS_SCHEDULER_PORT": "24259",
    "GLMOPS_KWOK_PORT": "24247",
    "GLMOPS_POD_CIDR": "127.24.0.0/16",
    "GLMOPS_REAL_NODE": "1",
    "GLMOPS_NODE_NAME": NODE_NAME,
    "GLMOPS_NODE_POD_CIDR": str(NODE_POD_CIDR),
    "GLMOPS_NODE_BRIDGE": BRIDGE,
    "GLMOPS_KUBELET_PORT": "24250",
    "GLMOPS_KUBELET_HEALTHZ_PORT": "24248",
    "GLMOPS_PROXY_METRICS_PORT": "24249",
    "GLMOPS_PROXY_HEALTHZ_PORT": "24256",
}
TAINT_KEY = "glmops.dev/real-node"
TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
NEEDS_ROOT_AND_CONTAINERD = [
    pytest.mark.skipif(os.geteuid() != 0, reason="a real kubelet needs root (namespaces, mounts, cgroups, iptables)"),
    pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd is not installed; run hack/node-deps.sh"),
]
REAL_NODE_AND_PODMAN = [
    pytest.mark.cluster,
    *NEEDS_ROOT_AND_CONTAINERD,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman builds the images the node runs (make images)"),
]
"""The marks of a test that runs images built here on the real node."""


@dataclass
class RealNode:
    kubectl: Kubectl
    bin_dir: Path
    state_dir: Path
    images: dict[str, str]
    host_before: dict[str, set[str]]

    @property
    def helm(self) -> str:
        return str(self.bin_dir / "helm")

    @property
    def ca_cert(self) -> Path:
        return self.state_dir / "certs" / "ca.crt"

    def ctr(self, *args: str, timeout: float = 180) -> str:
        """containerd's client on the node's socket, in the namespace the kubelet's pods use (k8s.io)."""
        sock = f"/run/glmops/{ENV['GLMOPS_CLUSTER']}/containerd.sock"
        proc = subprocess.run(
            ["ctr", "--address", sock, "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)} failed:\n{proc.stderr}")
        return proc.stdout

    def ensure_up(self) -> None:
        """Start the node again if a test stopped it (node.sh up is a no-op on a running node)."""
        run_script("node.sh", "up", env=env())


def env() -> dict[str, str]:
    return {**os.environ, **ENV}


def state_dir() -> Path:
    """The cluster's state directory, as cluster/lib.sh's state_dir computes it."""
    cache = (
        os.environ.get("GLMOPS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glmops"
    )
    return Path(cache) / "clusters" / ENV["GLMOPS_CLUSTER"]


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def _in_node_range(netns: str) -> bool:
    addrs = sh("ip", "-n", netns, "-4", "-o", "addr").split()
    return any("/" in a and ipaddress.ip_interface(a).ip in NODE_POD_CIDR for a in addrs)


def _node_processes(state: Path) -> set[str]:
    """`name:pid` of the node's daemons and shims (by their command line) and containers (by cgroup)."""
    marks = (str(state / "node"), f"/run/glmops/{ENV['GLMOPS_CLUSTER']}/")
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroup = (proc / "cgroup").read_text()
        except OSError:
            continue
        if any(m in cmdline for m in marks) or "/kubepods" in cgroup:
            found.add(f"{Path(cmdline.split(' ')[0]).name}:{proc.name}")
    return found


def host_state(state: Path) -> dict[str, set[str]]:
    """What a node leaves on the host: rules, links, mounts, namespaces, processes, cgroups, paths."""
    rules = {
        f"{tool}: {line}"
        for tool in ("iptables-save", "ip6tables-save")
        for line in sh(tool).splitlines()
        if "KUBE-" in line or "10.244.0." in line or BRIDGE in line
    }
    links = {
        line.split(":")[1].strip().split("@")[0]
        for line in sh("ip", "-o", "link", "show", "master", BRIDGE).splitlines()
    }
    if sh("ip", "-o", "link", "show", BRIDGE):
        links.add(BRIDGE)
    marks = (str(state / "node"), f"/run/glmops/{ENV['GLMOPS_CLUSTER']}/")
    mounts = {m for m in sh("findmnt", "-rn", "-o", "TARGET").splitlines() if any(k in m for k in marks)}
    netns = {n for n in sh("ip", "netns", "list").split() if not n.startswith("(") and _in_node_range(n)}
    cgroups = {str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")}
    # Host paths a kubelet or containerd makes by default; the node points its own elsewhere or removes them.
    default_dirs = (
        "/run/glmops",
        "/run/containerd",
        "/opt/containerd",
        "/var/lib/kubelet",
        "/var/log/pods",
        "/var/log/containers",
    )
    dirs = {d for d in default_dirs if Path(d).exists()}
    logs = Path("/var/log/containers")
    log_links = (
        {str(p) for p in logs.glob("*.log") if str(state / "node") in os.readlink(p)} if logs.exists() else set()
    )
    return {
        "rules": rules,
        "links": links,
        "mounts": mounts,
        "netns": netns,
        "processes": _node_processes(state),
        "cgroups": cgroups,
        "dirs": dirs,
        "log links": log_links,
    }


def start() -> RealNode:
    """The real-node cluster up (reused when running), with what the host held before its node started."""
    run_script("node.sh", "down", env=env())  # a node left running by an interrupted run
    bin_dir = Path(run_script("build.sh", env=env()).strip().splitlines()[-1])
    state = state_dir()
    before = host_state(state)
    out = run_script("up.sh", env=env())
    kubeconfig = out.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
    images = dict(line.split("=", 1) for line in (state / "node" / "images.env").read_text().split())
    return RealNode(Kubectl(str(bin_dir / "kubectl"), kubeconfig), bin_dir, state, images, before)


def stop() -> None:
    """The node stopped; with GLMOPS_KEEP_CLUSTER the control plane stays up for the next run."""
    run_script("node.sh", "down", env=env())
    if not os.environ.get("GLMOPS_KEEP_CLUSTER"):
        run_script("down.sh", env=env())


def built_operator_image() -> tuple[str, str]:
    """The operator image and its archive, as hack/build-images.sh reports them (a no-op when up to date)."""
    proc = subprocess.run(
        [str(REPO / "hack" / "build-images.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    assert proc.returncode == 0, f"hack/build-images.sh failed (make images):\n{proc.stderr[-4000:]}"
    report = dict(line.split("=", 1) for line in proc.stdout.split())
    return report["image"], report["archive"]


def _json_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _node_gpus(kubectl: Kubectl, resource: str) -> tuple[str | None, str | None]:
    status = kubectl.get("node", NODE_NAME)["status"]
    return status["capacity"].get(resource), status["allocatable"].get(resource)


@contextmanager
def gpu_stand_in(kubectl: Kubectl, accelerator: Accelerator, nodes: int = 1) -> Iterator[None]:
    """The real node labelled as the catalog selects `accelerator`'s nodes and advertising the GPUs of `nodes` of them.

    The GPUs are an extended resource on the node's status (`kubectl patch --subresource=status`, as any node-level
    extended resource is advertised): the scheduler and the kubelet count them, no device plugin serves them, and
    the containers get no device. With `nodes` 2 the one real node holds both pods of a group that needs two nodes'
    GPUs. Label and resource are taken off the node afterwards.
    """
    labels = {key: values[0] for key, values in accelerator.node_selector.items()}
    resource = accelerator.resource_name
    capacity = f"/status/capacity/{_json_pointer(resource)}"
    count = str(accelerator.gpus_per_node * nodes)
    kubectl.run("label", "node", NODE_NAME, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))
    patch = [{"op": "add", "path": capacity, "value": count}]
    kubectl.run("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(patch))
    # The kubelet derives allocatable from capacity on its next status update.
    eventually(
        lambda: _node_gpus(kubectl, resource) == (count, count), timeout=60, what="the kubelet to advertise the GPUs"
    )
    try:
        yield
    finally:
        kubectl.run("label", "node", NODE_NAME, *(f"{k}-" for k in labels), check=False)
        remove = json.dumps([{"op": "remove", "path": capacity}])
        kubectl.run("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", remove, check=False)
        eventually(
            lambda: _node_gpus(kubectl, resource) == (None, None), timeout=60, what="the GPUs gone from the node"
        )
