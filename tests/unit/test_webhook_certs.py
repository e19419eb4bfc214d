"""The webhook certificate: generated once, renewed before it expires, trusted across a CA change."""

from __future__ import annotations

import base64
import datetime
import ssl
import tempfile
from pathlib import Path

import pytest
from cryptography import x509

from glm_operator.render.webhook_certs import (
    CA_LIFETIME,
    SERVING_LIFETIME,
    CertificateError,
    Renewal,
    from_secret_data,
    generate,
    not_after,
    renewal_needed,
    service_dns_names,
    to_secret_data,
)

NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)  # OpenSSL checks validity against the real clock
NAMES = service_dns_names("glmops-webhook", "ops")


def _verifies(bundle: bytes, cert: bytes, key: bytes, hostname: str) -> bool:
    """A TLS client trusting `bundle` accepts a server presenting `cert` for `hostname` (checked by OpenSSL)."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c").write_bytes(cert)
        (Path(tmp) / "k").write_bytes(key)
        server.load_cert_chain(Path(tmp) / "c", Path(tmp) / "k")
    client = ssl.create_default_context(cadata=bundle.decode())
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side, out, peer_in in ((cli, c_out, s_in), (srv, s_out, c_in)):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                return False
            peer_in.write(out.read())
    try:
        cli.do_handshake()
    except ssl.SSLError:
        return False
    return True


def test_service_names_include_the_one_the_api_server_uses() -> None:
    assert "glmops-webhook.ops.svc" in NAMES and NAMES[0] == "glmops-webhook"


def test_a_fresh_certificate_is_trusted_for_the_service_name_and_not_for_another() -> None:
    certs = generate(NAMES, NOW)
    assert _verifies(certs.ca_bundle, certs.tls_cert, certs.tls_key, "glmops-webhook.ops.svc")
    assert not _verifies(certs.ca_bundle, certs.tls_cert, certs.tls_key, "other.ops.svc")
    assert not _verifies(generate(NAMES, NOW).ca_bundle, certs.tls_cert, certs.tls_key, "glmops-webhook.ops.svc")


def test_a_fresh_certificate_needs_nothing_and_lives_its_lifetime() -> None:
    certs = generate(NAMES, NOW)
    assert renewal_needed(certs, NAMES, NOW) is Renewal.NONE
    assert not_after(certs.tls_cert) == NOW + SERVING_LIFETIME
    assert not_after(certs.ca_bundle) == NOW + CA_LIFETIME


@pytest.mark.parametrize(
    "later, expected",
    [
        (datetime.timedelta(days=200), Renewal.NONE),
        (datetime.timedelta(days=250), Renewal.SERVING),  # less than a third of 365 days left
        (datetime.timedelta(days=400), Renewal.SERVING),  # expired
        (datetime.timedelta(days=2500), Renewal.CA),  # less than a third of 10 years left on the CA
    ],
)
def test_renewal_comes_before_expiry(later: datetime.timedelta, expected: Renewal) -> None:
    assert renewal_needed(generate(NAMES, NOW), NAMES, NOW + later) is expected


def test_nothing_or_garbage_means_a_new_ca() -> None:
    assert renewal_needed(None, NAMES, NOW) is Renewal.CA
    certs = generate(NAMES, NOW)
    broken = from_secret_data({**to_secret_data(certs), "ca.crt": base64.b64encode(b"junk").decode()}, "s")
    assert renewal_needed(broken, NAMES, NOW) is Renewal.CA


def test_a_serving_certificate_for_other_names_or_from_another_ca_is_renewed() -> None:
    certs = generate(NAMES, NOW)
    assert renewal_needed(certs, service_dns_names("renamed", "ops"), NOW) is Renewal.SERVING
    foreign = generate(NAMES, NOW)
    mixed = from_secret_data({**to_secret_data(certs), "tls.crt": to_secret_data(foreign)["tls.crt"]}, "s")
    assert renewal_needed(mixed, NAMES, NOW) is Renewal.SERVING


def test_a_renewed_serving_certificate_keeps_the_ca_so_the_api_server_needs_no_new_bundle() -> None:
    certs = generate(NAMES, NOW - datetime.timedelta(days=300))
    assert renewal_needed(certs, NAMES, NOW) is Renewal.SERVING
    renewed = generate(NAMES, NOW, renewal=Renewal.SERVING, current=certs)
    assert renewed.ca_bundle == certs.ca_bundle and renewed.tls_cert != certs.tls_cert
    assert _verifies(certs.ca_bundle, renewed.tls_cert, renewed.tls_key, "glmops-webhook.ops.svc")
    assert renewal_needed(renewed, NAMES, NOW) is Renewal.NONE


def test_a_new_ca_keeps_the_previous_one_trusted_so_replicas_not_yet_reloaded_keep_answering() -> None:
    first = generate(NAMES, NOW - datetime.timedelta(days=2500))
    old = generate(NAMES, NOW - datetime.timedelta(days=1), renewal=Renewal.SERVING, current=first)
    assert renewal_needed(old, NAMES, NOW) is Renewal.CA
    new = generate(NAMES, NOW, renewal=Renewal.CA, current=old)
    assert len(x509.load_pem_x509_certificates(new.ca_bundle)) == 2
    assert _verifies(new.ca_bundle, new.tls_cert, new.tls_key, "glmops-webhook.ops.svc")
    assert _verifies(new.ca_bundle, old.tls_cert, old.tls_key, "glmops-webhook.ops.svc")
    assert not _verifies(old.ca_bundle, new.tls_cert, new.tls_key, "glmops-webhook.ops.svc")
    # The bundle never grows past the current CA and one predecessor.
    newer = generate(NAMES, NOW + datetime.timedelta(days=1), renewal=Renewal.CA, current=new)
    assert len(x509.load_pem_x509_certificates(newer.ca_bundle)) == 2


def test_an_expired_previous_ca_is_dropped_from_the_bundle() -> None:
    old = generate(NAMES, NOW)
    new = generate(NAMES, NOW + CA_LIFETIME + datetime.timedelta(days=1), current=old)
    assert len(x509.load_pem_x509_certificates(new.ca_bundle)) == 1


def test_secret_data_round_trips() -> None:
    certs = generate(NAMES, NOW)
    assert from_secret_data(to_secret_data(certs), "ops/s") == certs


def test_a_secret_missing_keys_names_them_and_says_what_it_needs() -> None:
    with pytest.raises(CertificateError, match=r"Secret ops/given: data.ca.crt missing.*kubernetes.io/tls with ca.crt"):
        from_secret_data({"tls.crt": "eA==", "tls.key": "eA=="}, "ops/given", keys=("ca.crt", "tls.crt", "tls.key"))
    with pytest.raises(CertificateError, match=r"data.tls.key is not base64"):
        from_secret_data({"ca.crt": "eA==", "ca.key": "eA==", "tls.crt": "eA==", "tls.key": "%%%"}, "ops/s")


def test_no_names_is_refused() -> None:
    with pytest.raises(CertificateError, match="at least one DNS name"):
        generate([], NOW)
