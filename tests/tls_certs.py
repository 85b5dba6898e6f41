"""A throwaway CA and a server certificate it signed for 127.0.0.1, for the tests of the API
over HTTPS: made in a few milliseconds (EC P-256), valid for a day."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from services.brokers.security import new_ca


@dataclass(frozen=True)
class Issued:
    ca: Path  # the CA's certificate: what a client trusts (--ca)
    cert: Path  # the server's certificate
    key: Path  # its private key, mode 0600


def issue(directory: Path, name: str = "127.0.0.1") -> Issued:
    """A new CA in ``directory`` and a certificate it signed for the IP address ``name``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key, ca = new_ca("Fairshare test CA", start, end)
    ca_name = ca.subject
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(name))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    issued = Issued(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    issued.ca.write_bytes(ca.public_bytes(pem))
    issued.cert.write_bytes(certificate.public_bytes(pem))
    issued.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(issued.key, 0o600)
    return issued
