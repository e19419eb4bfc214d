"""The operator as the chart runs it: it serves the chart's webhook configurations and never writes them.

The chart's Service, two configurations and environment come from `helm template`. The operator runs as a local
process on a loopback address, and the chart's Service is turned into an ExternalName pointing at that address:
the API server resolves a webhook Service of that type to its external name (there is no kube-proxy here to route
a ClusterIP), still verifies the certificate for `<service>.<namespace>.svc`, and so calls the operator exactly
as it calls a pod behind the chart's Service.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509

from glm_operator.k8s.webhook_check import check, check_client_auth
from glm_operator.k8s.webhook_client_auth import CA_ENV, NAMES_ENV
from tests.conftest import ARTIFACTS
from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO, Cluster, Kubectl, eventually

pytestmark = pytest.mark.cluster
RELEASE = "cw"
CONFIG_KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
REFUSED = (
    "apiVersion: glmops.dev/v1alpha1\nkind: GLMDeployment\nmetadata: {{name: probe, namespace: {ns}}}\n"
    "spec: {{model: {{name: zai-org/GLM-5.3}}, accelerator: {{type: H200}}, parallelism: {{expert: true}}}}\n"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ChartOperator:
    namespace: str
    addr: str
    service: str
    config: str
    secret: str
    readiness_port: int
    proc: subprocess.Popen[bytes]

    @property
    def hostname(self) -> str:
        return f"{self.service}.{self.namespace}.svc"


def _rendered(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [cluster.helm, "template", RELEASE, str(REPO / "charts" / "glmops"), "-n", namespace, *TEMPLATE_FLAGS,
         "--set", f"watchNamespaces={{{namespace}}}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def _config_names(kubectl: Kubectl) -> set[str]:
    out = kubectl.run("get", ",".join(CONFIG_KINDS), "-o", "name").stdout
    return set(out.split())


def _start(cluster: Cluster, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "kopf"), "run", *args, "-m", "glm_operator.handlers"],
        env={**os.environ, "KUBECONFIG": cluster.kubeconfig, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def chart_setup(
    cluster: Cluster, kubectl: Kubectl, crd_installed: None, namespace: str
) -> Iterator[tuple[dict[str, str], str, str]]:
    """The chart's Service (routed to a fresh loopback address) and configurations applied; the operator's env."""
    docs = _rendered(cluster, namespace)
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-webhook"))
    configs = [d for d in docs if d["kind"].lower() in CONFIG_KINDS]
    env = {e["name"]: e["value"] for e in next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"][
        "spec"]["containers"][0]["env"] if "value" in e}  # fmt: skip
    addr = f"127.0.43.{random.randint(2, 250)}"
    # Stand-in for kube-proxy: the Service routes to the operator's address, on the Service's port.
    service["spec"] = {"type": "ExternalName", "externalName": addr, "ports": service["spec"]["ports"]}
    kubectl.apply(service)
    for config in configs:
        kubectl.apply(config)
    env.update(GLMOPS_WEBHOOK_ADDR=addr, GLMOPS_WEBHOOK_PORT="443", GLMOPS_READINESS_PORT=str(_free_port()),
               GLMOPS_WEBHOOK_CERT_RESYNC_SECONDS="2", GLMOPS_CATALOG_CONFIGMAP="", GLMOPS_METRICS_PORT="")  # fmt: skip
    name = configs[0]["metadata"]["name"]
    try:
        yield env, service["metadata"]["name"], name
    finally:
        for kind in CONFIG_KINDS:
            kubectl.run("delete", kind, name, "--ignore-not-found", check=False)


@pytest.fixture
def chart_operator(
    cluster: Cluster, namespace: str, chart_setup: tuple[dict[str, str], str, str]
) -> Iterator[ChartOperator]:
    env, service, config = chart_setup
    proc = _start(
        cluster, env, ARTIFACTS / f"chart-operator-{namespace}.log", "--standalone", f"--namespace={namespace}"
    )
    secret = env["GLMOPS_WEBHOOK_SECRET"].partition("/")[2]
    try:
        yield ChartOperator(
            namespace, env["GLMOPS_WEBHOOK_ADDR"], service, config, secret, int(env["GLMOPS_READINESS_PORT"]), proc
        )
    finally:
        _stop(proc)


def _ca_bundles(kubectl: Kubectl, name: str) -> list[str]:
    return [kubectl.get(kind, name)["webhooks"][0]["clientConfig"].get("caBundle", "") for kind in CONFIG_KINDS]


def _secret_ca(kubectl: Kubectl, op: ChartOperator) -> str:
    data: dict[str, str] = kubectl.get("secret", op.secret, op.namespace)["data"]
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    return data["ca.crt"]


def _refused_through_the_api_server(kubectl: Kubectl, namespace: str) -> bool:
    out = kubectl.run("apply", "--dry-run=server", "-f", "-", input=REFUSED.format(ns=namespace), check=False)
    assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in out.stderr, out.stderr
    assert "spec.parallelism.expert" in out.stderr
    return True


def _served_serial(op: ChartOperator, ca_pem: bytes) -> int:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection((op.addr, 443), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=op.hostname) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _operator_fields(kubectl: Kubectl, kind: str, name: str) -> list[str]:
    """What the operator's writes (every manager but kubectl's) set in the object: caBundle and nothing else."""
    obj = json.loads(kubectl.run("get", kind, name, "-o", "json", "--show-managed-fields").stdout)
    written = []
    for entry in obj["metadata"]["managedFields"]:
        if not entry["manager"].startswith("kubectl"):
            fields = json.dumps(entry["fieldsV1"], sort_keys=True)
            assert entry["operation"] == "Update" and "f:caBundle" in fields, fields
            assert not any(f in fields for f in ("f:service", "f:rules", "f:failurePolicy", "f:metadata")), fields
            written.append(fields)
    return written


def _ready(op: ChartOperator) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.readiness_port}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:  # refused, or 503 (HTTPError): not ready yet
        return False


def test_chart_mode_fills_the_ca_bundle_serves_through_the_service_and_never_writes_configurations(
    kubectl: Kubectl, chart_operator: ChartOperator, tmp_path: Path
) -> None:
    op = chart_operator
    others_before = _config_names(kubectl)
    ca = eventually(lambda: _secret_ca(kubectl, op), timeout=60, what="the operator to create the certificate Secret")
    eventually(lambda: _ca_bundles(kubectl, op.config) == [ca, ca], timeout=60, what="caBundle filled by name")
    eventually(lambda: _refused_through_the_api_server(kubectl, op.namespace), timeout=60, what="admission")
    eventually(lambda: _ready(op), timeout=30, what="/readyz")
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(ca))
    message = check(f"https://{op.addr}/glmops-validate", str(tmp_path / "ca.crt"), hostname=op.hostname)
    assert "(rule " in message

    # The configurations are the chart's: the operator changed nothing in them but caBundle, and made no other.
    for kind in CONFIG_KINDS:
        assert len(_operator_fields(kubectl, kind, op.config)) == 1
    assert _config_names(kubectl) == others_before

    # A new certificate (forced: the Secret deleted) is picked up by the running process, without a restart.
    old_serial = _served_serial(op, base64.b64decode(ca))
    kubectl.run("delete", "secret", op.secret, "-n", op.namespace)
    new_ca = eventually(
        lambda: (c := _secret_ca(kubectl, op)) != ca and c, timeout=60, what="a new CA in the recreated Secret"
    )
    eventually(lambda: _ca_bundles(kubectl, op.config) == [new_ca, new_ca], timeout=60, what="the new caBundle")
    eventually(
        lambda: _served_serial(op, base64.b64decode(new_ca)) != old_serial, timeout=30, what="the new certificate"
    )
    eventually(lambda: _refused_through_the_api_server(kubectl, op.namespace), timeout=60, what="admission after")
    assert op.proc.poll() is None, "the operator reloaded the certificate; it did not exit"

    # Shutdown leaves the configurations in place (a managed kopf would strip them).
    op.proc.send_signal(signal.SIGTERM)
    op.proc.wait(timeout=30)
    assert _ca_bundles(kubectl, op.config) == [new_ca, new_ca]
    assert _config_names(kubectl) == others_before


def test_a_second_replica_uses_the_certificate_the_first_created(
    cluster: Cluster, kubectl: Kubectl, chart_operator: ChartOperator
) -> None:
    op = chart_operator
    ca = eventually(lambda: _secret_ca(kubectl, op), timeout=60, what="the certificate Secret")
    version = kubectl.get("secret", op.secret, op.namespace)["metadata"]["resourceVersion"]
    env = {
        "KUBECONFIG": cluster.kubeconfig,
        "GLMOPS_WEBHOOK_SERVICE": f"{op.namespace}/{op.service}",
        "GLMOPS_WEBHOOK_SECRET": f"{op.namespace}/{op.secret}",
        "GLMOPS_WEBHOOK_SECRET_OWNED": "true",
        "GLMOPS_WEBHOOK_INJECT_CA_INTO": f"{op.config},{op.config}",
    }
    code = (
        "import os; from glm_operator.k8s.webhook_certs import CertificateSource, sync_certificates;"
        "import datetime; s = CertificateSource.from_env(os.environ);"
        "print(sync_certificates(s, datetime.datetime.now(datetime.UTC)).ca_bundle.hex())"
    )
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-c", code],
        env={**os.environ, **env}, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    assert bytes.fromhex(out) == base64.b64decode(ca)
    assert kubectl.get("secret", op.secret, op.namespace)["metadata"]["resourceVersion"] == version


def test_a_replica_paused_by_peering_still_answers_admissions(
    cluster: Cluster, kubectl: Kubectl, namespace: str, chart_setup: tuple[dict[str, str], str, str], tmp_path: Path
) -> None:
    env, service, _ = chart_setup
    kubectl.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "glmops"}}, "-n", namespace)
    old_addr = f"127.0.44.{random.randint(2, 250)}"
    old_log, new_log = ARTIFACTS / f"{namespace}-old.log", ARTIFACTS / f"{namespace}-new.log"
    args = ("--peering=glmops", f"--namespace={namespace}")
    old_env = {**env, "GLMOPS_WEBHOOK_ADDR": old_addr, "GLMOPS_READINESS_PORT": str(_free_port())}
    # The higher-priority replica first, so the other finds it at its start and pauses at once.
    replicas = [_start(cluster, {**env, "GLMOPS_PEERING_PRIORITY": "200"}, new_log, *args)]
    try:
        eventually(lambda: "webhook server: serving" in new_log.read_text(), timeout=90, what="the active replica")
        replicas.append(_start(cluster, {**old_env, "GLMOPS_PEERING_PRIORITY": "100"}, old_log, *args))
        secret = env["GLMOPS_WEBHOOK_SECRET"].partition("/")[2]
        ca = eventually(lambda: kubectl.get("secret", secret, namespace)["data"]["ca.crt"], timeout=60)
        (tmp_path / "ca.crt").write_bytes(base64.b64decode(ca))
        hostname = f"{service}.{namespace}.svc"

        # The paused replica, on its own address, and the active one, through the API server and the Service.
        def paused_answers() -> str:
            try:
                return check(f"https://{old_addr}/glmops-validate", str(tmp_path / "ca.crt"), hostname=hostname)
            except (httpx.HTTPError, OSError) as err:  # not listening yet
                raise AssertionError(err) from err

        message = eventually(paused_answers, timeout=60, what="the paused replica's webhook")
        assert "(rule " in message
        eventually(lambda: _refused_through_the_api_server(kubectl, namespace), timeout=60, what="admission")
        # kopf starts a replica paused and logs only the change: the older one was paused all along if it
        # resumes only once the newer one is gone.
        assert "Resuming operations" not in old_log.read_text()
        _stop(replicas[0])
        eventually(lambda: "Resuming operations" in old_log.read_text(), timeout=90, what="the older replica to resume")
    finally:
        for proc in replicas:
            _stop(proc)


def test_with_client_auth_the_replica_is_ready_admits_through_the_service_and_answers_no_stranger(
    cluster: Cluster, kubectl: Kubectl, namespace: str, chart_setup: tuple[dict[str, str], str, str], tmp_path: Path
) -> None:
    env, service, config = chart_setup
    # webhook.clientAuth: the API server's webhook client CA (mounted by the chart; a local file here) and its name.
    env = {**env, CA_ENV: str(cluster.webhook_client_ca), NAMES_ENV: "kube-apiserver-webhook-client"}
    log = ARTIFACTS / f"chart-operator-client-auth-{namespace}.log"
    proc = _start(cluster, env, log, "--standalone", f"--namespace={namespace}")
    secret = env["GLMOPS_WEBHOOK_SECRET"].partition("/")[2]
    readiness = int(env["GLMOPS_READINESS_PORT"])
    op = ChartOperator(namespace, env["GLMOPS_WEBHOOK_ADDR"], service, config, secret, readiness, proc)
    try:
        ca = eventually(lambda: _secret_ca(kubectl, op), timeout=60, what="the certificate Secret")
        eventually(lambda: _ca_bundles(kubectl, op.config) == [ca, ca], timeout=60, what="caBundle filled by name")
        # The API server presents its client certificate to a Service clientConfig too (its kubeconfig user "*").
        eventually(lambda: _refused_through_the_api_server(kubectl, op.namespace), timeout=60, what="admission")
        eventually(lambda: _ready(op), timeout=30, what="/readyz, though the server answers no client of its own")
        (tmp_path / "ca.crt").write_bytes(base64.b64decode(ca))
        url = f"https://{op.addr}/glmops-validate"
        with pytest.raises((httpx.HTTPError, ssl.SSLError, OSError)):
            check(url, str(tmp_path / "ca.crt"), hostname=op.hostname)  # helm test's usual check has no certificate
        assert "got no answer" in check_client_auth(url, str(tmp_path / "ca.crt"), hostname=op.hostname)
        assert "webhook refused a request" not in log.read_text()
    finally:
        _stop(proc)
