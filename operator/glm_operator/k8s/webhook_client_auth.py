"""Who may call the webhook server: the API server's client certificate, where the cluster gives it one.

Off by default (any TLS client, as kube-apiserver presents no certificate unless its administrator configures one).
With GLMOPS_WEBHOOK_CLIENT_CA (a PEM file of CA certificates; the chart's `webhook.clientAuth.caConfigMap`) the
TLS handshake requires a client certificate signed by one of them; with GLMOPS_WEBHOOK_CLIENT_NAMES as well (a
comma-separated list; `webhook.clientAuth.names`) a request whose certificate carries none of those names, as its
subject's common name or a subject alternative name, is refused with 403 before the request is read.
A setting that cannot be used stops the operator at start-up with a message naming it (docs/security.md).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from glm_operator.rules.findings import clip

CA_ENV = "GLMOPS_WEBHOOK_CLIENT_CA"
NAMES_ENV = "GLMOPS_WEBHOOK_CLIENT_NAMES"
MAX_CA_BYTES = 1024 * 1024
"""A CA bundle is a few KiB; a larger file is a wrong path (a log, a binary), refused before it is parsed."""


class ClientAuthError(ValueError):
    """A client-certificate setting that cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True)
class ClientAuth:
    """The CA bundle client certificates must chain to, and the names one of which they must carry (empty: any)."""

    ca_file: str
    ca_pem: str
    names: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ClientAuth | None:
        """GLMOPS_WEBHOOK_CLIENT_CA and _NAMES; None (any client) when the CA is unset."""
        path = env.get(CA_ENV, "").strip()
        names = frozenset(n.strip().lower() for n in env.get(NAMES_ENV, "").split(",") if n.strip())
        if not path:
            if names:
                raise ClientAuthError(
                    f"{NAMES_ENV} is set but {CA_ENV} is not: names are checked only on certificates verified "
                    f"against a CA; set {CA_ENV} to the PEM file of the CA that signs the API server's client "
                    "certificate (the chart's webhook.clientAuth.caConfigMap), or unset the names"
                )
            return None
        return cls(path, read_ca_bundle(path), names)

    def apply(self, context: ssl.SSLContext) -> None:
        """Make `context` (a server's) require a client certificate chaining to the bundle."""
        context.load_verify_locations(cadata=self.ca_pem)
        context.verify_mode = ssl.CERT_REQUIRED

    def refusal(self, peercert: Mapping[str, Any] | None) -> str:
        """Why a request over a connection with this verified peer certificate is refused; empty when it is not."""
        if not peercert:
            return "no verified client certificate"  # CERT_REQUIRED fails the handshake first; kept as a guard
        if not self.names:
            return ""
        presented = certificate_names(peercert)
        if any(name.lower() in self.names for _, name in presented):
            return ""
        shown = ", ".join(f"{kind}={clip(name, 80)}" for kind, name in presented[:8]) or "none"
        return f"client certificate names ({shown}) are not among the names this webhook accepts ({NAMES_ENV})"


def certificate_names(peercert: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The subject's common names and the subject alternative names of a certificate as `getpeercert()` gives it."""
    names = [(key, value) for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    names += [(kind, value) for kind, value in peercert.get("subjectAltName", ())]
    return [("CN" if kind == "commonName" else kind, str(value)) for kind, value in names]


def read_ca_bundle(path: str) -> str:
    """The PEM text of the CA bundle at `path`, checked to hold only CA certificates; ClientAuthError otherwise."""
    where = f"{CA_ENV}: {path}"
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_CA_BYTES + 1)
    except OSError as err:
        raise ClientAuthError(
            f"{where}: cannot be read ({err.strerror or err}); mount the CA bundle that signs the API server's "
            "webhook client certificate there (the chart's webhook.clientAuth.caConfigMap), or unset it"
        ) from err
    if len(data) > MAX_CA_BYTES:
        raise ClientAuthError(f"{where}: larger than {MAX_CA_BYTES // 1024} KiB: not a CA bundle")
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as err:
        what = "is empty" if not data.strip() else "holds no readable PEM certificate"
        raise ClientAuthError(
            f"{where}: {what}; expected one or more -----BEGIN CERTIFICATE----- blocks of the CA that signs the "
            "API server's webhook client certificate"
        ) from err
    for cert in certificates:
        if not _is_ca(cert):
            raise ClientAuthError(
                f"{where}: {cert.subject.rfc4514_string() or 'a certificate'} is not a CA certificate (no "
                "basicConstraints CA:TRUE), so no client certificate would ever verify; give the CA's certificate, "
                "not the client's"
            )
    pem = data.decode("ascii", errors="replace")
    try:
        ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as err:
        raise ClientAuthError(f"{where}: the TLS library refuses it: {clip(str(err), 120)}") from err
    return pem


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False
