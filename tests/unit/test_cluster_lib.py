"""cluster/lib.sh's process checks, run in bash exactly as up.sh and down.sh run them (set -euo pipefail)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ESTABLISHED, wait_established

LIB = Path(__file__).resolve().parents[2] / "cluster" / "lib.sh"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line is long (several pipe buffers), recorded as daemon 'bash'."""
    long_args = ["x" * 100_000] * 3
    proc = subprocess.Popen(["/bin/bash", "-c", "sleep 60; exit 0", "_", *long_args])  # two commands: bash stays
    pids = tmp_path / "clusters" / "t" / "pids"
    pids.mkdir(parents=True)
    (pids / "bash.pid").write_text(str(proc.pid))
    yield proc
    proc.kill()
    proc.wait()


def check(tmp_path: Path, call: str) -> int:
    script = f"set -euo pipefail; source {LIB}; {call}"
    env = {"GLMOPS_CACHE": str(tmp_path), "GLMOPS_CLUSTER": "t", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(["bash", "-c", script], env=env, timeout=30).returncode


def test_a_live_daemon_with_a_long_command_line_is_alive(tmp_path: Path, daemon: subprocess.Popen[bytes]) -> None:
    # A grep -q that stops reading early used to fail the pipeline here (pipefail), so down.sh left it running.
    assert all(check(tmp_path, "pid_alive bash") == 0 for _ in range(5))
    assert check(tmp_path, "pid_running bash") == 0


def test_a_dead_or_reused_pid_is_not_alive(tmp_path: Path, daemon: subprocess.Popen[bytes]) -> None:
    assert check(tmp_path, "pid_alive sleep") != 0  # the pid lives but runs another binary
    daemon.kill()
    daemon.wait()
    assert check(tmp_path, "pid_alive bash") != 0
    assert check(tmp_path, "pid_running bash") != 0


def test_an_api_server_argument_is_matched_whole_on_the_recorded_process(tmp_path: Path) -> None:
    # up.sh restarts a cluster whose API server lacks a flag it now needs (flags are read only at start).
    flag = "--admission-control-config-file=/state/admission.yaml"
    proc = subprocess.Popen(["/bin/bash", "-c", "sleep 60; exit 0", "_", "--secure-port=1", flag])
    pids = tmp_path / "clusters" / "t" / "pids"
    pids.mkdir(parents=True)
    (pids / "kube-apiserver.pid").write_text(str(proc.pid))
    try:
        assert check(tmp_path, f"apiserver_has_arg {flag}") == 0
        assert check(tmp_path, "apiserver_has_arg --admission-control-config-file=/state") != 0, "a prefix is not it"
        assert check(tmp_path, "apiserver_has_arg --admission-control-config-file=/other/admission.yaml") != 0
    finally:
        proc.kill()
        proc.wait()
    assert check(tmp_path, f"apiserver_has_arg {flag}") != 0, "a stopped API server has no flags"


# A CRD just created reads `status.conditions: null` for a moment; `kubectl wait --for=condition=Established` fails at
# once on that (CI failed so on a fast machine). The fakes below answer the Established query with nothing first.
FAKE_KUBECTL = """
kc() {{ [[ "$*" == *'{query}'* ]] || return 2; echo x >> "$GLMOPS_CACHE/calls"  # counted in a file: $(kc) forks
  (( $(wc -l < "$GLMOPS_CACHE/calls") > {empty} )) && [[ "$2" == crd/ok.* ]] && echo True; return 0; }}
"""


def fake_kubectl(empty: int) -> str:
    """A kubectl answering the Established query with nothing `empty` times, then True for CRDs named ok.*."""
    return FAKE_KUBECTL.format(empty=empty, query=ESTABLISHED.removeprefix("jsonpath="))


def test_waiting_for_a_crd_retries_while_its_conditions_are_unset(tmp_path: Path) -> None:
    assert check(tmp_path, fake_kubectl(3) + "wait_established kc 10 ok.a ok.b") == 0


def test_a_crd_that_never_becomes_established_fails_naming_it(tmp_path: Path) -> None:
    script = f"set -euo pipefail; source {LIB}; {fake_kubectl(0)} wait_established kc 1 ok.a never.b"
    env = {"GLMOPS_CACHE": str(tmp_path), "GLMOPS_CLUSTER": "t", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", script], env=env, timeout=30, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "CRD never.b not ready after 1s" in proc.stderr


def test_the_python_wait_retries_too_and_names_a_crd_that_never_comes() -> None:
    answers = iter(["", "", "True"])
    seen: list[tuple[str, ...]] = []

    def kubectl(*args: str) -> str:
        seen.append(args)
        return next(answers, "")

    wait_established(kubectl, ["ok.a"], timeout=10)
    assert len(seen) == 3 and seen[0] == ("get", "crd/ok.a", "-o", ESTABLISHED)
    with pytest.raises(AssertionError, match="CRD never.b is not Established after 1 s"):
        wait_established(lambda *a: "", ["never.b"], timeout=1)
