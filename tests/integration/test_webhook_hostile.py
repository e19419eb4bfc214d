"""Hostile requests sent straight to the running operator's webhook port: each gets its 4xx, and admission goes on.

The operator runs as in every integration test (`kopf run` on our handlers, the session's `operator` fixture);
the requests skip the API server, as a person or program on the pod network could.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import time

import pytest

from tests.conftest import TEST_WEBHOOK_PORT, OperatorProcess
from tests.support.cluster import Cluster, Kubectl
from tests.support.hostile_reviews import HOSTILE, JSON, VALID, refusal_status, review

pytestmark = pytest.mark.cluster
PORT = int(TEST_WEBHOOK_PORT)


def _context(cluster: Cluster) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cluster.ca_cert))
    context.check_hostname = False  # the webhook certificate names the host the API server dials
    return context


def post(cluster: Cluster, path: str, body: bytes, content_type: str = JSON) -> tuple[int, bytes]:
    connection = http.client.HTTPSConnection("127.0.0.1", PORT, context=_context(cluster), timeout=30)
    try:
        connection.putrequest("POST", path)
        connection.putheader("Content-Type", content_type)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        # The server may answer an oversized body before taking all of it: its answer is still there.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.send(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_hostile_requests_get_a_4xx_and_the_operator_keeps_admitting(
    cluster: Cluster, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    log_before = len(operator.log())
    answers = {}
    for case in HOSTILE:
        status, body = post(cluster, case.path, case.body, case.content_type)
        answers[case.name] = refusal_status(status, body)
        assert answers[case.name] == case.status, f"{case.name}: {status} {body[:300]!r}"
        assert len(body) < 1000, case.name
    assert operator.proc is not None and operator.proc.poll() is None, "the operator is still running"

    status, body = post(cluster, "/glmops-validate", VALID)
    assert status == 200 and json.loads(body)["response"]["allowed"] is True
    manifest = json.loads(VALID)["request"]["object"]
    manifest["metadata"]["namespace"] = namespace
    applied = kubectl.run("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert applied.returncode == 0, applied.stderr
    manifest["spec"]["replicas"] = 2  # an UPDATE review carries oldObject too; a dry run sets dryRun
    for extra in (["--dry-run=server"], []):
        updated = kubectl.run("apply", *extra, "-f", "-", input=json.dumps(manifest), check=False)
        assert updated.returncode == 0, updated.stderr

    new_log = operator.log()[log_before:]
    assert "Traceback" not in new_log, new_log[-3000:]
    assert new_log.count("webhook refused a request") >= len(HOSTILE), "each refusal is one log line"


def test_a_secret_flag_and_a_forged_log_line_never_reach_the_operator_log_or_the_refusal(
    cluster: Cluster, operator: OperatorProcess
) -> None:
    """Straight to the port (the API server would refuse such a name): kopf's own logging of the review included."""
    secret = f"sk-live-{time.monotonic_ns()}"
    forged = "[2026-12-02 17:00:00,000] kopf.objects [INFO    ] [default/victim] Handler 'x' succeeded."
    obj = json.loads(VALID)["request"]["object"]
    obj["metadata"]["name"] = f"evil\n{forged}"
    obj["spec"]["engine"] = {"extraArgs": [f"--api_key={secret}", "--api-key", secret]}
    log_before = len(operator.log())
    for path in ("/glmops-repair", "/glmops-validate"):
        status, body = post(cluster, path, json.dumps(review(obj)).encode())
        assert status == 200 and secret not in body.decode(), body[:500]
    answer = json.loads(body)["response"]
    assert (
        answer["allowed"] is False and "spec.engine.extraArgs[0]: --api_key=<redacted>" in answer["status"]["message"]
    )
    time.sleep(1)  # kopf logs the outcome as it answers; let the pipe catch up
    new_log = operator.log()[log_before:]
    assert secret not in new_log
    assert not any(line.startswith(forged) for line in new_log.splitlines()), "a name forged a log line"


def test_a_body_that_never_arrives_is_cut_off_with_408(cluster: Cluster, operator: OperatorProcess) -> None:
    with (
        socket.create_connection(("127.0.0.1", PORT), timeout=30) as raw,
        _context(cluster).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(
            b"POST /glmops-validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"apiVersion": '
        )
        started = time.monotonic()
        status_line = tls.recv(200).split(b"\r\n")[0]
    assert status_line.startswith(b"HTTP/1.1 408"), status_line
    assert time.monotonic() - started < 20


def test_headers_that_never_finish_are_cut_off_with_408(cluster: Cluster, operator: OperatorProcess) -> None:
    with (
        socket.create_connection(("127.0.0.1", PORT), timeout=30) as raw,
        _context(cluster).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"POST /glmops-validate HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        started = time.monotonic()
        status_line = tls.recv(200).split(b"\r\n")[0]
        waited = time.monotonic() - started
        assert tls.recv(200) == b"", "the connection is closed after the 408"
    assert status_line.startswith(b"HTTP/1.1 408"), status_line
    assert 4 < waited < 15, f"cut off after {waited:.1f} s; the header deadline is 5 s"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["tls1.0", "tls1.1"])
def test_tls_before_1_2_is_refused(cluster: Cluster, operator: OperatorProcess, version: ssl.TLSVersion) -> None:
    context = _context(cluster)
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = version
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer the old protocol at all
    with socket.create_connection(("127.0.0.1", PORT), timeout=10) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="127.0.0.1").close()


def test_tls_1_2_is_accepted(cluster: Cluster, operator: OperatorProcess) -> None:
    context = _context(cluster)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", PORT), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.2"
