"""Several operator replicas: kopf peering lets only the newest reconcile, and hands over when it goes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ARTIFACTS
from tests.support.cluster import REPO, Cluster, Kubectl, eventually

pytestmark = pytest.mark.cluster


def _start(cluster: Cluster, namespace: str, priority: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, GLMOPS_WEBHOOK="off", GLMOPS_PEERING_PRIORITY=str(priority))
    return subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "kopf"),
            "run",
            f"--namespace={namespace}",
            "--peering=glmops",
            "-m",
            "glm_operator.handlers",
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def test_only_the_newest_replica_reconciles_and_the_older_resumes_when_it_goes(
    cluster: Cluster, kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    kubectl.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "glmops"}}, "-n", namespace)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    old_log, new_log = ARTIFACTS / f"{namespace}-old.log", ARTIFACTS / f"{namespace}-new.log"
    # A serving pod: the canary gate's tasks follow the peering as kopf's own handlers do.
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "serving",
                "labels": {
                    "glmops.dev/serving": "true",
                    "app.kubernetes.io/managed-by": "glmops",
                    "glmops.dev/deployment": "gone",
                },
            },
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
        },
        "-n",
        namespace,
    )
    old = _start(cluster, namespace, 100, old_log)
    new = None
    try:
        eventually(
            lambda: bool(kubectl.get("kopfpeering", "glmops", namespace).get("status")),
            timeout=60,
            what="the first replica to register",
        )
        eventually(
            lambda: "Handler 'glmops-canary' succeeded" in old_log.read_text(),
            timeout=60,
            what="the first replica to see the serving pod",
        )
        new = _start(cluster, namespace, 200, new_log)
        eventually(
            lambda: "Pausing operations in favour of" in old_log.read_text(),
            timeout=90,
            what="the older replica to pause for the newer one",
        )
        eventually(
            lambda: "canary gates paused" in old_log.read_text(),
            timeout=30,
            what="the older replica's canary gates to pause with it",
        )
        assert "Pausing" not in new_log.read_text()
        assert "canary gates paused" not in new_log.read_text()
        peers = kubectl.get("kopfpeering", "glmops", namespace)["status"]
        assert sorted(p["priority"] for p in peers.values()) == [100, 200]
        new.terminate()
        new.wait(timeout=30)
        eventually(
            lambda: "Resuming operations after the pause" in old_log.read_text(),
            timeout=90,
            what="the older replica to resume once the newer one is gone",
        )
        eventually(
            lambda: "canary gates resumed" in old_log.read_text(),
            timeout=30,
            what="the older replica's canary gates to resume with it",
        )
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
