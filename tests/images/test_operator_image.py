"""The operator image, built for real with podman on a base built from Debian's archive (hack/build-images.sh),
then run as the chart runs it: the security settings of the chart's Deployment (`helm template`) turned into
podman's flags (user, read-only root with only the chart's emptyDirs writable, every capability dropped, no
new privileges, the default seccomp profile), no network unless the test needs the API server. The archive it
saves is imported by a private containerd, as a kubelet node's would.

`make images-test` runs these; the first run builds the base and the image (minutes), later runs reuse both
unless the build context changed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tarfile
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from packaging.specifiers import SpecifierSet

from glm_operator.render.dockerfile import PLUGIN_DIR_IN_OPERATOR, PLUGIN_WHEEL
from tests.conftest import ARTIFACTS, TEST_WEBHOOK_PORT
from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO, Cluster, Kubectl, eventually, run_script

CONTAINERS_CONF = REPO / "hack" / "containers.conf"
# A non-root user and a read-only root filesystem (what other images' tests run under).
LOCKED_DOWN = ["--rm", "--read-only", "--user", "65532:65532"]
SAMPLES = REPO / "samples"


def chart_operator_pod(*helm_flags: str) -> dict[str, Any]:
    """The pod spec of the operator Deployment as `helm template` renders the chart."""
    helm = Path(run_script("build.sh").strip().splitlines()[-1]) / "helm"
    out = subprocess.run(
        [str(helm), "template", "glmops", str(REPO / "charts" / "glmops"), *TEMPLATE_FLAGS, *helm_flags],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    deploy = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    pod: dict[str, Any] = deploy["spec"]["template"]["spec"]
    return pod


def podman_flags(pod: dict[str, Any]) -> list[str]:
    """podman run flags that hold a container to what the pod's security settings allow a kubelet's runtime.

    Only the pod's emptyDirs become writable (podman's own tmpfs on /tmp, /run and /var/tmp is switched off);
    a setting this cannot express fails here, so the chart never gains one the image test does not model."""
    (container,) = pod["containers"]
    context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    assert context.get("seccompProfile") == {"type": "RuntimeDefault"}, "podman's default profile stands for it"
    assert context.get("runAsNonRoot") is True and context.get("privileged") is False
    flags = ["--user", f"{context['runAsUser']}:{context['runAsGroup']}"]
    flags += [f"--group-add={context['fsGroup']}"] if "fsGroup" in context else []
    if context.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    flags += [f"--cap-drop={cap}" for cap in context["capabilities"]["drop"]]
    assert not context["capabilities"].get("add")
    if context.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        empty_dir = volumes[mount["name"]]["emptyDir"]
        size = {"16Mi": "16m"}.get(empty_dir.get("sizeLimit", ""), "64m")
        flags += ["--tmpfs", f"{mount['mountPath']}:rw,nosuid,nodev,size={size},mode=1777"]
    return flags


@pytest.fixture(scope="session")
def chart_locked_down() -> list[str]:
    """podman flags for the chart's default security settings of the operator pod (without --rm: a container
    that stops keeps its log for remove_container)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: hack/build-images.sh installs it (apt) and builds the image")
    return podman_flags(chart_operator_pod())


@dataclass(frozen=True)
class BuiltImage:
    name: str
    archive: Path
    base: str
    size: int


def podman(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CONTAINERS_CONF=str(CONTAINERS_CONF))
    done = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, input=input, timeout=600)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}: {done.stderr[-3000:]}")
    return done


def _build() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "hack" / "build-images.sh")], cwd=REPO, capture_output=True, text=True, timeout=1800
    )


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    """The operator image, built now or reused when its build context is unchanged."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: hack/build-images.sh installs it (apt) and builds the image")
    done = _build()
    assert done.returncode == 0, done.stderr[-5000:]
    out = dict(line.split("=", 1) for line in done.stdout.splitlines())
    return BuiltImage(out["image"], Path(out["archive"]), out["base"], int(out["size"]))


def run_in(
    image: BuiltImage, *argv: str, entrypoint: str | None = None, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run the image locked down and offline; stdin is empty."""
    flags = [*LOCKED_DOWN, "--network", "none", *extra]
    if entrypoint:
        flags += ["--entrypoint", entrypoint]
    return podman("run", *flags, image.name, *argv, check=False)


# ---- the build ----


def test_a_second_build_with_an_unchanged_context_reuses_the_image_and_its_archive(image: BuiltImage) -> None:
    again = _build()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "is up to date" in again.stderr
    assert f"archive={image.archive}" in again.stdout.splitlines()


def test_the_image_is_tagged_as_the_chart_pulls_it_and_built_on_the_debian_base(image: BuiltImage) -> None:
    chart = yaml.safe_load((REPO / "charts/glmops/Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts/glmops/values.yaml").read_text())
    assert image.name == f"{values['image']['repository']}:{chart['appVersion']}"
    (config,) = json.loads(podman("image", "inspect", image.name).stdout)
    assert config["Config"]["User"] == "65532:65532"
    assert config["Config"]["Entrypoint"] == ["kopf"]
    assert config["Config"]["Labels"]["org.opencontainers.image.base.name"] == image.base
    print(f"\n{image.name}: {image.size / 1e6:.0f} MB on {image.base}")


def test_the_archive_holds_the_image_under_its_chart_name(image: BuiltImage) -> None:
    with tarfile.open(image.archive) as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        (manifest,) = json.load(member)
    assert manifest["RepoTags"] == [image.name]


# ---- the image, locked down and offline ----


def test_kopf_runs_and_is_a_version_the_package_accepts(image: BuiltImage) -> None:
    done = run_in(image, "--version")
    assert done.returncode == 0, done.stderr
    version = done.stdout.strip().removeprefix("kopf, version ")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (kopf_requirement,) = (d for d in deps if d.startswith("kopf"))
    assert version in SpecifierSet(kopf_requirement.removeprefix("kopf")), (version, kopf_requirement)


def test_the_operator_handlers_import_under_a_read_only_root_as_user_65532(image: BuiltImage) -> None:
    probe = "import os, glm_operator.handlers; print(os.getuid(), os.access('/', os.W_OK))"
    done = run_in(image, "-c", probe, entrypoint="python3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["65532", "False"]


def test_user_65532_has_a_name_as_kopf_s_peering_identity_needs_without_the_runtime_adding_one(
    image: BuiltImage,
) -> None:
    # kopf names its peering identity after getpass.getuser(); containerd, unlike podman, adds no passwd entry.
    done = run_in(
        image, "-c", "import getpass; print(getpass.getuser())", entrypoint="python3", extra=("--passwd=false",)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "glmops"


def test_under_the_charts_security_settings_only_tmp_is_writable_and_no_capability_is_held(
    image: BuiltImage, chart_locked_down: list[str]
) -> None:
    probe = (
        "import os, pwd, tempfile, glm_operator.handlers; print(pwd.getpwuid(os.getuid()).pw_name); "
        "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l); "
        "tempfile.TemporaryDirectory(prefix='glmops-webhook-').cleanup(); "  # where the webhook's cert goes
        "print(os.getuid(), os.getgid(), os.access('/', os.W_OK), os.access('/opt/glmops', os.W_OK), "
        "os.access('/tmp', os.W_OK), int(status['CapEff'], 16), int(status['CapPrm'], 16), "
        "status['NoNewPrivs'].strip(), status['Seccomp'].strip())"
    )
    flags = ["--rm", *chart_locked_down, "--network", "none", "--entrypoint", "python3"]
    done = podman("run", *flags, image.name, "-c", probe, check=False)
    assert done.returncode == 0, done.stderr
    # Seccomp 2: a filter is applied (podman's default profile, as a kubelet's RuntimeDefault).
    assert done.stdout.split() == ["glmops", "65532", "65532", "False", "False", "True", "0", "0", "1", "2"]


def test_the_charts_security_settings_are_what_the_image_runs_under(chart_locked_down: list[str]) -> None:
    assert "--read-only" in chart_locked_down and "--read-only-tmpfs=false" in chart_locked_down
    assert "--cap-drop=ALL" in chart_locked_down and "no-new-privileges" in chart_locked_down
    assert chart_locked_down[chart_locked_down.index("--user") + 1] == "65532:65532"
    with pytest.raises(AssertionError):  # a setting the image test cannot model fails loudly
        podman_flags(chart_operator_pod("--set", "securityContext.capabilities.add={NET_ADMIN}"))


def test_the_plugin_wheel_is_where_the_operator_reads_it_and_registers_its_vllm_plugin(image: BuiltImage) -> None:
    probe = (
        "import sys, zipfile, glob; (w,) = glob.glob(sys.argv[1] + '/*.whl'); print(w); "
        "z = zipfile.ZipFile(w); print([n for n in z.namelist() if n.endswith('entry_points.txt')] and "
        "z.read(next(n for n in z.namelist() if n.endswith('entry_points.txt'))).decode())"
    )
    done = run_in(image, "-c", probe, PLUGIN_DIR_IN_OPERATOR, entrypoint="python3")
    assert done.returncode == 0, done.stderr
    path, entry_points = done.stdout.split("\n", 1)
    assert path == f"{PLUGIN_DIR_IN_OPERATOR}/{PLUGIN_WHEEL}"
    assert "[vllm.general_plugins]" in entry_points
    assert "glmops_vllm_patches = glmops_vllm_patches:register" in entry_points


def test_glmctl_validate_in_the_image_gives_the_verdicts_it_gives_outside(image: BuiltImage) -> None:
    files = sorted(f"samples/{p.name}" for p in SAMPLES.glob("*.yaml"))
    outside = subprocess.run(
        [str(REPO / ".venv/bin/glmctl"), "validate", "-o", "json", *files], cwd=REPO, capture_output=True, text=True
    )
    mount = ("--volume", f"{SAMPLES}:/work/samples:ro", "--workdir", "/work")
    inside = run_in(image, "validate", "-o", "json", *files, entrypoint="glmctl", extra=mount)
    assert (inside.returncode, inside.stdout) == (outside.returncode, outside.stdout), inside.stderr
    verdicts = {r["allowed"] for r in json.loads(outside.stdout)}
    assert verdicts == {True, False}, "the samples no longer hold both an admitted and a refused manifest"


# ---- containerd reads the archive, as a kubelet node's would ----


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[list[str]]:
    """A private containerd (own root, state and socket; no CRI): the ctr command line that talks to it."""
    if shutil.which("containerd") is None or shutil.which("ctr") is None:
        pytest.skip("containerd is not installed (Debian package containerd)")
    root = Path("/tmp") / f"glmops-images-ctrd-{uuid.uuid4().hex[:8]}"  # short: the socket path is limited
    root.mkdir()
    config = root / "config.toml"
    config.write_text(
        f'version = 2\nroot = "{root}/root"\nstate = "{root}/state"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\naddress = "{root}/sock"\n[ttrpc]\naddress = "{root}/sock.ttrpc"\n'
        '[debug]\naddress = ""\n[metrics]\naddress = ""\n'
    )
    log = open(tmp_path / "containerd.log", "wb")  # noqa: SIM115 (owned by the process)
    proc = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    ctr = ["ctr", "--address", f"{root}/sock", "--namespace", "k8s.io"]
    try:
        eventually(lambda: subprocess.run([*ctr, "version"], capture_output=True).returncode == 0, timeout=30,
                   what="the private containerd to answer")  # fmt: skip
        yield ctr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_containerd_imports_and_unpacks_the_archive_under_the_chart_image_name(
    image: BuiltImage, containerd: list[str]
) -> None:
    done = subprocess.run([*containerd, "images", "import", str(image.archive)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([*containerd, "images", "check"], capture_output=True, text=True, check=True).stdout
    (line,) = (row for row in listed.splitlines() if row.startswith(image.name + " "))
    assert "complete" in line and line.split()[-1] == "true", line  # all layers present, unpacked


# ---- the image as the operator, against the test cluster ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def operator_in_image(
    image: BuiltImage, cluster: Cluster, crd_installed: None, tmp_path: Path, chart_locked_down: list[str]
) -> Iterator[tuple[str, str]]:
    """The operator run from the image on the host network, with the test cluster's kubeconfig and webhook
    certificates mounted read-only, as OperatorProcess runs it from the venv. Yields its container name and
    liveness URL."""
    conf = tmp_path / "conf"
    conf.mkdir()
    flat = cluster.kubectl.run("config", "view", "--raw", "--flatten", "--minify").stdout
    (conf / "kubeconfig").write_text(flat)
    for name in ("webhook.crt", "webhook.key", "ca.crt"):
        shutil.copy(cluster.state_dir / "certs" / name, conf / name)
    for path in conf.iterdir():
        path.chmod(0o644)  # readable by user 65532; a pod gets these from a Secret the same way
    health = _free_port()
    name = f"glmops-operator-test-{uuid.uuid4().hex[:8]}"
    env = {
        "KUBECONFIG": "/etc/glmops/kubeconfig",
        "GLMOPS_WEBHOOK_ADDR": "127.0.0.1",
        "GLMOPS_WEBHOOK_HOST": "127.0.0.1",
        "GLMOPS_WEBHOOK_PORT": TEST_WEBHOOK_PORT,
        "GLMOPS_WEBHOOK_CERT": "/etc/glmops/webhook.crt",
        "GLMOPS_WEBHOOK_KEY": "/etc/glmops/webhook.key",
        "GLMOPS_WEBHOOK_CA": "/etc/glmops/ca.crt",
    }
    flags = [f"--env={k}={v}" for k, v in env.items()]
    podman(
        "run", "--detach", "--name", name, *chart_locked_down, "--network", "host",
        "--volume", f"{conf}:/etc/glmops:ro", *flags,
        image.name, "run", "--standalone", "--all-namespaces", "-m", "glm_operator.handlers",
        f"--liveness=http://127.0.0.1:{health}/healthz",
    )  # fmt: skip
    try:
        yield name, f"http://127.0.0.1:{health}/healthz"
    finally:
        remove_container(name)


@pytest.mark.cluster
def test_the_operator_from_the_image_admits_and_reconciles_a_glmdeployment(
    operator_in_image: tuple[str, str], kubectl: Kubectl, namespace: str
) -> None:
    container, liveness = operator_in_image

    def alive() -> bool:
        try:
            return httpx.get(liveness, timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    eventually(alive, timeout=90, what="the operator's liveness endpoint in the image")

    def refused_by_our_webhook() -> bool:
        done = kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "vllm-58729-broken.yaml"), check=False)
        assert done.returncode != 0 and "rule vllm-58729" in done.stderr, done.stdout + done.stderr
        return True

    eventually(refused_by_our_webhook, timeout=60, what="the webhook in the image to refuse a broken manifest")
    kubectl.run("apply", "-n", namespace, "-f", str(SAMPLES / "baseline-h200-glm53-fp8.yaml"))
    name = "glm53-fp8-h200-tp8"
    owned = f"glmops.dev/deployment={name}"
    eventually(
        lambda: kubectl.run("get", "deploy", "-n", namespace, "-l", owned, "-o", "name").stdout.strip(),
        timeout=60,
        what="the Deployment the operator in the image creates",
    )
    eventually(
        lambda: "plan" in (kubectl.get("glmd", name, namespace).get("status") or {}), timeout=30, what="status.plan"
    )
    # The container did it, not some other operator watching the same cluster.
    logs = podman("logs", container)
    assert f"[{namespace}/{name}] Handler 'glmops-reconcile' succeeded" in logs.stdout + logs.stderr


def remove_container(name: str) -> None:
    """Keep a test container's log with the test artifacts, then stop and remove it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    logs = podman("logs", name, check=False)
    (ARTIFACTS / f"{name}.log").write_text(logs.stdout + logs.stderr)
    podman("stop", "--time", "10", name, check=False)
    podman("rm", "--force", "--ignore", name, check=False)
