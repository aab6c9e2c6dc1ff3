"""Certificates for TLS tests, made with `cryptography`: a test CA, a server certificate for
127.0.0.1 that it signed, a client certificate it signed, and an unrelated CA."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certs:
    ca: Path
    """The test CA's certificate (what --ca-bundle names)."""
    other_ca: Path
    """A CA that signed nothing here."""
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_both: Path
    """The client certificate and its key in one file."""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )  # fmt: skip


def _builder(
    subject: str, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(name, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    name: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = (
        _builder(name, ca.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_certs(folder: Path) -> Certs:
    """Write a CA, a server certificate for 127.0.0.1, a client certificate and an unrelated CA
    as PEM files under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("soakgate test CA")
    other, _ = _ca("some other CA")
    server, server_key = _leaf("127.0.0.1", ca, ca_key, server=True)
    client, client_key = _leaf("soakgate client", ca, ca_key, server=False)
    pem = serialization.Encoding.PEM
    files = {
        "ca": ca.public_bytes(pem), "other_ca": other.public_bytes(pem),
        "server_cert": server.public_bytes(pem), "server_key": _pem_key(server_key),
        "client_cert": client.public_bytes(pem), "client_key": _pem_key(client_key),
        "client_both": client.public_bytes(pem) + _pem_key(client_key),
    }  # fmt: skip
    paths = {}
    for name, data in files.items():
        path = folder / f"{name}.pem"
        path.write_bytes(data)
        paths[name] = path
    return Certs(**paths)
