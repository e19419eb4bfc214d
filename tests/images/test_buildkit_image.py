"""BuildKit's rootless builder image, made here (images/buildkit, hack/build-tool-image.sh), running the build Job
glmops renders as a container runtime runs the pod: both of the Job's containers, in order, under their rendered
security settings turned into podman's flags (runc), with the pod's volumes as directories.

- The init container copies the build context out of the ConfigMap volume (here a directory of the ConfigMap's keys).
- The build container runs its rendered script: `buildctl-daemonless.sh` starts buildkitd under rootlesskit in the
  container, as UID 1000, and builds and pushes the image the operator planned to a registry (the distribution
  project's, built from its Go module), writing the digest to the termination log.
- The rendered settings are what make it work: the same container with `no-new-privileges` (what
  `allowPrivilegeEscalation: false` sets) fails in rootlesskit's newuidmap, saying so.

Test-only differences, each needed because no image registry is reachable here: the container shares the host's
network (the registry listens on loopback), and the daemon gets one more `--config`, serving Docker Hub's names
(the stock vLLM base) from that registry, as a mirror does in an air-gapped cluster. The base is the stand-in of
tests/integration/test_buildkit_build.py (Debian, pip, a `vllm` distribution record).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from glm_operator.api.glmimage import Builder
from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.image import ImageObserved, plan_start
from glm_operator.render.dockerfile import PLUGIN_VERSION
from glm_operator.render.imagebuild import DEFAULT_BUILDKIT_IMAGE, BuildSettings, glmimage_manifest
from tests.images.test_operator_image import _free_port, podman
from tests.support.buildkit import STAND_IN, PlainRegistry, answers
from tests.support.cluster import CLUSTER_DIR, REPO
from tests.support.wheel import build_plugin_wheel

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman builds and runs the image (make images)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="runc runs the build's own containers: root"),
]
IMAGE = f"docker.io/{DEFAULT_BUILDKIT_IMAGE}"
VERSION = "0.33.0"
UID_MAP_REFUSED = "newuidmap: write to uid_map failed: Operation not permitted"


@dataclass
class Registry:
    address: str
    workdir: Path

    @property
    def plain(self) -> PlainRegistry:
        return PlainRegistry(self.address)


@pytest.fixture(scope="module")
def builder_image() -> str:
    done = subprocess.run(
        [str(REPO / "hack" / "build-tool-image.sh")], cwd=REPO, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-5000:]
    image = dict(line.split("=", 1) for line in done.stdout.splitlines())["image"]
    assert image == IMAGE, "the image glmops renders into its build Jobs"
    return image


@pytest.fixture(scope="module")
def registry(builder_image: str) -> Iterator[Registry]:
    """The registry, holding the stand-in stock base under Docker Hub's name (its mirror)."""
    tools = Path(
        subprocess.run(
            [str(CLUSTER_DIR / "build-image-tools.sh")], capture_output=True, text=True, check=True, timeout=1800
        ).stdout.splitlines()[-1]
    )
    workdir = Path(tempfile.mkdtemp(prefix="glmops-buildkit-image-"))
    address = f"127.0.0.1:{_free_port()}"
    (workdir / "registry.yml").write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {workdir / 'registry'}}}}}\n"
        f"http: {{addr: '{address}'}}\n"
        "log: {level: warn}\n"
    )
    log = open(workdir / "registry.log", "wb")  # noqa: SIM115 (owned by the process)
    proc = subprocess.Popen([str(tools / "registry"), "serve", str(workdir / "registry.yml")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not answers(f"http://{address}/v2/"):
            assert proc.poll() is None and time.monotonic() < deadline, (workdir / "registry.log").read_text()
            time.sleep(0.2)
        base = subprocess.run(
            [str(REPO / "hack" / "base-image.sh")], capture_output=True, text=True, check=True, timeout=1800
        ).stdout.splitlines()[-1]
        stand_in = workdir / "stand-in"
        stand_in.mkdir()
        (stand_in / "Dockerfile").write_text(STAND_IN)
        tag = f"localhost/glmops/vllm-stand-in:{VERSION}"
        podman("build", "--quiet", "--build-arg", f"BASE={base}", "--build-arg", f"VLLM_VERSION={VERSION}",
               "--tag", tag, str(stand_in))  # fmt: skip
        podman("push", "--quiet", "--tls-verify=false", tag, f"{address}/vllm/vllm-openai:v{VERSION}")
        podman("rmi", "--force", tag, check=False)
        yield Registry(address, workdir)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _security_flags(container: dict[str, Any], keep: bool = True) -> list[str]:
    """podman flags for the container's rendered securityContext; fails on a setting this cannot model.
    `keep=False`: the same, but with privilege escalation forbidden, as `allowPrivilegeEscalation: false` would."""
    context = container["securityContext"]
    assert not context.get("privileged") and "capabilities" not in context, "runc's default capabilities, no more"
    flags = ["--user", f"{context['runAsUser']}:{context.get('runAsGroup', context['runAsUser'])}"]
    for key, option in (("seccompProfile", "seccomp"), ("appArmorProfile", "apparmor")):
        if key in context:
            assert context[key] == {"type": "Unconfined"}, context[key]
            flags += ["--security-opt", f"{option}=unconfined"]
    if not context["allowPrivilegeEscalation"] or not keep:
        flags += ["--security-opt", "no-new-privileges"]
    return flags


@dataclass
class JobRun:
    returncode: int
    output: str
    termination: str
    ref: str


def _run_build_job(registry: Registry, name: str, escalation: bool = True) -> JobRun:
    """The Job the operator plans for the GLMImage, its two containers run in order by podman and runc."""
    catalogs = Catalogs.packaged()
    settings = BuildSettings(enabled=True, registry=f"{registry.address}/glmops", insecure=True)
    images = catalogs.images.with_patched_registry(settings.registry)
    ref = images.patched_ref("cuda", VERSION)
    body = glmimage_manifest("cuda", VERSION, ref, images.patches_for("cuda", VERSION), Builder.BUILDKIT)
    body["metadata"]["uid"] = f"{name}-uid"
    wheel = build_plugin_wheel(registry.workdir / f"wheel-{name}")
    catalogs = replace(catalogs, images=images)
    configmap, job = plan_start(body, ImageObserved(wheel=wheel.read_bytes()), catalogs, settings).create
    pod = job["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (build,) = pod["containers"]
    # The rendered reference is Docker Hub's short form, as a kubelet's runtime completes it.
    assert f"docker.io/{build['image']}" == f"docker.io/{init['image']}" == IMAGE
    assert pod["automountServiceAccountToken"] is False
    # The pod's volumes: the ConfigMap's keys as files, emptyDirs as world-writable directories (as a kubelet makes).
    volumes: dict[str, Path] = {}
    for volume in pod["volumes"]:
        folder = registry.workdir / f"{name}-{volume['name']}"
        folder.mkdir()
        if "configMap" in volume:
            for key, text in configmap.get("data", {}).items():
                (folder / key).write_text(text)
            for key, data in configmap.get("binaryData", {}).items():
                (folder / key).write_bytes(base64.b64decode(data))
        folder.chmod(0o777)
        volumes[volume["name"]] = folder
    termination = registry.workdir / f"{name}-termination-log"
    termination.touch()
    termination.chmod(0o666)

    def run(container: dict[str, Any], extra: list[str]) -> subprocess.CompletedProcess[str]:
        mounts = [
            f"{volumes[m['name']]}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"
            for m in container.get("volumeMounts", [])
        ]
        env = [f"{e['name']}={e['value']}" for e in container.get("env", [])]
        flags = _security_flags(container, keep=escalation)
        argv = [*container["command"], *container.get("args", [])]
        return podman(
            "run", "--rm", "--network=host", *flags, *(f"--volume={m}" for m in mounts), *(f"--env={e}" for e in env),
            f"--volume={termination}:/dev/termination-log", *extra, "--entrypoint", argv[0], IMAGE,
            *argv[1:], check=False,
        )  # fmt: skip

    copied = run(init, [])
    assert copied.returncode == 0, copied.stderr
    # Test-only: Docker Hub's names from the local registry (the stand-in base), one more daemon configuration.
    mirror = registry.workdir / f"{name}-mirror.toml"
    mirror.write_text(
        f'[registry."docker.io"]\n  mirrors = ["{registry.address}"]\n'
        f'[registry."{registry.address}"]\n  http = true\n  insecure = true\n'
    )
    mirror.chmod(0o644)
    flags = next(e["value"] for e in build["env"] if e["name"] == "BUILDKITD_FLAGS")
    done = run(
        build, [f"--volume={mirror}:/etc/glmops-test/mirror.toml:ro", "--env",
                f"BUILDKITD_FLAGS={flags} --config=/etc/glmops-test/mirror.toml"],
    )  # fmt: skip
    return JobRun(done.returncode, done.stdout + done.stderr, termination.read_text().strip(), ref)


def test_the_builder_image_runs_the_rendered_job_rootless_and_pushes_the_planned_image(registry: Registry) -> None:
    started = time.monotonic()
    run = _run_build_job(registry, "rendered")
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.output[-4000:]
    repository, tag = run.ref.removeprefix(f"{registry.address}/").rsplit(":", 1)
    assert run.termination == registry.plain.digest(repository, tag), "the digest the Job reports is the one pushed"
    labels = registry.plain.image_config(repository, run.termination)["config"]["Labels"]
    assert labels["dev.glmops.vllm-version"] == VERSION and labels["dev.glmops.plugin-version"] == PLUGIN_VERSION
    print(f"\nthe rendered build Job in the builder image: {seconds:.1f} s (daemon start, base pull, build, push)")


def test_without_privilege_escalation_rootlesskit_cannot_map_the_builds_user_namespace(registry: Registry) -> None:
    run = _run_build_job(registry, "no-escalation", escalation=False)
    assert run.returncode != 0 and run.termination == ""
    assert UID_MAP_REFUSED in run.output, run.output[-3000:]


def test_rootlesskit_is_the_release_buildkits_own_rootless_image_carries() -> None:
    """versions.env pins the rootlesskit BuildKit's Dockerfile (at the pinned BuildKit) puts into its rootless image."""
    module = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "github.com/moby/buildkit"],
        cwd=CLUSTER_DIR / "tools" / "buildkit",
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.strip()
    upstream = re.search(r"^ARG ROOTLESSKIT_VERSION=(\S+)$", (Path(module) / "Dockerfile").read_text(), re.MULTILINE)
    pinned = re.search(r"^ROOTLESSKIT_VERSION=(\S+)", (CLUSTER_DIR / "versions.env").read_text(), re.MULTILINE)
    assert upstream is not None and pinned is not None
    assert pinned[1] == upstream[1]
