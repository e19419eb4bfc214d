"""Image builds on the real node: the tool images made here, the registry pod, and the operator's build settings.

Shared by tests/e2e/test_real_node_build.py (a GLMImage built and pulled by digest) and
tests/e2e/test_real_vllm_built_image.py (a GLMDeployment served from the image the operator built for it).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.support.cluster import REPO
from tests.support.installed import free_port
from tests.support.realnode import TAINT_KEY, TOLERATION, RealNode

REGISTRY_IP = "10.96.0.250"  # a fixed cluster IP in the real-node cluster's service range (cluster/lib.sh)
REGISTRY = f"{REGISTRY_IP}:5000"
_REGISTRY_CONFIG = "version: 0.1\nstorage: {filesystem: {rootdirectory: /var/lib/registry}}\nhttp: {addr: ':5000'}\n"


def tool_image(kind: str) -> tuple[str, str]:
    """The builder (`buildkit`) or registry (`registry`) image made here, and its archive."""
    done = subprocess.run(
        [str(REPO / "hack" / "build-tool-image.sh"), kind], cwd=REPO, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = dict(line.split("=", 1) for line in done.stdout.splitlines())
    return found["image"], found["archive"]


def import_tool_images(node: RealNode) -> None:
    """The builder and registry images into the node's containerd, under the references the objects name."""
    for kind in ("buildkit", "registry"):
        _, archive = tool_image(kind)
        node.ctr("images", "import", archive, timeout=600)


def on_the_real_node(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec placed on the real node (its label and taint)."""
    return {**spec, "nodeSelector": {TAINT_KEY: "true"}, "tolerations": [TOLERATION]}


def start_registry(node: RealNode, namespace: str) -> str:
    """The distribution registry as a pod on the real node behind the Service at REGISTRY; returns the pod's IP.

    The node's containerd reaches REGISTRY over plain HTTP through a `hosts.toml` in the `certs.d` directory
    cluster/node-lib.sh gives it; this machine pushes to the pod's IP. The registry keeps its blobs in an
    emptyDir: they go with the namespace.
    """
    hosts = node.state_dir / "node" / "certs.d" / REGISTRY
    hosts.mkdir(parents=True, exist_ok=True)
    (hosts / "hosts.toml").write_text(
        f'server = "http://{REGISTRY}"\n[host."http://{REGISTRY}"]\n  capabilities = ["pull", "resolve"]\n'
    )
    image, _ = tool_image("registry")
    container = {
        "name": "registry",
        "image": image,
        "imagePullPolicy": "Never",
        "ports": [{"containerPort": 5000}],
        "readinessProbe": {"httpGet": {"path": "/v2/", "port": 5000}, "periodSeconds": 1},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/registry"},
            {"name": "data", "mountPath": "/var/lib/registry"},
        ],
    }
    volumes = [{"name": "config", "configMap": {"name": "registry"}}, {"name": "data", "emptyDir": {}}]
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "registry"},
            "data": {"config.yml": _REGISTRY_CONFIG},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "registry", "labels": {"app": "registry"}},
            "spec": on_the_real_node({"containers": [container], "volumes": volumes}),
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "registry"},
            "spec": {"clusterIP": REGISTRY_IP, "selector": {"app": "registry"}, "ports": [{"port": 5000}]},
        },
    ]
    for obj in objects:
        node.kubectl.apply(obj, "-n", namespace)
    node.kubectl.run("wait", "--for=condition=Ready", "pod/registry", "-n", namespace, "--timeout=120s")
    return str(node.kubectl.get("pod", "registry", namespace)["status"]["podIP"])


def build_settings_env(namespace: str, wheel: str, **overrides: str) -> dict[str, str]:
    """The operator's environment with image builds on, as the chart's imageBuild values set it for this cluster.

    The in-cluster registry (plain HTTP), Docker Hub mirrored by it (vLLM's stock images cannot be pulled here), build
    pods on the real node with requests that fit it, the plugin wheel of this checkout, and the operator's own
    webhook and metrics ports (the session's operator of the shared test cluster may hold the usual ones).
    """
    env = {
        "GLMOPS_IMAGE_BUILD_ENABLED": "true",
        "GLMOPS_IMAGE_BUILD_REGISTRY": f"{REGISTRY}/glmops",
        "GLMOPS_IMAGE_BUILD_INSECURE": "true",
        "GLMOPS_IMAGE_BUILD_REGISTRY_MIRRORS": json.dumps({"docker.io": [REGISTRY]}),
        "GLMOPS_IMAGE_BUILD_NODE_SELECTOR": json.dumps({TAINT_KEY: "true"}),
        "GLMOPS_IMAGE_BUILD_TOLERATIONS": json.dumps([TOLERATION]),
        "GLMOPS_IMAGE_BUILD_RESOURCES": json.dumps({"requests": {"cpu": "500m", "memory": "1Gi"}}),
        "GLMOPS_IMAGE_BUILD_NAMESPACE": namespace,
        "GLMOPS_IMAGE_BUILD_PLUGIN_WHEEL": wheel,
        "GLMOPS_IMAGE_BUILD_POLL_SECONDS": "1",
        "GLMOPS_WEBHOOK_PORT": str(free_port()),
        "GLMOPS_METRICS_PORT": str(free_port()),
    }
    return env | overrides
