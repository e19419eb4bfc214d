"""The build Job glmops renders, run for real: BuildKit builds the generated Dockerfile and pushes to a real registry.

No image registry is reachable from this machine, and vLLM's CUDA and ROCm images cannot be pulled, so this test
checks everything after the `FROM` of the Dockerfiles glmops generates, with real parts built here from their Go
modules (cluster/build-image-tools.sh): the distribution project's registry, and BuildKit's daemon and client.

- The base: a stand-in for `vllm/vllm-openai:v<version>` (and the ROCm image), built by BuildKit from the Debian
  image hack/base-image.sh makes, with pip and a `vllm` distribution record of that version; pushed to the registry,
  which BuildKit serves Docker Hub's names from (a registry mirror, as an air-gapped cluster configures it).
- The build: the operator's own planner (`planner/image.py` `plan_start`) gives the build context ConfigMap and the
  Job; its Dockerfile and wheel become the context and the Job's build container runs its own script, with
  `buildctl-daemonless.sh` (which starts a daemon inside the pod) standing for a client of the daemon here, and the
  termination log a file. Test-only differences: those two, and the context's path.
- What is checked: the digest the Job reports is the registry's for the tag; the image pulled by that digest carries
  the plugin and the catalog's labels; a build by a new daemon (a new pod) takes every step from the registry cache
  the first build left beside the image; a base with another
  vLLM, or none, fails with the reason in the build's output.

Needs root (BuildKit's OCI worker runs steps with runc) and podman (the Debian base); skipped otherwise.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from glm_operator.api.glmimage import Builder, GLMImage
from glm_operator.catalog.bundle import Catalogs
from glm_operator.k8s.registry import Credentials, RegistryError, remote_digest
from glm_operator.planner.image import ImageObserved, plan_start
from glm_operator.render.dockerfile import PLUGIN_VERSION
from glm_operator.render.imagebuild import (
    BUILD_CONFIG_DIR,
    BUILDKITD_START_TRIES,
    DOCKER_CONFIG_DIR,
    REGISTRY_CA_DIR,
    WORKSPACE,
    BuildSettings,
    build_job,
    cache_ref,
    glmimage_manifest,
)
from glm_operator.render.imagestate import build_step
from tests.support.buildkit import STAND_IN, PlainRegistry, answers
from tests.support.cluster import CLUSTER_DIR, REPO, script_env
from tests.support.wheel import build_plugin_wheel

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="BuildKit's OCI worker runs build steps with runc, as root"),
    pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed; run hack/node-deps.sh"),
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman holds the Debian base (make images)"),
]
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": str(REPO / "hack" / "containers.conf")}
STOCK = {"cuda": "vllm/vllm-openai", "rocm": "vllm/vllm-openai-rocm"}
POD_DIRS = (REGISTRY_CA_DIR, DOCKER_CONFIG_DIR, BUILD_CONFIG_DIR)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if ready():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready within {timeout:g} s:\n{log.read_text()[-3000:]}")


@dataclass
class Builders:
    tools: Path
    registry: str
    socket: str
    workdir: Path
    procs: list[subprocess.Popen[bytes]]

    def daemon(self, name: str, config: Path | None = None) -> str:
        """Another buildkitd with a state directory of its own, as each build Job's pod starts one: its socket.
        `config`: its configuration, instead of the shared one (which serves Docker Hub's names from the registry)."""
        sock = str(self.workdir / f"{name}.sock")
        log = self.workdir / f"{name}.log"
        root = self.workdir / name
        argv = [str(self.tools / "buildkitd"), "--root", str(root), "--addr", f"unix://{sock}"]
        with open(log, "wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [*argv, "--config", str(config or self.workdir / "buildkitd.toml")], stdout=out, stderr=out
                )
            )
        _wait(
            name,
            lambda: self.buildctl("debug", "workers", timeout=10, socket=sock).returncode == 0,
            self.procs[-1],
            log,
        )
        return sock

    def wheel(self) -> Path:
        """The plugin wheel, built once: the operator image ships one, so every build context holds the same bytes."""
        found = sorted((self.workdir / "wheel").glob("wheel/*.whl"))
        return found[0] if found else build_plugin_wheel(self.workdir / "wheel")

    def buildctl(self, *args: str, timeout: float = 600, socket: str = "") -> subprocess.CompletedProcess[str]:
        argv = [str(self.tools / "buildctl"), "--addr", f"unix://{socket or self.socket}", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    @property
    def plain(self) -> PlainRegistry:
        return PlainRegistry(self.registry)

    def stand_in(self, platform: str, tag: str, vllm: str) -> None:
        """The stand-in stock image `<stock>:<tag>` carrying vLLM `vllm`, in the registry under Docker Hub's name."""
        context = self.workdir / f"stand-in-{platform}-{tag}"
        context.mkdir()
        (context / "Dockerfile").write_text(STAND_IN)
        out = self.buildctl(
            "build",
            "--frontend=dockerfile.v0",
            f"--local=context={context}",
            f"--local=dockerfile={context}",
            f"--opt=build-arg:BASE={self.registry}/glmops/debian-python:bookworm",
            f"--opt=build-arg:VLLM_VERSION={vllm}",
            f"--output=type=image,name={self.registry}/{STOCK[platform]}:{tag},push=true,registry.insecure=true",
        )
        assert out.returncode == 0, out.stderr[-3000:]


@pytest.fixture(scope="module")
def tools() -> Path:
    """The folder of the registry, BuildKit's binaries and its buildctl-daemonless.sh, built from their modules."""
    return Path(
        subprocess.run(
            [str(CLUSTER_DIR / "build-image-tools.sh")],
            env=script_env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        ).stdout.splitlines()[-1]
    )


@pytest.fixture(scope="module")
def builders(tools: Path) -> Iterator[Builders]:
    """The registry and buildkitd as local processes (root), with the Debian base pushed to the registry."""
    base = subprocess.run(
        [str(REPO / "hack" / "base-image.sh")], capture_output=True, text=True, check=True, timeout=1800
    ).stdout.splitlines()[-1]
    workdir = Path(tempfile.mkdtemp(prefix="glmops-buildkit-"))
    registry = f"127.0.0.1:{_free_port()}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        (workdir / "registry.yml").write_text(
            "version: 0.1\n"
            f"storage: {{filesystem: {{rootdirectory: {workdir / 'registry'}}}}}\n"
            f"http: {{addr: '{registry}'}}\n"
            "log: {level: warn}\n"
        )
        log = workdir / "registry.log"
        with open(log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [str(tools / "registry"), "serve", str(workdir / "registry.yml")], stdout=out, stderr=out
                )
            )
        _wait("the registry", lambda: answers(f"http://{registry}/v2/"), procs[-1], log)
        # Docker Hub's names come from this registry, as from a mirror in an air-gapped cluster.
        (workdir / "buildkitd.toml").write_text(
            "[worker.oci]\n  enabled = true\n[worker.containerd]\n  enabled = false\n"
            f'[registry."docker.io"]\n  mirrors = ["{registry}"]\n'
            f'[registry."{registry}"]\n  http = true\n  insecure = true\n'
        )
        found = Builders(tools, registry, "", workdir, procs)
        found.socket = found.daemon("buildkitd")
        push = ["podman", "push", "--quiet", "--tls-verify=false", base, f"{registry}/glmops/debian-python:bookworm"]
        subprocess.run(push, env=PODMAN_ENV, check=True, capture_output=True, timeout=600)
        yield found
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class Build:
    ref: str
    returncode: int
    output: str
    digest: str
    seconds: float


@dataclass
class Planned:
    ref: str
    configmap: dict[str, Any]
    job: dict[str, Any]

    @property
    def container(self) -> dict[str, Any]:
        return dict(self.job["spec"]["template"]["spec"]["containers"][0])


def _settings(builders: Builders) -> BuildSettings:
    return BuildSettings(enabled=True, registry=f"{builders.registry}/glmops", builder=Builder.BUILDKIT, insecure=True)


def _plan(builders: Builders, platform: str, version: str, name: str, settings: BuildSettings) -> Planned:
    """The GLMImage's start as the operator plans it: the build context ConfigMap and the Job."""
    catalogs = Catalogs.packaged()
    images = catalogs.images.with_patched_registry(settings.registry)
    ref = images.patched_ref(platform, version)
    body = glmimage_manifest(platform, version, ref, images.patches_for(platform, version), Builder.BUILDKIT)
    body["metadata"]["uid"] = f"{name}-uid"
    wheel = builders.wheel()
    outcome = plan_start(body, ImageObserved(wheel=wheel.read_bytes()), replace(catalogs, images=images), settings)
    configmap, job = outcome.create
    return Planned(ref, configmap, job)


def _run_job(
    builders: Builders,
    platform: str,
    version: str,
    name: str,
    socket: str = "",
    settings: BuildSettings | None = None,
    mounts: dict[str, Path] | None = None,
) -> Build:
    """Plan the GLMImage's start as the operator does, and run its Job's build container against buildkitd here
    (`socket`: another daemon than the shared one; `mounts`: where the pod's mounted files are here)."""
    planned = _plan(builders, platform, version, name, settings or _settings(builders))
    context = builders.workdir / f"context-{name}"
    context.mkdir()
    (context / "Dockerfile").write_text(planned.configmap["data"]["Dockerfile"])
    for file, data in planned.configmap["binaryData"].items():
        (context / file).write_bytes(base64.b64decode(data))
    paths = {WORKSPACE: context, **(mounts or {})}

    def here(value: str) -> str:
        for pod_path, local in paths.items():
            value = value.replace(pod_path, str(local))
        return value

    container = planned.container
    shell, flag, script, arg0 = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and "buildctl-daemonless.sh" in script
    # buildctl-daemonless.sh starts a daemon in the pod; here it is a client of the daemon started above.
    shim = builders.workdir / f"bin-{name}"
    shim.mkdir()
    (shim / "buildctl-daemonless.sh").write_text(
        f'#!/bin/sh\nexec {builders.tools / "buildctl"} --addr unix://{socket or builders.socket} "$@"\n'
    )
    (shim / "buildctl-daemonless.sh").chmod(0o755)
    termination = builders.workdir / f"termination-{name}"
    script = script.replace("/dev/termination-log", str(termination)).replace(
        "/tmp/build.json", str(context / "m.json")
    )
    args = [here(a) for a in container["args"]]
    pod_env = {e["name"]: here(e["value"]) for e in container.get("env", []) if e["name"] != "BUILDKITD_FLAGS"}
    env = {**os.environ, **pod_env, "PATH": f"{shim}:{os.environ['PATH']}"}
    start = time.monotonic()
    proc = subprocess.run([shell, flag, script, arg0, *args], env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - start
    digest = termination.read_text().strip() if termination.exists() else ""
    return Build(planned.ref, proc.returncode, proc.stdout + proc.stderr, digest, seconds)


def _daemonless(tools: Path, env: dict[str, str], up_after: float) -> subprocess.CompletedProcess[str]:
    """BuildKit's own buildctl-daemonless.sh, with a daemon that answers `buildctl debug workers` only `up_after`
    seconds after it was started (as rootless buildkitd on a loaded node), and the build a client that echoes."""
    work = Path(tempfile.mkdtemp(prefix="glmops-daemonless-"))
    try:
        daemon, client = work / "buildkitd", work / "buildctl"
        # Written whole, then moved: a client reading a half-written file would take an empty start as 0 (up).
        daemon.write_text(
            f'#!/bin/sh\necho "daemon $*"\ndate +%s.%N > {work}/starting\nmv {work}/starting {work}/started\n'
            "exec sleep 300\n"
        )
        client.write_text(
            "#!/bin/sh\n"
            f"[ -f {work}/started ] || exit 1\n"
            f'awk -v s="$(cat {work}/started)" -v n="$(date +%s.%N)" \'BEGIN {{ exit !(n - s >= {up_after}) }}\' '
            "|| exit 1\n"
            'echo "client $*"\n'
        )
        daemon.chmod(0o755)
        client.chmod(0o755)
        run_env = {**os.environ, **env, "BUILDKITD": str(daemon), "BUILDCTL": str(client)}
        script = str(tools / "buildctl-daemonless.sh")
        return subprocess.run([script, "build", "--x"], env=run_env, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_build_container_waits_for_a_daemon_slow_to_start(tools: Path) -> None:
    """The build Job's env gives BuildKit's script a start-up wait a loaded node needs; its default (about 2.2 s)
    failed a real-node build with an empty daemon log."""
    image = GLMImage.model_validate(
        {
            **glmimage_manifest("cuda", "0.33.0", "r.example/x:1", (), Builder.BUILDKIT),
            "metadata": {"name": "x", "uid": "u"},
        }
    )
    settings = BuildSettings(enabled=True, registry="r.example", builder=Builder.BUILDKIT)
    job = build_job(image, settings, {})
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["BUILDCTL_CONNECT_RETRIES_MAX"] == str(BUILDKITD_START_TRIES)
    start = time.monotonic()
    rendered = _daemonless(tools, env, up_after=6)
    assert rendered.returncode == 0, rendered.stderr
    assert "client --addr=unix://" in rendered.stdout and "build --x" in rendered.stdout
    assert time.monotonic() - start >= 6
    defaults = _daemonless(tools, {k: v for k, v in env.items() if k != "BUILDCTL_CONNECT_RETRIES_MAX"}, up_after=6)
    assert defaults.returncode == 1
    assert "could not connect" in defaults.stderr and "daemon " in defaults.stderr, defaults.stderr


def test_the_rendered_build_job_pushes_the_patched_image_and_reports_its_digest(builders: Builders) -> None:
    builders.stand_in("cuda", "v0.34.0", "0.34.0")
    build = _run_job(builders, "cuda", "0.34.0", "cuda-0340")
    assert build.returncode == 0, build.output[-4000:]
    ref = build.ref
    repository, tag = ref.removeprefix(f"{builders.registry}/").rsplit(":", 1)
    assert build.digest.startswith("sha256:") and len(build.digest) == 71, build.digest
    assert builders.plain.digest(repository, tag) == build.digest  # what the GLMImage pins is what was pushed
    # What the operator reads of a running build's log for status.step names each RUN step as it starts.
    lines = build.output.splitlines()
    opened = [i for i, line in enumerate(lines) if re.match(r"#\d+ \[\d+/\d+\] RUN ", line)]
    assert opened, build.output[-3000:]
    for i in opened:
        name = lines[i].split(" ", 1)[1]
        assert build_step("\n".join(lines[: i + 1])) == (name if len(name) <= 200 else name[:197] + "...")
    assert (build_step(build.output) or "").endswith("(done)"), build_step(build.output)
    labels = builders.plain.image_config(repository, build.digest)["config"]["Labels"]
    catalog = Catalogs.packaged().images
    assert labels["dev.glmops.vllm-version"] == "0.34.0"
    assert labels["dev.glmops.patches"] == ",".join(catalog.patches_for("cuda", "0.34.0"))
    assert labels["dev.glmops.plugin-version"] == PLUGIN_VERSION
    # Pulled by digest, as the deployment's pods pull it: the plugin is in the interpreter that runs vLLM.
    pinned = f"{builders.registry}/{repository}@{build.digest}"
    pull = subprocess.run(
        ["podman", "pull", "--quiet", "--tls-verify=false", pinned],
        env=PODMAN_ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pull.returncode == 0, pull.stderr
    try:
        probe = "import importlib.metadata as m; print(m.version('glmops-vllm-patches'), m.version('vllm'))"
        ran = subprocess.run(
            ["podman", "run", "--rm", "--network=none", pinned, "python3", "-c", probe],
            env=PODMAN_ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == [PLUGIN_VERSION, "0.34.0"]
    finally:
        subprocess.run(["podman", "rmi", "--force", pinned], env=PODMAN_ENV, capture_output=True, timeout=120)
    # What glmops adds to the stock image: the layers after the base's (the base is the stand-in's Debian image).
    base = builders.plain.manifest(STOCK["cuda"], builders.plain.digest(STOCK["cuda"], "v0.34.0") or "")["layers"]
    layers = builders.plain.manifest(repository, build.digest)["layers"]
    assert [x["digest"] for x in layers[: len(base)]] == [x["digest"] for x in base], "the stock image's layers, kept"
    added = [x["size"] for x in layers[len(base) :]]
    assert added, "glmops' own layer"
    print(
        f"\nbuild of {ref}: {build.seconds:.1f} s (stand-in base, first build); glmops adds {len(added)} layer(s),"
        f" {sum(added) / 1024:.1f} KiB compressed, on a base of {sum(x['size'] for x in base) / 2**20:.1f} MiB"
    )


def test_a_build_in_a_new_pod_takes_every_step_from_the_registry_cache(builders: Builders) -> None:
    builders.stand_in("rocm", "v0.33.0", "0.33.0")
    first = _run_job(builders, "rocm", "0.33.0", "rocm-first")
    assert first.returncode == 0, first.output[-4000:]
    cache = cache_ref(first.ref).removeprefix(f"{builders.registry}/").rsplit(":", 1)
    assert builders.plain.digest(*cache) is not None, "the first build wrote its layer cache to the registry"
    # A daemon with an empty state directory, as the next build Job's pod has: what it does not run again comes from
    # the cache the first build left in the registry, not from a daemon's memory.
    again = _run_job(builders, "rocm", "0.33.0", "rocm-again", socket=builders.daemon("buildkitd-new-pod"))
    assert again.returncode == 0, again.output[-4000:]
    lines = again.output.splitlines()
    runs = {line.split()[0] for line in lines if re.match(r"#\d+ \[\d+/\d+\] RUN ", line)}
    cached = {line.split()[0] for line in lines if line.endswith(" CACHED")}
    assert runs and runs <= cached, again.output[-4000:]
    repository = first.ref.removeprefix(f"{builders.registry}/").rsplit(":", 1)[0]
    layers = [
        [layer["digest"] for layer in builders.plain.manifest(repository, b.digest)["layers"]] for b in (first, again)
    ]
    assert layers[0] == layers[1], "the same layers"
    print(
        f"\nrocm 0.33.0: first build {first.seconds:.1f} s, in a new pod from the registry cache {again.seconds:.1f} s"
    )


def test_a_base_carrying_another_vllm_fails_the_build_with_the_reason(builders: Builders) -> None:
    builders.stand_in("cuda", "v0.33.0", "0.32.0")  # the tag says 0.33.0, the image carries 0.32.0
    build = _run_job(builders, "cuda", "0.33.0", "cuda-mismatch")
    assert build.returncode != 0
    assert "base image has vLLM 0.32.0, not 0.33.0" in build.output
    assert build.digest == ""  # nothing reported: the GLMImage reads the log's tail instead


def test_a_base_that_is_not_in_the_registry_fails_the_build_with_the_reason(builders: Builders) -> None:
    build = _run_job(builders, "cuda", "0.31.0", "cuda-missing")
    assert build.returncode != 0
    assert "vllm/vllm-openai:v0.31.0" in build.output and "not found" in build.output, build.output[-3000:]
    assert build.digest == ""


@dataclass
class PrivateRegistry:
    """A registry as many clusters run their own: TLS with a certificate from a private authority, basic auth."""

    address: str
    ca: str
    username: str
    password: str


@pytest.fixture(scope="module")
def private_registry(builders: Builders) -> Iterator[PrivateRegistry]:
    folder = builders.workdir / "private-registry"
    folder.mkdir()
    ca, cert, key = _authority_and_server_certificate("127.0.0.1")
    (folder / "tls.crt").write_text(cert)
    (folder / "tls.key").write_text(key)
    user, password = "builder", "s3cret-push"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # crypt: bcrypt from the system's libcrypt
        import crypt

        (folder / "htpasswd").write_text(f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}\n")
    address = f"127.0.0.1:{_free_port()}"
    (folder / "config.yml").write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {folder / 'data'}}}}}\n"
        f"http: {{addr: '{address}', tls: {{certificate: {folder / 'tls.crt'}, key: {folder / 'tls.key'}}}}}\n"
        f"auth: {{htpasswd: {{realm: glmops-test, path: {folder / 'htpasswd'}}}}}\n"
        "log: {level: warn}\n"
    )
    log = folder / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(builders.tools / "registry"), "serve", str(folder / "config.yml")], stdout=out, stderr=out
        )
    builders.procs.append(proc)
    found = PrivateRegistry(address, ca, user, password)
    _wait("the private registry", lambda: _answers_tls(address), proc, log)
    yield found


def _authority_and_server_certificate(ip: str) -> tuple[str, str, str]:
    """A self-signed authority, and a server certificate it signs for `ip`: (authority, certificate, key) as PEM."""
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("glmops test registry authority"))
        .issuer_name(name("glmops test registry authority"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(ip))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(), key_pem


def _answers_tls(address: str) -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://{address}/v2/", timeout=2, context=context):
            return True
    except urllib.error.HTTPError as err:
        return err.code == 401  # up, and asking for credentials
    except OSError:
        return False


def test_a_registry_with_a_private_authority_and_basic_auth_takes_the_push_with_the_documented_settings(
    builders: Builders, private_registry: PrivateRegistry
) -> None:
    """imageBuild.registryCA and imageBuild.pushSecret, as the chart passes them: the build trusts the registry's
    authority through the daemon configuration glmops renders, and pushes with the Secret's credentials; the
    operator's digest check then finds the pushed image with the same two."""
    builders.stand_in("cuda", "v0.32.0", "0.32.0")
    registry = private_registry.address
    settings = BuildSettings(
        enabled=True,
        registry=f"{registry}/glmops",
        builder=Builder.BUILDKIT,
        push_secret="push",
        registry_ca="registry-ca",
    )
    planned = _plan(builders, "cuda", "0.32.0", "private-plan", settings)
    # The pod's mounts, here: the CA ConfigMap, the push Secret as a docker config, the context ConfigMap.
    mounts = {path: builders.workdir / f"private-{path.strip('/').replace('/', '-')}" for path in POD_DIRS}
    for folder in mounts.values():
        folder.mkdir()
    (mounts[REGISTRY_CA_DIR] / "ca.crt").write_text(private_registry.ca)
    auth = base64.b64encode(f"{private_registry.username}:{private_registry.password}".encode()).decode()
    (mounts[DOCKER_CONFIG_DIR] / "config.json").write_text(json.dumps({"auths": {registry: {"auth": auth}}}))
    rendered = planned.configmap["data"]["buildkitd.toml"].replace(REGISTRY_CA_DIR, str(mounts[REGISTRY_CA_DIR]))
    flags = {e["name"]: e["value"] for e in planned.container["env"]}["BUILDKITD_FLAGS"]
    assert f"--config={BUILD_CONFIG_DIR}/buildkitd.toml" in flags.split()
    # The daemon runs with the rendered configuration, and the shared mirror for the stand-in base.
    config = mounts[BUILD_CONFIG_DIR] / "buildkitd.toml"
    config.write_text(rendered + (builders.workdir / "buildkitd.toml").read_text())
    build = _run_job(
        builders, "cuda", "0.32.0", "private", builders.daemon("buildkitd-private", config), settings, mounts
    )
    assert build.returncode == 0, build.output[-4000:]
    assert build.digest.startswith("sha256:"), build.output[-2000:]
    creds = Credentials(private_registry.username, private_registry.password)
    assert remote_digest(build.ref, creds, ca=private_registry.ca) == build.digest
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        remote_digest(build.ref, creds)  # without the authority the operator refuses the registry
    with pytest.raises(RegistryError, match="401"):
        remote_digest(build.ref, None, ca=private_registry.ca)  # without the credentials the registry refuses us

    # Without the authority (TLS still, as a loopback registry must be told) the build refuses the registry too.
    without = builders.workdir / "buildkitd-no-ca.toml"
    shared = (builders.workdir / "buildkitd.toml").read_text()
    without.write_text("".join(line for line in rendered.splitlines(True) if "ca = " not in line) + shared)
    bare = builders.daemon("buildkitd-no-ca", without)
    refused = _run_job(builders, "cuda", "0.32.0", "private-no-ca", bare, settings, mounts)
    assert refused.returncode != 0 and refused.digest == ""
    assert "certificate signed by unknown authority" in refused.output, refused.output[-3000:]
    print(f"\nbuild pushed to a TLS registry with basic auth (private authority): {build.seconds:.1f} s")
