"""The webhook verifies the API server's client certificate, on the real local control plane.

`cluster/up.sh` starts kube-apiserver as an administrator configures it for webhooks that verify their callers: an
admission configuration whose kubeconfig holds a client certificate from a CA of its own. The operator runs with
that CA (GLMOPS_WEBHOOK_CLIENT_CA) and the API server certificate's name (GLMOPS_WEBHOOK_CLIENT_NAMES), in place of
the session's; admission through the API server goes on, and direct callers without that certificate get nothing.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from glm_operator.k8s.webhook_client_auth import CA_ENV, NAMES_ENV
from tests.conftest import TEST_WEBHOOK_PORT, OperatorProcess
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.client_certs import Issuer
from tests.support.cluster import ADMISSION_PROBE, REPO, Cluster, Kubectl, eventually
from tests.support.hostile_reviews import post_valid

pytestmark = pytest.mark.cluster
PORT = int(TEST_WEBHOOK_PORT)
API_SERVER_NAME = "kube-apiserver-webhook-client"  # cluster/certs.sh: apiserver-webhook-client.crt
HANDSHAKE_FAILED = (ssl.SSLError, ConnectionResetError, BrokenPipeError)


@pytest.fixture(scope="module")
def mtls_operator(cluster: Cluster, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The operator verifying client certificates, in place of the session's (two operators would fight)."""
    flag = f"--admission-control-config-file={cluster.state_dir / 'admission.yaml'}"
    apiserver_pid = (cluster.state_dir / "pids" / "kube-apiserver.pid").read_text().strip()
    args = Path(f"/proc/{apiserver_pid}/cmdline").read_bytes().split(b"\0")
    assert flag.encode() in args, "cluster/up.sh restarts an API server started without it; was it run?"
    operator.stop()
    env = {CA_ENV: str(cluster.webhook_client_ca), NAMES_ENV: API_SERVER_NAME}
    verifying = OperatorProcess(cluster, extra_env=env, name="operator-client-auth")
    try:
        verifying.start()  # returns once the API server's admissions reach the webhooks
        yield verifying
    finally:
        verifying.stop()
        operator.start()


def _post(cluster: Cluster, client: tuple[Path, Path] | None) -> tuple[int, bytes]:
    """A valid review straight to the webhook port, over TLS verified with the cluster CA, with `client`'s cert."""
    context = ssl.create_default_context(cafile=str(cluster.ca_cert))
    context.check_hostname = False  # the webhook certificate names the host the API server dials
    return post_valid(PORT, context, client, timeout=30)


def test_admission_through_the_api_server_still_refuses_repairs_and_admits(
    kubectl: Kubectl, namespace: str, mtls_operator: OperatorProcess
) -> None:
    refused = kubectl.run("apply", "-f", "-", input=ADMISSION_PROBE.format(ns=namespace), check=False)
    assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in refused.stderr, refused.stderr
    assert "spec.parallelism.expert" in refused.stderr
    # The mutating webhook too: a repair is stored with its record.
    result = kubectl.run("apply", "-n", namespace, "-f", str(REPO / "samples" / "vllm-63170-rtx-pp2-auto.yaml"))
    assert "Warning: glmops repaired spec.engine.env: 38,40" in result.stderr, result.stderr
    stored = kubectl.get("glmd", "glm53-nvfp4-rtx-pp2tp8-auto", namespace)
    assert "glmops.dev/remediations" in stored["metadata"]["annotations"]
    kubectl.apply(B("admitted").accelerator("H200").tensor(8).build(), "-n", namespace)

    def validated() -> bool:
        conditions = kubectl.get("glmd", "admitted", namespace).get("status", {}).get("conditions", [])
        return any(c["type"] == "Validated" and c["status"] == "True" for c in conditions)

    eventually(validated, timeout=60, what="the admitted GLMDeployment to be Validated")
    assert "webhook refused a request" not in mtls_operator.log(), "the API server's calls were never refused"


def test_a_client_without_a_certificate_fails_the_handshake(cluster: Cluster, mtls_operator: OperatorProcess) -> None:
    with pytest.raises(HANDSHAKE_FAILED):
        _post(cluster, None)


def test_a_certificate_from_another_ca_fails_the_handshake(
    cluster: Cluster, mtls_operator: OperatorProcess, tmp_path: Path
) -> None:
    # The cluster CA's administrator (system:masters) is no webhook caller: only the webhook client CA counts.
    certs = cluster.state_dir / "certs"
    with pytest.raises(HANDSHAKE_FAILED):
        _post(cluster, (certs / "admin.crt", certs / "admin.key"))
    # Nor is a certificate with the API server's very name from a CA of someone else's.
    with pytest.raises(HANDSHAKE_FAILED):
        _post(cluster, Issuer.new("impostor-ca").write_client(tmp_path, API_SERVER_NAME))


def test_a_certificate_from_the_ca_with_another_name_is_refused_with_403(
    cluster: Cluster, mtls_operator: OperatorProcess, tmp_path: Path
) -> None:
    certs = cluster.state_dir / "certs"
    issuer = Issuer.load(certs / "webhook-client-ca.crt", certs / "webhook-client-ca.key")
    status, body = _post(cluster, issuer.write_client(tmp_path / "other", "someone-else", ("other.example.com",)))
    assert status == 403, body
    assert b"client certificate names (CN=someone-else, DNS=other.example.com)" in body
    assert API_SERVER_NAME.encode() not in body, "the allowed names are not disclosed"
    assert "webhook refused a request from 127.0.0.1: 403" in mtls_operator.log()
    # The same CA with the allowed name is answered: the 403 was the name, not the request.
    status, body = _post(cluster, issuer.write_client(tmp_path / "allowed", API_SERVER_NAME))
    assert status == 200 and json.loads(body)["response"]["allowed"] is True, body
