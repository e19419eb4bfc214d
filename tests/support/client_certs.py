"""Client certificates for tests of the webhook's client authentication: a CA, and certificates it signs."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issuer:
    """A CA certificate and its key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @classmethod
    def new(cls, common_name: str) -> Issuer:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY)
            .not_valid_after(now + DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> Issuer:
        """A CA kept in files (the local cluster's webhook client CA, `cluster/certs.sh`)."""
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(x509.load_pem_x509_certificate(cert_file.read_bytes()), key)

    def write_client(self, directory: Path, common_name: str, dns_names: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """A client certificate (clientAuth) with a key of its own, written as (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY)
            .not_valid_after(now + DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if dns_names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / f"{common_name}.crt", directory / f"{common_name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        key_file.write_bytes(key_pem)
        return cert_file, key_file
