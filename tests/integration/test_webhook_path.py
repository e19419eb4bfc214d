"""The API server calls an admission webhook served by a local process over HTTPS (URL clientConfig).

Admission in glmops depends on this path: kube-apiserver -> https://127.0.0.1:<port> with a CA bundle.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Kubectl

pytestmark = pytest.mark.cluster


def _make_certs(tmp: Path) -> tuple[Path, Path, Path]:
    def run(*args: str) -> None:
        subprocess.run(args, cwd=tmp, check=True, capture_output=True)

    run(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=webhook-test-ca",
        "-days",
        "1",
    )
    run(
        "openssl",
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (tmp / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run(
        "openssl",
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "1",
        "-extfile",
        "ext",
    )
    return tmp / "ca.crt", tmp / "tls.crt", tmp / "tls.key"


class _Review(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        self.seen.append(request)
        data = (request.get("object") or {}).get("data") or {}
        allowed = "forbidden" not in data
        response: dict[str, Any] = {"uid": request["uid"], "allowed": allowed, "warnings": ["probe webhook saw this"]}
        if not allowed:
            response["status"] = {"code": 422, "message": "data.forbidden: refused by the probe webhook"}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def https_webhook(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    ca, crt, key = _make_certs(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Review)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], ca.read_bytes()
    server.shutdown()


def test_apiserver_calls_a_local_https_webhook_and_honours_its_answer(
    kubectl: Kubectl, namespace: str, https_webhook: tuple[int, bytes]
) -> None:
    port, ca = https_webhook
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"probe-{namespace}"},
        "webhooks": [
            {
                "name": "probe.glmops.dev",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/validate",
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
            }
        ],
    }
    kubectl.apply(config)
    try:
        ok = kubectl.run("create", "configmap", "fine", "-n", namespace, "--from-literal=a=1")
        assert "probe webhook saw this" in ok.stderr, "warnings from the webhook reach kubectl"
        refused = kubectl.run("create", "configmap", "nope", "-n", namespace, "--from-literal=forbidden=1", check=False)
        assert refused.returncode != 0
        assert "data.forbidden: refused by the probe webhook" in refused.stderr
        assert any(r["name"] == "nope" and r["namespace"] == namespace for r in _Review.seen)
    finally:
        kubectl.run("delete", "validatingwebhookconfiguration", f"probe-{namespace}", check=False)


def test_webhook_that_is_down_fails_closed(kubectl: Kubectl, namespace: str, https_webhook: tuple[int, bytes]) -> None:
    _, ca = https_webhook
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"dead-{namespace}"},
        "webhooks": [
            {
                "name": "dead.glmops.dev",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{dead}/validate",
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 3,
            }
        ],
    }
    kubectl.apply(config)
    try:
        refused = kubectl.run("create", "configmap", "x", "-n", namespace, "--from-literal=a=1", check=False)
        assert refused.returncode != 0 and "failed calling webhook" in refused.stderr
    finally:
        kubectl.run("delete", "validatingwebhookconfiguration", f"dead-{namespace}", check=False)
