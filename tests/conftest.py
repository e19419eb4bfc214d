"""Session fixtures: the real local control plane, the CRD, the operator, and one namespace per test."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import realnode
from tests.support.cluster import (
    REPO,
    Cluster,
    Kubectl,
    eventually,
    run_script,
    script_env,
    stop_process,
    wait_for_admission,
)

# Overridable, so tests against a second test cluster (GLMOPS_CLUSTER and its ports) can run beside the first.
TEST_WEBHOOK_PORT = os.environ.get("GLMOPS_TEST_WEBHOOK_PORT", "19543")
TEST_METRICS_PORT = os.environ.get("GLMOPS_TEST_METRICS_PORT", "19544")
SHARED_GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
CATALOG_NAMESPACE = "glmops-test-catalog"
ARTIFACTS = Path(os.environ.get("GLMOPS_TEST_ARTIFACTS", REPO / ".test-artifacts"))


def _cluster_running() -> bool:
    return subprocess.run([str(REPO / "cluster" / "status.sh")], env=script_env(), capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The test control plane: reused when already running, else started now and stopped at the end.

    up.sh restarts a running cluster whose API server lacks a flag it now sets (the webhook client certificate's
    --admission-control-config-file), so tests never run against an API server of an older script.
    """
    started_here = not _cluster_running()
    if started_here:
        run_script("down.sh", "--purge")  # a stopped test cluster's leftovers would leak into this run
    out = run_script("up.sh")
    kubeconfig = out.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
    bin_dir = Path(run_script("build.sh").strip().splitlines()[-1])
    state_dir = Path(kubeconfig).parent
    yield Cluster(bin_dir, state_dir, kubeconfig, Kubectl(str(bin_dir / "kubectl"), kubeconfig))
    if started_here and not os.environ.get("GLMOPS_KEEP_CLUSTER"):
        run_script("down.sh")


@pytest.fixture(scope="session")
def real_node() -> Iterator[realnode.RealNode]:
    """The cluster with a real node (tests/support/realnode.py): one per session, for every module that needs it."""
    node = realnode.start()
    yield node
    realnode.stop()


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster) -> Kubectl:
    return cluster.kubectl


@pytest.fixture(scope="session")
def crd_installed(kubectl: Kubectl) -> None:
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl.wait_established("glmdeployments.glmops.dev", "glmimages.glmops.dev")
    # The OpenAPI document (kubectl explain, field validation) is published shortly after Established.
    eventually(
        lambda: kubectl.run("explain", "glmdeployment.spec", check=False).returncode == 0,
        timeout=60,
        what="the GLMDeployment OpenAPI schema to be published",
    )


class OperatorProcess:
    """The operator, run as users run it outside a cluster: `kopf run` on our handlers."""

    def __init__(self, cluster: Cluster, extra_env: dict[str, str] | None = None, name: str = "operator") -> None:
        certs = cluster.state_dir / "certs"
        self.name = name
        self.kubectl = cluster.kubectl
        self.env = dict(
            os.environ,
            KUBECONFIG=cluster.kubeconfig,
            GLMOPS_WEBHOOK_ADDR="127.0.0.1",
            GLMOPS_WEBHOOK_HOST="127.0.0.1",
            GLMOPS_WEBHOOK_PORT=TEST_WEBHOOK_PORT,
            GLMOPS_WEBHOOK_CERT=str(certs / "webhook.crt"),
            GLMOPS_WEBHOOK_KEY=str(certs / "webhook.key"),
            GLMOPS_WEBHOOK_CA=str(certs / "ca.crt"),
            GLMOPS_CATALOG_CONFIGMAP=f"{CATALOG_NAMESPACE}/glmops-catalog",
            GLMOPS_CATALOG_TTL_SECONDS="1",
            GLMOPS_DISCOVERY_TTL_SECONDS="1",
            GLMOPS_METRICS_PORT=TEST_METRICS_PORT,
        )
        if SHARED_GSM8K.is_file():
            self.env["GLMOPS_GSM8K_PATH"] = str(SHARED_GSM8K)
        self.env.update(extra_env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        """The log of the latest start (one file per start)."""
        return ARTIFACTS / f"{self.name}-{self.starts}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, wait: bool = True) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log = open(self.log_path, "wb")  # noqa: SIM115 (owned by the process)
        self.proc = subprocess.Popen(
            [
                str(REPO / ".venv" / "bin" / "kopf"),
                "run",
                "--standalone",
                "--all-namespaces",
                "-m",
                "glm_operator.handlers",
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        if wait:
            wait_for_admission(self.kubectl, "default", self._alive, "the operator's admission webhooks to answer")

    def _alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"operator exited: see {ARTIFACTS}"

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        stop_process(self.proc, kill)
        self.proc = None


@pytest.fixture(scope="session")
def operator(cluster: Cluster, crd_installed: None) -> Iterator[OperatorProcess]:
    process = OperatorProcess(cluster)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def sim_fleet(cluster: Cluster, operator: OperatorProcess) -> Iterator[subprocess.Popen[bytes]]:
    """Simulated vLLM on every serving pod's IP (kwok pods run no process)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / "sim-fleet.log", "wb")  # noqa: SIM115 (owned by the process)
    argv = [str(REPO / ".venv" / "bin" / "glmctl"), "sim-fleet"]
    if SHARED_GSM8K.is_file():
        argv += ["--gsm8k", str(SHARED_GSM8K)]
    proc = subprocess.Popen(
        argv, env=dict(os.environ, KUBECONFIG=cluster.kubeconfig), stdout=log, stderr=subprocess.STDOUT
    )
    yield proc
    proc.terminate()
    proc.wait(timeout=20)


def install_lws() -> None:
    run_script("lws.sh", "up", timeout=900)
    # The operator re-checks whether the API is served at most every GLMOPS_DISCOVERY_TTL_SECONDS (1 s in the
    # tests): a deployment created sooner may still be planned from the answer cached before the install.
    time.sleep(2)


def uninstall_lws(operator: OperatorProcess) -> None:
    """Uninstall LWS with the operator stopped, and start it again, as docs/networking.md tells users to.

    Known bug, open: when the LeaderWorkerSet CRD goes while the operator watches LeaderWorkerSets, kopf can retry a
    LeaderWorkerSet list or watch after the API is gone, get 404, and stop the operator ("Multidimensional
    multitasker has failed"), seconds after the uninstall (12 s in one CI run, after a 429 and kopf's backoff). The
    session's operator serves every later test, so the tests never remove the API under it.
    """
    operator.stop()
    try:
        run_script("lws.sh", "down", timeout=300)
    finally:
        operator.start()


@pytest.fixture
def leader_worker_set(cluster: Cluster, operator: OperatorProcess) -> Iterator[None]:
    """The real LeaderWorkerSet controller, installed from its release (cluster/lws.sh), and uninstalled after.

    Uninstalled after each test, so every other test sees a cluster without LeaderWorkerSet (the StatefulSet fallback).
    """
    install_lws()
    yield
    uninstall_lws(operator)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kubectl: Kubectl) -> Iterator[str]:
    """A fresh namespace named after the test; dumped to artifacts if the test fails, then deleted."""
    digest = hashlib.sha1(f"{request.node.nodeid}{uuid.uuid4()}".encode()).hexdigest()[:6]
    base = request.node.name.lower().replace("_", "-")
    name = f"t-{''.join(c for c in base if c.isalnum() or c == '-')[:40].strip('-')}-{digest}"
    kubectl.run("create", "namespace", name)
    kubectl.run("label", "namespace", name, "glmops.dev/test=true")
    yield name
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        dump = kubectl.run("get", "all,glmd,events", "-n", name, "-o", "yaml", check=False).stdout
        (ARTIFACTS / f"{name}.yaml").write_text(dump)
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
