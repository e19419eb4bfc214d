"""Stop and start the test cluster's kube-apiserver by its recorded pid, with the command line it was started with.

The cluster scripts record each daemon's pid under `<state>/pids/` (cluster/lib.sh `start_daemon`); the running
process's own `/proc/<pid>/cmdline` is the exact command line to start it again. Tests that use this run under the
cluster lock, and `apiserver_down` always starts the server again and waits for `/readyz`, even when the test fails.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster import Cluster

READY_TIMEOUT_S = 120.0
_started: list[subprocess.Popen[bytes]] = []  # kept, so no "still running" warning when the object is collected


@dataclass
class Stopped:
    """A stopped API server: when it stopped, and (once started again) when it answered /readyz."""

    down_at: float
    ready_at: float | None = None


def _pid_file(cluster: Cluster) -> Path:
    return cluster.state_dir / "pids" / "kube-apiserver.pid"


def _command_line(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    argv = [part.decode() for part in raw.split(b"\0") if part]
    assert argv and argv[0].endswith("/kube-apiserver"), f"pid {pid} is not the recorded kube-apiserver: {argv}"
    return argv


def _port(argv: list[str]) -> int:
    return int(next(a for a in argv if a.startswith("--secure-port=")).partition("=")[2])


def ready(cluster: Cluster, port: int) -> bool:
    certs = cluster.state_dir / "certs"
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # setsid made it no child of ours, so nothing reaps it here; a zombie counts as gone.
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _start(cluster: Cluster, argv: list[str]) -> int:
    log = (cluster.state_dir / "logs" / "kube-apiserver.log").open("ab")
    with log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    _started.append(proc)
    _pid_file(cluster).write_text(f"{proc.pid}\n")
    return proc.pid


@contextmanager
def apiserver_down(cluster: Cluster) -> Iterator[Stopped]:
    """The API server stopped for the body of the `with`, then started again with the same command line."""
    pid = int(_pid_file(cluster).read_text().strip())
    argv = _command_line(pid)
    port = _port(argv)
    _stop(pid)
    stopped = Stopped(time.monotonic())
    try:
        yield stopped
    finally:
        _start(cluster, argv)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready(cluster, port):
            assert time.monotonic() < deadline, f"kube-apiserver not ready {READY_TIMEOUT_S:.0f}s after its restart"
            time.sleep(0.2)
        stopped.ready_at = time.monotonic()
