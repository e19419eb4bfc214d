"""The webhook's client authentication: the environment it reads, the names it allows, and the server it builds.

The server cases run glmops' webhook server on a loopback port with certificates made here: no cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import pytest

from glm_operator.k8s.webhook_check import check_client_auth
from glm_operator.k8s.webhook_client_auth import CA_ENV, NAMES_ENV, ClientAuth, ClientAuthError
from glm_operator.k8s.webhooks import (
    GuardedWebhookServer,
    SecretWebhookServer,
    webhook_answers,
    webhook_server_from_env,
)
from glm_operator.render.webhook_certs import WebhookCertificates, generate
from tests.support.client_certs import Issuer
from tests.support.hostile_reviews import post_valid
from tests.support.webhook_server import guarded_server, serve_while
from tests.unit.test_settings import CHART_ENV, _configured

API_SERVER = "kube-apiserver-webhook-client"


@pytest.fixture(scope="module")
def client_ca() -> Issuer:
    return Issuer.new("webhook-client-ca")


@pytest.fixture
def ca_file(tmp_path: Path, client_ca: Issuer) -> Path:
    path = tmp_path / "client-ca.crt"
    path.write_bytes(client_ca.pem)
    return path


# --- the environment --------------------------------------------------------------------------------------------


def test_unset_means_any_tls_client_as_before() -> None:
    assert ClientAuth.from_env({}) is None
    assert ClientAuth.from_env({CA_ENV: "  "}) is None


def test_the_ca_and_the_names_are_read_trimmed_and_case_folded(ca_file: Path, client_ca: Issuer) -> None:
    auth = ClientAuth.from_env({CA_ENV: str(ca_file), NAMES_ENV: " Kube-APIServer , ,other.example.com,"})
    assert auth is not None
    assert auth.names == {"kube-apiserver", "other.example.com"}
    assert auth.ca_pem == client_ca.pem.decode()


def _leaf(tmp_path: Path, client_ca: Issuer) -> str:
    cert, _ = client_ca.write_client(tmp_path / "leaf", API_SERVER)
    return str(cert)


@pytest.mark.parametrize(
    "make_path, message",
    [
        (lambda tmp, _: str(tmp / "missing.crt"), r"missing.crt: cannot be read \(No such file or directory\)"),
        (lambda tmp, _: str(tmp), r"cannot be read \(Is a directory\)"),
        (lambda tmp, _: _write(tmp / "empty.crt", b""), r"empty.crt: is empty; expected one or more -----BEGIN"),
        (lambda tmp, _: _write(tmp / "junk.crt", b"hello\n"), r"junk.crt: holds no readable PEM certificate"),
        (lambda tmp, _: _write(tmp / "big.crt", b"#" * (1024 * 1024 + 1)), r"big.crt: larger than 1024 KiB"),
        (_leaf, r"CN=kube-apiserver-webhook-client is not a CA certificate .* give the CA's certificate"),
    ],
    ids=["missing", "directory", "empty", "not-pem", "oversized", "client-certificate-not-ca"],
)
def test_an_unusable_ca_file_is_refused_naming_the_setting_and_the_path(
    tmp_path: Path, client_ca: Issuer, make_path: Callable[[Path, Issuer], str], message: str
) -> None:
    path = make_path(tmp_path, client_ca)
    with pytest.raises(ClientAuthError, match=rf"^{CA_ENV}: {path}") as err:
        ClientAuth.from_env({CA_ENV: path})
    assert err.match(message)


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_names_without_a_ca_are_refused_since_nothing_would_verify_them() -> None:
    with pytest.raises(ClientAuthError, match=f"{NAMES_ENV} is set but {CA_ENV} is not"):
        ClientAuth.from_env({NAMES_ENV: API_SERVER})


def test_a_bad_ca_stops_the_operator_at_start_up_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for env in ({"GLMOPS_WEBHOOK_HOST": "127.0.0.1"}, CHART_ENV):  # a local process and the chart's
        with pytest.raises(kopf.PermanentError, match=f"{CA_ENV}: {tmp_path}/none.crt: cannot be read"):
            _configured(monkeypatch, {**env, CA_ENV: str(tmp_path / "none.crt")})


@pytest.mark.parametrize("chart", [False, True], ids=["local", "chart"])
def test_both_servers_carry_the_client_authentication(ca_file: Path, chart: bool) -> None:
    env = {**(CHART_ENV if chart else {}), CA_ENV: str(ca_file), NAMES_ENV: API_SERVER}
    server = webhook_server_from_env(env)
    assert isinstance(server, SecretWebhookServer if chart else GuardedWebhookServer)
    assert server.client_auth is not None and server.client_auth.names == {API_SERVER}
    unset = webhook_server_from_env({**env, CA_ENV: "", NAMES_ENV: ""})
    assert unset is not None and unset.client_auth is None


# --- the names --------------------------------------------------------------------------------------------------

APISERVER_CERT = {
    "subject": ((("organizationName", "system:masters"),), (("commonName", API_SERVER),)),
    "subjectAltName": (("DNS", "apiserver.example.com"), ("IP Address", "10.0.0.1")),
}


@pytest.mark.parametrize(
    "names, peercert, refused",
    [
        ("", APISERVER_CERT, ""),
        (API_SERVER, APISERVER_CERT, ""),
        ("KUBE-APISERVER-WEBHOOK-CLIENT", APISERVER_CERT, ""),
        ("other,apiserver.example.com", APISERVER_CERT, ""),
        ("10.0.0.1", APISERVER_CERT, ""),
        ("system:masters", APISERVER_CERT, "names (CN=kube-apiserver-webhook-client, DNS=apiserver.example.com, "),
        ("other", {"subject": ()}, "names (none) are not among the names this webhook accepts"),
        ("", {}, "no verified client certificate"),
        ("", None, "no verified client certificate"),
    ],
    ids=["any-name", "common-name", "case", "dns-san", "ip-san", "organization", "no-names", "empty", "none"],
)
def test_a_certificate_is_allowed_by_its_common_name_or_an_alternative_name(
    ca_file: Path, names: str, peercert: dict[str, Any] | None, refused: str
) -> None:
    auth = ClientAuth.from_env({CA_ENV: str(ca_file), NAMES_ENV: names})
    assert auth is not None
    if refused:
        assert refused in auth.refusal(peercert)
        assert "kube-apiserver-webhook-client)" not in auth.refusal(peercert), "the allowed names stay private"
    else:
        assert auth.refusal(peercert) == ""


# --- the server -------------------------------------------------------------------------------------------------


async def _answer(review: Any, **_: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": True}}


def _post(port: int, serving: WebhookCertificates, client: tuple[Path, Path] | None) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=serving.ca_bundle.decode())
    context.check_hostname = False  # the certificate names localhost; the server listens on 127.0.0.1
    return post_valid(port, context, client, timeout=10)


def test_the_server_requires_a_certificate_from_the_ca_with_an_allowed_name(
    tmp_path: Path, ca_file: Path, client_ca: Issuer
) -> None:
    serving = generate(["localhost"], datetime.datetime.now(datetime.UTC))
    (tmp_path / "ca.crt").write_bytes(serving.ca_bundle)
    apiserver = client_ca.write_client(tmp_path / "clients", API_SERVER)
    other_name = client_ca.write_client(tmp_path / "clients", "someone-else")
    other_ca = Issuer.new("another-ca").write_client(tmp_path / "other", API_SERVER)
    auth = ClientAuth.from_env({CA_ENV: str(ca_file), NAMES_ENV: API_SERVER})

    async def scenario(port: int) -> None:
        status, body = await asyncio.to_thread(_post, port, serving, apiserver)
        assert status == 200 and json.loads(body)["response"]["allowed"] is True
        for client in (None, other_ca):  # no certificate; one from another CA: the handshake fails
            with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                await asyncio.to_thread(_post, port, serving, client)
        status, body = await asyncio.to_thread(_post, port, serving, other_name)
        assert status == 403 and b"CN=someone-else" in body
        # Readiness (the chart's /readyz) still tells a listening server with the right certificate.
        assert await webhook_answers(port, serving, "localhost", "127.0.0.1", client_auth=True) == ""
        stranger = generate(["localhost"], datetime.datetime.now(datetime.UTC))
        problem = await webhook_answers(port, stranger, "localhost", "127.0.0.1", client_auth=True)
        assert "CERTIFICATE_VERIFY_FAILED" in problem
        # helm test's check in this mode: the server's certificate verifies, and no answer without a certificate.
        url = f"https://127.0.0.1:{port}/glmops-validate"
        passed = await asyncio.to_thread(check_client_auth, url, str(tmp_path / "ca.crt"), hostname="localhost")
        assert "got no answer" in passed

    serve_while(guarded_server(tmp_path, serving, client_auth=auth), _answer, scenario)


def test_helm_tests_client_auth_check_fails_on_a_server_that_answers_anyone(tmp_path: Path) -> None:
    serving = generate(["localhost"], datetime.datetime.now(datetime.UTC))
    (tmp_path / "ca.crt").write_bytes(serving.ca_bundle)

    async def scenario(port: int) -> None:
        url = f"https://127.0.0.1:{port}/glmops-validate"
        with pytest.raises(RuntimeError, match="answered a client without a client certificate .*HTTP/1.1 200"):
            await asyncio.to_thread(check_client_auth, url, str(tmp_path / "ca.crt"), hostname="localhost")

    serve_while(guarded_server(tmp_path, serving, client_auth=None), _answer, scenario)
