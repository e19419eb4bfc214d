"""The control-plane scripts fail with a clear message when something they need is missing."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.support.cluster import CLUSTER_DIR, Cluster


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTER_DIR / script)], env=env, capture_output=True, text=True, timeout=120)


def test_build_without_go_says_go_is_missing(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GLMOPS_CACHE": str(tmp_path / "cache")}
    if any(Path(d, "go").exists() for d in env["PATH"].split(":")):
        env["PATH"] = str(tmp_path)  # a PATH with no go at all; bash is found by absolute path below
    proc = subprocess.run(["/bin/bash", str(CLUSTER_DIR / "build.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Go is not installed or not on PATH" in proc.stderr


def test_up_without_a_build_and_without_go_names_the_missing_build(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GLMOPS_CACHE": str(tmp_path / "empty-cache"),
        "GLMOPS_CLUSTER": "nobuild",
        "GLMOPS_APISERVER_PORT": "17999",
    }
    if Path("/usr/bin/go").exists():
        env["PATH"] = f"{tmp_path}:/bin"
    proc = subprocess.run(["/bin/bash", str(CLUSTER_DIR / "up.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Go is not installed" in proc.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free_port_pair() -> int:
    """A free port whose successor is free too: etcd's client port, and its peer port one above it."""
    for _ in range(100):
        port = _free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports on 127.0.0.1 in 100 tries")


def test_up_refuses_a_port_in_use_and_names_it(cluster: Cluster, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = dict(
            os.environ,
            GLMOPS_CLUSTER="portclash",
            GLMOPS_APISERVER_PORT=str(port),
            # The other ports free now: fixed ones may belong to another cluster here (a benchmark's, say).
            # up.sh checks etcd's peer port (its client port + 1) too: a random neighbour in use named another port.
            GLMOPS_ETCD_PORT=str(_free_port_pair()),
            **{f"GLMOPS_{name}_PORT": str(_free_port()) for name in ("KCM", "SCHEDULER", "KWOK")},
        )
        proc = _run("up.sh", env)
    assert proc.returncode != 0
    assert f"port {port} on 127.0.0.1 is in use" in proc.stderr
    assert "GLMOPS_" in proc.stderr, "the message says how to pick another port"


def test_status_reports_a_stopped_cluster_as_not_running(tmp_path: Path) -> None:
    env = dict(os.environ, GLMOPS_CLUSTER="never-started", GLMOPS_CACHE=str(tmp_path))
    proc = _run("status.sh", env)
    assert proc.returncode == 1
    assert "kube-apiserver: not running" in proc.stdout


def test_down_of_a_cluster_that_is_not_running_is_a_no_op(tmp_path: Path) -> None:
    env = dict(os.environ, GLMOPS_CLUSTER="never-started", GLMOPS_CACHE=str(tmp_path))
    assert _run("down.sh", env).returncode == 0


def test_lws_up_without_a_running_cluster_says_to_start_it_and_down_is_a_no_op(tmp_path: Path) -> None:
    env = dict(os.environ, GLMOPS_CACHE=str(tmp_path / "cache"), GLMOPS_CLUSTER="nolws", GLMOPS_APISERVER_PORT="17998")
    up = subprocess.run([str(CLUSTER_DIR / "lws.sh"), "up"], env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode != 0 and "run cluster/up.sh first" in up.stderr
    down = subprocess.run([str(CLUSTER_DIR / "lws.sh"), "down"], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    status = subprocess.run([str(CLUSTER_DIR / "lws.sh"), "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 1 and "not running" in status.stdout
