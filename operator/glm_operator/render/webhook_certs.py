"""The admission webhook's CA and serving certificate: generation, renewal decisions, Secret encoding.

Pure: time comes in as an argument, keys come from `cryptography`; the Kubernetes side (reading and writing
the Secret, patching the configurations' caBundle) is `k8s/webhook_certs.py`.

The CA lives 10 years and the serving certificate 1 year; each is renewed once less than a third of its life
is left. A new serving certificate is signed by the same CA, so the API server's caBundle does not change.
A new CA goes first in the trust bundle (`ca.crt`), followed by the previous CA while that one is still valid,
so replicas still serving the previous certificate keep being trusted until they load the new one.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = datetime.timedelta(days=3650)
SERVING_LIFETIME = datetime.timedelta(days=365)
CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Certificates start this long before `now`, so an API server whose clock is a little behind accepts them."""

SECRET_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")


class CertificateError(ValueError):
    """Certificate material that cannot be used, with what is wrong and how to fix it."""


@dataclass(frozen=True)
class WebhookCertificates:
    """PEM material: the trust bundle (current CA first), the CA key, the serving certificate and its key."""

    ca_bundle: bytes
    ca_key: bytes
    tls_cert: bytes
    tls_key: bytes


class Renewal(Enum):
    NONE = "none"
    SERVING = "serving certificate"
    CA = "CA and serving certificate"


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service clientConfig (it uses <svc>.<ns>.svc)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_ca(common_name: str, now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _new_serving(
    dns_names: Sequence[str], ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, now: datetime.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + SERVING_LIFETIME, ca.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def generate(
    dns_names: Sequence[str],
    now: datetime.datetime,
    *,
    renewal: Renewal = Renewal.CA,
    current: WebhookCertificates | None = None,
) -> WebhookCertificates:
    """New material: a new CA and serving certificate, or (Renewal.SERVING) a serving certificate from `current`'s CA.

    With a new CA, the CAs of `current`'s bundle that are still valid at `now` stay in the bundle after it.
    """
    if not dns_names:
        raise CertificateError("the webhook certificate needs at least one DNS name (the webhook Service's)")
    if renewal is Renewal.SERVING and current is not None:
        bundle = current.ca_bundle
        ca = x509.load_pem_x509_certificates(current.ca_bundle)[0]
        loaded = serialization.load_pem_private_key(current.ca_key, password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise CertificateError("ca.key: not an EC private key; delete the Secret to start a new CA")
        ca_key, ca_key_pem = loaded, current.ca_key
    else:
        ca, ca_key = _new_ca(f"glmops-webhook-ca-{now:%Y%m%d%H%M%S}", now)
        ca_key_pem = _key_pem(ca_key)
        kept = _valid_certificates(current.ca_bundle, now) if current is not None else []
        bundle = b"".join([_pem(ca), *(_pem(c) for c in kept[:1])])
    serving, serving_key = _new_serving(dns_names, ca, ca_key, now)
    return WebhookCertificates(bundle, ca_key_pem, _pem(serving), _key_pem(serving_key))


def _valid_certificates(pem: bytes, now: datetime.datetime) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []
    return [c for c in certs if c.not_valid_before_utc <= now < c.not_valid_after_utc]


def _nearly_expired(cert: x509.Certificate, now: datetime.datetime) -> bool:
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - now < life / 3


def renewal_needed(current: WebhookCertificates | None, dns_names: Sequence[str], now: datetime.datetime) -> Renewal:
    """What `current` needs at `now` to keep serving `dns_names`: nothing, a new serving certificate, or a new CA."""
    if current is None:
        return Renewal.CA
    try:
        ca = x509.load_pem_x509_certificates(current.ca_bundle)[0]
        serving = x509.load_pem_x509_certificate(current.tls_cert)
        serialization.load_pem_private_key(current.ca_key, password=None)
    except ValueError:
        return Renewal.CA
    if _nearly_expired(ca, now) or not ca.not_valid_before_utc <= now:
        return Renewal.CA
    try:
        serving.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return Renewal.SERVING
    if _nearly_expired(serving, now) or set(_sans(serving)) != set(dns_names):
        return Renewal.SERVING
    return Renewal.NONE


def _sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.DNSName))


def not_after(cert_pem: bytes) -> datetime.datetime:
    """When the first certificate of `cert_pem` expires."""
    return x509.load_pem_x509_certificates(cert_pem)[0].not_valid_after_utc


def from_secret_data(
    data: Mapping[str, str] | None, secret: str, *, keys: Sequence[str] = SECRET_KEYS
) -> WebhookCertificates:
    """Decode a Secret's data; a missing or undecodable key is an error that names the Secret and the key."""
    data = data or {}
    missing = [k for k in keys if not data.get(k)]
    if missing:
        raise CertificateError(
            f"Secret {secret}: data.{', data.'.join(missing)} missing; a webhook certificate Secret needs "
            f"{', '.join(keys)} (kubernetes.io/tls with ca.crt)"
        )
    decoded: dict[str, bytes] = {}
    for key in SECRET_KEYS:
        try:
            decoded[key] = base64.b64decode(data.get(key) or "", validate=True)
        except binascii.Error as err:
            raise CertificateError(f"Secret {secret}: data.{key} is not base64: {err}") from err
    return WebhookCertificates(decoded["ca.crt"], decoded["ca.key"], decoded["tls.crt"], decoded["tls.key"])


def to_secret_data(certs: WebhookCertificates) -> dict[str, str]:
    values = (certs.ca_bundle, certs.ca_key, certs.tls_cert, certs.tls_key)
    return {k: base64.b64encode(v).decode("ascii") for k, v in zip(SECRET_KEYS, values, strict=True)}
