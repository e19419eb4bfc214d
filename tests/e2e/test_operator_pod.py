"""The operator as Helm installs it: the built image, a real pod on the real node, under its ServiceAccount.

The image hack/build-images.sh built (`make images`) is imported into the node's containerd, and `helm install`
runs it there (pull policy Never, tolerating the node's taint and selecting it); the admin kubeconfig only
installs. The API server reaches the webhooks through the chart's Service (its ClusterIP, kube-proxy's rules on
this host), and the pod reaches the API server through the kubernetes Service, as in any cluster. The tests run in
file order on one release: install, admission, an upgrade under a stream of admissions, uninstall.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import ARTIFACTS
from tests.support.cluster import REPO, eventually
from tests.support.realnode import (
    NODE_NAME,
    REAL_NODE_AND_PODMAN,
    TAINT_KEY,
    TOLERATION,
    RealNode,
    built_operator_image,
)

pytestmark = REAL_NODE_AND_PODMAN

CHART = REPO / "charts" / "glmops"
RELEASE = "glmops"
OPS = "glmops-pod-system"
UPGRADE_TAG_SUFFIX = "-upgrade"
REFUSED_SAMPLE = REPO / "samples" / "vllm-52833-broken.yaml"  # remediation: Reject
ADMITTED_SAMPLE = REPO / "samples" / "baseline-h200-glm53-fp8.yaml"
ADMITTED = "glm53-fp8-h200-tp8"
VALUES: dict[str, Any] = {
    "replicas": 1,  # one pod to follow through install; the upgrade test goes to the chart's default of two
    "image": {"pullPolicy": "Never"},  # imported into the node's containerd; there is no registry
    "nodeSelector": {TAINT_KEY: "true"},
    "tolerations": [TOLERATION],
}
ADMISSIONS_PER_SECOND = 10


@dataclass
class Release:
    node: RealNode
    image: str  # repository:tag as built
    work: str  # the namespace GLMDeployments go to
    values: Path
    log_dir: Path
    notes: dict[str, Any] = field(default_factory=dict)

    def helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.node.helm, f"--kubeconfig={self.node.kubectl.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}\n{proc.stdout}")
        return proc

    def operator_pods(self) -> list[dict[str, Any]]:
        pods = self.node.kubectl.run(
            "get", "pods", "-n", OPS, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(pods.stdout)["items"]
        return items

    def save_logs(self, tag: str) -> None:
        """Every operator pod's log (and its previous container's) and the objects of both namespaces."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        kubectl = self.node.kubectl
        for pod in self.operator_pods():
            name = pod["metadata"]["name"]
            for previous in ("", "--previous"):
                out = kubectl.run("logs", "-n", OPS, name, *([previous] if previous else []), check=False)
                if out.stdout:
                    (self.log_dir / f"{tag}-{name}{previous.replace('--', '-')}.log").write_text(out.stdout)
        for ns in (OPS, self.work):
            dump = kubectl.run("get", "all,glmd,events,secrets,pdb", "-n", ns, "-o", "yaml", check=False).stdout
            (self.log_dir / f"{tag}-{ns}.yaml").write_text(dump)
        hooks = kubectl.run("get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "yaml")
        (self.log_dir / f"{tag}-webhook-configurations.yaml").write_text(hooks.stdout)


@pytest.fixture(scope="module")
def release(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    real_node.ensure_up()
    image, archive = built_operator_image()
    started = time.monotonic()
    real_node.ctr("images", "import", archive)
    # The upgrade's image: the same one under a second tag, so the pod template changes and the pods roll.
    real_node.ctr("images", "tag", "--force", image, image + UPGRADE_TAG_SUFFIX)
    imported = time.monotonic() - started
    kubectl = real_node.kubectl
    work = f"pod-work-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", work)
    values = tmp_path_factory.mktemp("operator-pod") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    rel = Release(real_node, image, work, values, ARTIFACTS / "operator-pod", {"image import s": round(imported, 1)})
    kubectl.run("delete", "namespace", OPS, "--ignore-not-found", "--wait=true", "--timeout=120s", timeout=130)
    try:
        yield rel
    finally:
        if rel.notes.get("failed"):
            rel.save_logs("failed")
        subprocess.run(
            [real_node.helm, f"--kubeconfig={kubectl.kubeconfig}", "uninstall", RELEASE, "-n", OPS, "--wait"],
            capture_output=True,
            timeout=120,
            check=False,
        )
        for ns in (work, OPS):
            kubectl.run("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
        print(f"operator pod e2e: {rel.notes}")


@pytest.fixture(autouse=True)
def _save_on_failure(request: pytest.FixtureRequest, release: Release) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        release.notes["failed"] = True
        release.save_logs(request.node.name)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _running_ready(release: Release, image: str, count: int) -> list[dict[str, Any]]:
    pods = [p for p in release.operator_pods() if not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == count and all(_ready(p) for p in pods), [
        (p["metadata"]["name"], p["status"].get("phase")) for p in pods
    ]
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {image}
    return pods


def test_helm_install_runs_the_operator_as_a_pod_on_the_real_node_that_becomes_ready(release: Release) -> None:
    started = time.monotonic()
    release.helm("install", RELEASE, str(CHART), "-n", OPS, "--create-namespace", "-f", str(release.values))
    (pod,) = eventually(
        lambda: _running_ready(release, release.image, 1), timeout=150, interval=1, what="the operator pod Ready"
    )
    release.notes["install to Ready s"] = round(time.monotonic() - started, 1)
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["spec"]["serviceAccountName"] == RELEASE
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    # Ready means /readyz answered: the webhook server serves the certificate the operator wrote into its Secret.
    secret = release.node.kubectl.get("secret", f"{RELEASE}-webhook-cert", OPS)
    assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret["data"])
    # The operator talks to the API server as its ServiceAccount, from the pod's network, through the kubernetes
    # Service: the webhook configurations carry the CA bundle it injected.
    hook = release.node.kubectl.get("validatingwebhookconfiguration", f"{RELEASE}-{OPS}")
    assert all(w["clientConfig"].get("caBundle") for w in hook["webhooks"])
    assert all(w["clientConfig"]["service"]["name"] == f"{RELEASE}-webhook" for w in hook["webhooks"])


def test_the_api_server_reaches_the_webhooks_through_the_service_and_the_operator_reconciles(
    release: Release,
) -> None:
    kubectl = release.node.kubectl
    service = kubectl.get("service", f"{RELEASE}-webhook", OPS)
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["clusterIP"] not in ("", "None")
    (pod,) = release.operator_pods()
    slices = kubectl.run(
        "get", "endpointslices", "-n", OPS, "-l", f"kubernetes.io/service-name={RELEASE}-webhook", "-o", "json"
    )
    addresses = [a for s in json.loads(slices.stdout)["items"] for e in s["endpoints"] or [] for a in e["addresses"]]
    assert addresses == [pod["status"]["podIP"]]

    refused = kubectl.run("apply", "-n", release.work, "-f", str(REFUSED_SAMPLE), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in refused.stderr
    assert "rule vllm-52833" in refused.stderr

    kubectl.run("apply", "-n", release.work, "-f", str(ADMITTED_SAMPLE))
    deployment = eventually(
        lambda: kubectl.get("deployment", ADMITTED, release.work), timeout=60, what="the reconciled Deployment"
    )
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "GLMDeployment"

    def on_a_kwok_gpu_node() -> dict[str, Any]:
        pods = kubectl.get("pods", namespace=release.work)["items"]
        assert pods and all(p["spec"].get("nodeName") for p in pods)
        return kubectl.get("node", pods[0]["spec"]["nodeName"])

    node = eventually(on_a_kwok_gpu_node, timeout=60, what="the serving pod scheduled")
    assert node["metadata"]["labels"].get("glmops.dev/fake-node") == "true"
    assert int(node["status"]["capacity"].get("nvidia.com/gpu", 0)) >= 8


def test_glmctl_doctor_after_install_finds_the_webhooks_answering_and_the_operators_permissions_granted(
    release: Release,
) -> None:
    """docs/doctor.md's after-install checks against the release as Helm installed it, on the real node."""
    proc = subprocess.run(
        [str(REPO / ".venv/bin/glmctl"), "doctor", "--kubeconfig", release.node.kubectl.kubeconfig,
         "-n", OPS, "--release", RELEASE, "-o", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(proc.stdout or "{}")
    found = {(f["check"], f["level"], f["value"]) for f in report.get("findings", [])}
    assert proc.returncode == 0 and report["problems"] == 0, json.dumps(report, indent=1) + proc.stderr
    assert ("webhooks", "ok", "refused by a rule") in found, found
    assert ("webhooks", "ok", "1 ready endpoints") in found, found
    assert any(check == "permissions" and level == "ok" for check, level, _ in found), found
    assert not any(check in ("release", "crds", "certificate") and level != "ok" for check, level, _ in found), found


class AdmissionStream:
    """Dry-run creates of a valid GLMDeployment at a steady rate, straight to the API; every answer counted."""

    def __init__(self, release: Release, rate: float) -> None:
        state = release.node.state_dir / "certs"
        context = ssl.create_default_context(cafile=str(state / "ca.crt"))
        context.load_cert_chain(state / "admin.crt", state / "admin.key")
        server = yaml.safe_load(Path(release.node.kubectl.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
        self.url = f"{server}/apis/glmops.dev/v1alpha1/namespaces/{release.work}/glmdeployments?dryRun=All"
        self.body = yaml.safe_load(ADMITTED_SAMPLE.read_text())  # one the rules admit
        self.body["metadata"] = {"name": "stream", "namespace": release.work}
        self.client = httpx.Client(verify=context, timeout=30)
        self.interval = 1 / rate
        self.sent = 0
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="admission stream", daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self.stopping.is_set():
            self.sent += 1
            try:
                answer = self.client.post(self.url, json=self.body)
                if answer.status_code != 201:
                    self.failures.append(f"{time.strftime('%H:%M:%S')} HTTP {answer.status_code}: {answer.text[:300]}")
            except httpx.HTTPError as err:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {type(err).__name__}: {err}")
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> AdmissionStream:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)
        self.client.close()


def test_helm_upgrade_to_a_new_image_with_two_replicas_fails_no_admission(release: Release) -> None:
    new_image = release.image + UPGRADE_TAG_SUFFIX
    tag = new_image.rsplit(":", 1)[1]
    with AdmissionStream(release, ADMISSIONS_PER_SECOND) as stream:
        time.sleep(3)  # admissions flow before the upgrade starts
        assert stream.sent > 0 and not stream.failures, stream.failures
        started = time.monotonic()
        release.helm(
            "upgrade", RELEASE, str(CHART), "-n", OPS, "-f", str(release.values),
            "--set", f"image.tag={tag}", "--set", "replicas=2", "--wait", "--timeout=240s",
        )  # fmt: skip
        pods = eventually(
            lambda: _running_ready(release, new_image, 2), timeout=120, interval=1, what="two new operator pods Ready"
        )
        upgraded = time.monotonic() - started
        # The old pod's server closes its connections only after its preStop sleep: keep admitting until it is gone.
        eventually(lambda: len(release.operator_pods()) == 2, timeout=90, interval=0.5, what="the old pod gone")
        old_gone = time.monotonic() - started
        time.sleep(2)
    elapsed = time.monotonic() - started + 3
    release.notes.update(
        {
            "upgrade s": round(upgraded, 1),
            "old pod gone s": round(old_gone, 1),
            "admissions": stream.sent,
            "failed admissions": len(stream.failures),
        }
    )
    print(f"upgrade: {upgraded:.1f}s (old pod gone {old_gone:.1f}s), {len(stream.failures)} of {stream.sent} failed")
    assert stream.failures == [], f"{len(stream.failures)} of {stream.sent} admissions failed:\n" + "\n".join(
        stream.failures[:20]
    )
    assert stream.sent >= 0.8 * ADMISSIONS_PER_SECOND * elapsed, "the stream kept its rate"
    assert len({p["spec"]["nodeName"] for p in pods}) == 1, "one real node: both replicas on it"
    assert release.node.kubectl.get("pdb", RELEASE, OPS)["spec"]["maxUnavailable"] == 1


def test_helm_uninstall_removes_webhooks_and_pods_and_namespaces_delete_cleanly(release: Release) -> None:
    kubectl = release.node.kubectl
    release.helm("uninstall", RELEASE, "-n", OPS, "--wait", "--timeout=120s")
    hooks = kubectl.run(
        "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
    ).stdout.split()
    assert not [h for h in hooks if h.endswith(f"/{RELEASE}-{OPS}")], hooks
    eventually(lambda: release.operator_pods() == [], timeout=90, what="the operator pods gone")
    assert kubectl.get("glmd", ADMITTED, release.work)["metadata"].get("finalizers") in (None, [])
    started = time.monotonic()
    kubectl.run("delete", "namespace", release.work, "--wait=true", "--timeout=90s", timeout=100)
    deleted = time.monotonic() - started
    release.notes["namespace delete s"] = round(deleted, 1)
    gone = kubectl.run("get", "namespace", release.work, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    assert deleted < 90
