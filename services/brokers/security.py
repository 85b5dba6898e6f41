"""A secured Apache Kafka node: TLS on every listener, SCRAM-SHA-512 for clients, mutual TLS
between the nodes and their controllers, and ACLs enforced by KRaft's StandardAuthorizer.

Why these: SCRAM keeps no password on the broker (only a salted, iterated proof), and KRaft can
hold the first credential, the admin's, from the moment the storage is formatted
(``kafka-storage format --add-scram``), so a secured cluster never has an unauthenticated
moment. The controller listener uses mutual TLS with the nodes' own certificate: a node must
reach its controllers before it has read any credential from the metadata log, which SCRAM
cannot serve yet. Kafka reads PEM files directly (KIP-651), so no keytool and no JKS password.

Everything lives in ``<data dir>/security`` (mode 0700, files 0600): ``ca.pem`` (trusted by
clients), ``ca.key`` (kept to issue the certificate again), ``broker.pem`` (the nodes' key and
certificate chain), ``secrets.json`` (every principal's password) and ``clients/<principal>.
properties`` (what ``--kafka-config`` names). A data dir keeps its security: a log written
without authentication is never presented as one that had it, nor the reverse.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from services.bus.connection import write_private, write_properties
from services.bus.principals import ADMIN, SCRAM_MECHANISM, passwords_for

from .handle import BrokerStartError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate

__all__ = [
    "BROKER_PRINCIPAL",
    "SECURITY_DIR",
    "SECURITY_KINDS",
    "BrokerSecurity",
    "admin_settings_file",
    "kept_security",
]

SECURITY_DIR = "security"
#: ``--security`` of the broker commands: no authentication, or SCRAM over TLS with ACLs.
SECURITY_KINDS = ("plaintext", "sasl_ssl")
#: The nodes' principal on the controller listener (the subject of their certificate).
BROKER_PRINCIPAL = "User:CN=fairshare-broker"
_VALID_DAYS = 3650


def admin_settings_file(security_dir: Path) -> Path:
    """The admin's client settings (``--kafka-config``) in a cluster's security directory."""
    return security_dir / "clients" / f"{ADMIN}.properties"


def kept_security(data_dir: Path) -> str | None:
    """The security a broker data dir was started with: "sasl_ssl", "plaintext" (a formatted
    log without it) or None (nothing there yet)."""
    if (data_dir / SECURITY_DIR / "broker.pem").is_file():
        return "sasl_ssl"
    if (data_dir / "kraft-logs").is_dir() or any(data_dir.glob("node-*/kraft-logs")):
        return "plaintext"
    return None


def checked_security(data_dir: Path, wanted: str | None) -> str:
    """The security to start ``data_dir`` with: what it holds, else ``wanted`` (default
    plaintext). `BrokerStartError` when ``wanted`` differs from what the data dir holds."""
    if wanted is not None and wanted not in SECURITY_KINDS:
        raise BrokerStartError(f"security: one of {', '.join(SECURITY_KINDS)}, not {wanted!r}")
    kept = kept_security(data_dir)
    if wanted is not None and kept is not None and kept != wanted:
        why = (
            "its log was written without authentication, by anyone who could reach it"
            if kept == "plaintext"
            else "it is secured; starting it open would let anyone write its log"
        )
        raise BrokerStartError(
            f"{data_dir} holds a {kept} broker: {why}. Use another data dir for {wanted}"
        )
    return kept or wanted or "plaintext"


@dataclass(frozen=True)
class BrokerSecurity:
    """The files of a secured cluster's ``security`` directory, and what they make of its
    configuration."""

    directory: Path
    admin_password: str

    @classmethod
    def in_directory(cls, data_dir: Path, hosts: Sequence[str] = ()) -> BrokerSecurity:
        """The security of ``data_dir``'s cluster, its CA, certificate and admin password
        made on the first call; the certificate names the loopback addresses and ``hosts``
        (the nodes' names on a network of their own, as in the compose file)."""
        directory = data_dir / SECURITY_DIR
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        if not (directory / "broker.pem").is_file():
            _issue_certificates(directory, hosts)
        password = passwords_for(directory / "secrets.json", [ADMIN])[ADMIN]
        security = cls(directory, password)
        write_properties(admin_settings_file(directory), security.admin_identity())
        return security

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore_file(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def secrets_file(self) -> Path:
        return self.directory / "secrets.json"

    @property
    def admin_jaas(self) -> str:
        """The admin's SCRAM login as a Java client (a node between brokers, Kafka's tools)."""
        return (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.admin_password}";'
        )

    def listener_settings(self) -> dict[str, str]:
        """``server.properties`` entries beyond the plain node's (listener names come from
        :func:`services.brokers.kafka_config.render_server_properties`)."""
        return {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (self.admin_jaas),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore_file),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "listener.name.controller.ssl.client.auth": "required",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN};{BROKER_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that store the admin's SCRAM credential in the
        first metadata records: it is in force before the node serves anyone."""
        return ["--add-scram", f"{SCRAM_MECHANISM}=[name={ADMIN},password={self.admin_password}]"]

    def admin_identity(self) -> dict[str, str]:
        """librdkafka settings of the admin principal."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": ADMIN,
            "sasl.password": self.admin_password,
            "ssl.ca.location": str(self.ca_file),
        }


def new_ca(
    common_name: str, start: datetime.datetime, end: datetime.datetime
) -> tuple[EllipticCurvePrivateKey, Certificate]:
    """A self-signed CA (EC P-256: small and fast to make) that may sign certificates only
    (path length 0), valid from ``start`` to ``end``: the broker's, and the tests' for the API."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca


def _issue_certificates(directory: Path, hosts: Sequence[str] = ()) -> None:
    """A CA of this cluster alone, and the nodes' certificate signed by it for the loopback
    names clients dial (127.0.0.1, ::1, localhost) and ``hosts``, usable as server and as
    client (the controller listener asks the nodes for theirs). EC P-256: small and fast to
    make."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=_VALID_DAYS)
    ca_key, ca = new_ca(f"Fairshare Kafka CA {os.urandom(4).hex()}", start, end)
    ca_name = ca.subject
    key = ec.generate_private_key(ec.SECP256R1())
    names = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
        *(x509.DNSName(host) for host in hosts),
    ]
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, BROKER_PRINCIPAL[len("User:CN=") :])]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    unencrypted = serialization.NoEncryption()
    pkcs8 = serialization.PrivateFormat.PKCS8
    write_private(directory / "ca.key", ca_key.private_bytes(pem, pkcs8, unencrypted))
    write_private(directory / "ca.pem", ca.public_bytes(pem))
    keystore = key.private_bytes(pem, pkcs8, unencrypted)
    keystore += certificate.public_bytes(pem) + ca.public_bytes(pem)
    write_private(directory / "broker.pem", keystore)  # last: its presence means "secured"
