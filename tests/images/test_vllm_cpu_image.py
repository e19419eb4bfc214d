"""The CPU vLLM image with the glmops plugin (hack/build-vllm-cpu-image.sh), run locked down as a pod would
run it, under the securityContext glmops renders for vLLM containers (every capability dropped, no new
privileges, the default seccomp profile): it serves the tiny model, answers /health, and the plugin is loaded.

The first build hard-links the environment of hack/vllm-cpu-env.sh into the context and takes minutes
(about 6.5 GB); later runs reuse the image while the requirements, the plugin and the Dockerfile are unchanged.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from glm_operator.render.dockerfile import PLUGIN_VERSION
from glm_operator.render.security import vllm_security_context
from tests.images.test_operator_image import LOCKED_DOWN, _free_port, podman, remove_container
from tests.support.cluster import REPO

START_TIMEOUT_S = 600  # the server starts in about 80 s on an idle 2-core machine
SERVED_NAME = "tiny-glm"


def rendered_context_flags() -> list[str]:
    """podman flags for the securityContext glmops renders on vLLM containers; fails on one it cannot model."""
    context = vllm_security_context()
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}, "podman's default profile stands for it"
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    flags = [f"--cap-drop={cap}" for cap in context["capabilities"]["drop"]]
    flags += [f"--cap-add={cap}" for cap in context["capabilities"].get("add", [])]
    return [*flags, "--security-opt", "no-new-privileges"]


@pytest.fixture(scope="module")
def vllm_cpu_image() -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: hack/build-vllm-cpu-image.sh installs it (apt) and builds the image")
    done = subprocess.run(
        [str(REPO / "hack" / "build-vllm-cpu-image.sh")], cwd=REPO, capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return dict(line.split("=", 1) for line in done.stdout.splitlines())["image"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model of hack/vllm-cpu-env.sh, readable by user 65532 (a pod gets it from a volume)."""
    out = subprocess.run([str(REPO / "hack" / "vllm-cpu-env.sh"), "model"], capture_output=True, text=True, check=True)
    model = tmp_path_factory.mktemp("model") / "tiny"
    shutil.copytree(out.stdout.strip().splitlines()[-1], model)
    for path in [model, *model.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return model


@pytest.fixture(scope="module")
def server(vllm_cpu_image: str, tiny_model: Path) -> Iterator[tuple[str, str]]:
    """The server from the image on the host network; yields its URL and container name."""
    port = _free_port()
    name = f"glmops-vllm-cpu-test-{uuid.uuid4().hex[:8]}"
    podman(
        "run", "--detach", "--name", name, *LOCKED_DOWN, *rendered_context_flags(), "--network", "host",
        "--tmpfs", "/tmp", "--shm-size", "1g", "--env", "VLLM_CPU_KVCACHE_SPACE=1",
        "--volume", f"{tiny_model}:/model:ro", vllm_cpu_image,
        "--model", "/model", "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--max-model-len", "512",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            running = podman("inspect", "--format", "{{.State.Running}}", name, check=False).stdout.strip()
            assert running == "true", podman("logs", name, check=False).stderr[-4000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(2)
        else:
            pytest.fail(f"the vLLM server in the image was not healthy within {START_TIMEOUT_S} s")
        yield url, name
    finally:
        remove_container(name)


def test_the_server_in_the_image_serves_the_tiny_model(server: tuple[str, str]) -> None:
    url, _ = server
    models = httpx.get(f"{url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [SERVED_NAME]


def test_the_server_holds_no_capability_no_new_privileges_and_a_seccomp_filter(server: tuple[str, str]) -> None:
    _, name = server
    status = podman("exec", name, "cat", "/proc/1/status").stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"


def test_the_glmops_plugin_is_loaded_in_the_server_in_the_image(server: tuple[str, str]) -> None:
    url, name = server
    logs = podman("logs", name)
    assert "glmops patch null-content-metrics" in logs.stdout + logs.stderr
    assert "glmops_chat_completions_total" in httpx.get(f"{url}/metrics", timeout=10).text


def test_the_image_runs_as_65532_with_the_plugin_distribution_installed(vllm_cpu_image: str) -> None:
    probe = "import os, importlib.metadata as m; print(os.getuid(), m.version('glmops-vllm-patches'))"
    done = podman("run", *LOCKED_DOWN, "--network", "none", "--entrypoint", "python3", vllm_cpu_image, "-c", probe)
    uid, version = done.stdout.split()
    assert (uid, version) == ("65532", PLUGIN_VERSION)


def test_the_image_s_vllm_command_runs_vllm_s_own_command_line(vllm_cpu_image: str) -> None:
    """`vllm serve ...`, the command glmops renders for a serving pod, is a command of this image."""
    version = re.fullmatch(r".*:v([0-9.]+)-glmops-.*", vllm_cpu_image)
    assert version, vllm_cpu_image
    done = podman("run", *LOCKED_DOWN, "--network", "none", "--entrypoint", "vllm", vllm_cpu_image, "--version")
    assert done.stdout.strip().splitlines()[-1] == f"{version[1]}+cpu"  # as vLLM names its CPU build
