"""The parts of a secured Kafka that need no broker (issue 28): the one place clients get their
identity, the roles' ACL table against what each service's code reads and writes, the secured
node's configuration and files, and ``fairshare up`` handing each service its own principal.
The broker's refusals themselves are in ``tests/integration/test_kafka_security.py``."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509

from events import TopicKind, Topics
from services.agents.agent import CATCH_UP_TOPICS
from services.api.view import VIEW_KINDS
from services.brokers.kafka_config import render_server_properties
from services.brokers.kafka_node import argfile_text
from services.brokers.security import (
    BROKER_PRINCIPAL,
    BrokerSecurity,
    BrokerStartError,
    admin_settings_file,
    checked_security,
    kept_security,
)
from services.bus.connection import (
    KAFKA_CONFIG_ENV,
    KafkaConfigError,
    LibrdkafkaLog,
    client_config,
    read_properties,
    use_config_file,
    write_properties,
)
from services.bus.principals import (
    ADMIN,
    HELPER_GROUPS,
    READS,
    WRITES,
    Role,
    acl_bindings,
    identity_of,
    passwords_for,
    principal_name,
    principals,
    role_grants,
)
from services.charging.faust_serve import broker_credentials
from services.launcher.children import principal_of, service_commands
from services.launcher.config import UpConfig
from services.projector.host import PROJECTED
from services.scheduler.host import INPUTS

ADMIN_ONLY = {"ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "CLUSTER_ACTION", "ALL"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the clients' identity ---------------------------------------------------------------------
def test_properties_files_are_read_as_librdkafka_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "api.properties"
    path.write_text(
        "# comment\n! also a comment\n\nsecurity.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\nsasl.password=a=b:c\n"
    )
    assert read_properties(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.password": "a=b:c",
    }
    path.write_text("bootstrap.servers=elsewhere:9092\n")
    with pytest.raises(KafkaConfigError, match="set by Fairshare itself"):
        read_properties(path)
    path.write_text("not a setting\n")
    with pytest.raises(KafkaConfigError, match=":1: not a key=value"):
        read_properties(path)


def test_written_settings_are_the_owners_alone_and_read_back(tmp_path: Path) -> None:
    settings = {"security.protocol": "SASL_SSL", "sasl.password": "s3cret"}
    path = write_properties(tmp_path / "secrets" / "api.properties", settings)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert read_properties(path) == settings


def test_every_client_starts_from_the_process_identity_and_its_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KAFKA_CONFIG_ENV, raising=False)
    # librdkafka's info lines ("Purging 1 unserved events ...") are left out: notices and up,
    # as records of the fairshare.kafka.client logger (tests/unit/test_librdkafka_log.py)
    quiet = {"log_level": 5, "logger": client_config("b:1")["logger"]}
    assert isinstance(quiet["logger"], LibrdkafkaLog)
    assert client_config("b:1", {"group.id": "g"}) == {
        **quiet,
        "group.id": "g",
        "bootstrap.servers": "b:1",
    }
    path = write_properties(tmp_path / "p", {"sasl.username": "api", "linger.ms": "1"})
    monkeypatch.setenv(KAFKA_CONFIG_ENV, str(path))
    assert client_config("b:1", {"linger.ms": 5, "log_level": 7}) == {
        "log_level": 7,  # the client's own setting wins
        "logger": quiet["logger"],
        "sasl.username": "api",
        "linger.ms": 5,
        "bootstrap.servers": "b:1",
    }
    assert client_config("b:1", identity={}) == {**quiet, "bootstrap.servers": "b:1"}
    write_properties(path, {"sasl.username": "scheduler"})  # a new file: new clients see it
    assert client_config("b:1")["sasl.username"] == "scheduler"


def test_kafka_config_applies_to_the_process_and_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KAFKA_CONFIG_ENV, raising=False)
    with pytest.raises(KafkaConfigError, match="cannot read"):
        use_config_file(tmp_path / "missing.properties")
    path = write_properties(tmp_path / "api.properties", {"sasl.username": "api"})
    use_config_file(path)
    import os

    assert os.environ[KAFKA_CONFIG_ENV] == str(path.resolve())


def test_faust_connects_as_the_same_principal(tmp_path: Path) -> None:
    assert broker_credentials({}) is None
    ca = BrokerSecurity.in_directory(tmp_path).ca_file
    sasl = broker_credentials(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "charging",
            "sasl.password": "pw",
            "ssl.ca.location": str(ca),
        }
    )
    assert (sasl.username, sasl.password) == ("charging", "pw")
    assert (sasl.protocol.value, sasl.mechanism.value) == ("SASL_SSL", "SCRAM-SHA-512")
    assert sasl.ssl_context is not None


# -- the roles ---------------------------------------------------------------------------------
def test_each_role_may_read_what_its_service_reads() -> None:
    """The ACL table follows the services' own lists of inputs: a service that starts reading
    another topic fails here until its role may (or the broker would refuse it in production)."""
    assert set(VIEW_KINDS) == READS[Role.API]
    assert set(INPUTS) <= READS[Role.SCHEDULER]
    assert set(CATCH_UP_TOPICS) <= READS[Role.AGENT]
    assert set(PROJECTED) <= READS[Role.PROJECTOR]
    assert {TopicKind.WORKLOADS, TopicKind.HEARTBEATS, TopicKind.LEDGER} <= READS[Role.CHARGING]
    assert READS[Role.AUDIT] == set(TopicKind)


def test_who_may_write_what() -> None:
    """The forgeries the roles rule out: only the scheduler commands, only charging charges,
    only the API states budgets, the readers write no fact."""
    writers = {kind: {r for r in Role if kind in WRITES[r]} for kind in TopicKind}
    assert writers[TopicKind.COMMANDS] == {Role.SCHEDULER}
    assert writers[TopicKind.LEDGER] == {Role.CHARGING}
    assert writers[TopicKind.USAGE] == {Role.CHARGING}
    assert writers[TopicKind.BUDGETS] == {Role.API}
    assert writers[TopicKind.HEARTBEATS] == writers[TopicKind.LIVENESS] == {Role.AGENT}
    assert WRITES[Role.AUDIT] == set()
    assert WRITES[Role.PROJECTOR] == {TopicKind.DEADLETTER}


@pytest.mark.parametrize("role", list(Role))
def test_no_role_may_create_delete_or_reconfigure_anything(role: Role) -> None:
    topics = Topics(prefix="p.")
    bindings = acl_bindings(principal_name(role, "demo"), role, topics)
    assert {b.operation.name for b in bindings}.isdisjoint(ADMIN_ONLY)
    assert {b.restype.name for b in bindings} <= {"TOPIC", "GROUP"}
    assert all(b.permission_type.name == "ALLOW" for b in bindings)
    # every topic a role touches is one of the deployment's
    assert all(b.name.startswith("p.") for b in bindings if b.restype.name == "TOPIC")


def test_groups_are_each_roles_own() -> None:
    topics = Topics()
    groups = {
        role: {
            p.name
            for p, _ in role_grants(principal_name(role, "demo"), role, topics)
            if p.resource.name == "GROUP"
        }
        for role in Role
    }
    assert all(set(HELPER_GROUPS) <= names for names in groups.values())
    own = {role: names - set(HELPER_GROUPS) for role, names in groups.items()}
    assert own[Role.PROJECTOR] == {"fairshare-read-models"}
    assert own[Role.CHARGING] == {"fairshare.charging", "fairshare-charging-"}
    assert own[Role.SCHEDULER] == {"fairshare-lease-"}
    assert own[Role.API] == own[Role.AGENT] == own[Role.AUDIT] == set()


def test_principals_and_their_passwords(tmp_path: Path) -> None:
    assert principals(["demo", "hpc"]) == {
        "api": Role.API,
        "scheduler": Role.SCHEDULER,
        "charging": Role.CHARGING,
        "projector": Role.PROJECTOR,
        "audit": Role.AUDIT,
        "agent-demo": Role.AGENT,
        "agent-hpc": Role.AGENT,
    }
    with pytest.raises(ValueError, match="names its cluster"):
        principal_name(Role.AGENT)
    path = tmp_path / "secrets.json"
    first = passwords_for(path, ["api", "audit"])
    assert len(set(first.values())) == 2
    assert all(len(p) >= 40 for p in first.values())
    assert passwords_for(path, ["api", "agent-x"])["api"] == first["api"], "kept on restart"
    assert _mode(path) == 0o600


def test_a_principal_never_gets_the_admins_own_certificate_or_password() -> None:
    admin = {
        "security.protocol": "SSL",
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/admin.pem",
        "ssl.key.location": "/admin.key",
        "ssl.key.password": "k",
    }
    assert identity_of(admin, "api", "pw") == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "api",
        "sasl.password": "pw",
    }


# -- the secured node --------------------------------------------------------------------------
def test_a_secured_node_has_no_plain_text_listener(tmp_path: Path) -> None:
    security = BrokerSecurity.in_directory(tmp_path)
    text = render_server_properties(
        port=9092, controller_port=9093, log_dir="/x", security=security.listener_settings()
    )
    settings = dict(line.split("=", 1) for line in text.splitlines()[1:])
    assert "PLAINTEXT" not in text
    assert settings["listeners"] == "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert settings["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert settings["listener.name.controller.ssl.client.auth"] == "required"
    assert settings["super.users"] == f"User:{ADMIN};{BROKER_PRINCIPAL}"
    assert settings["authorizer.class.name"].endswith("StandardAuthorizer")
    assert settings["allow.everyone.if.no.acl.found"] == "false"
    assert settings["ssl.keystore.type"] == settings["ssl.truststore.type"] == "PEM"
    assert security.format_arguments() == [
        "--add-scram",
        f"SCRAM-SHA-512=[name=admin,password={security.admin_password}]",
    ]


def test_the_security_files_are_the_owners_and_made_once(tmp_path: Path) -> None:
    first = BrokerSecurity.in_directory(tmp_path)
    assert _mode(first.directory) == 0o700
    for path in first.directory.rglob("*"):
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path
    again = BrokerSecurity.in_directory(tmp_path)
    assert again.admin_password == first.admin_password
    assert read_properties(admin_settings_file(first.directory))["sasl.username"] == ADMIN
    chain = x509.load_pem_x509_certificates(first.keystore_file.read_bytes())
    names = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    ca = x509.load_pem_x509_certificate(first.ca_file.read_bytes())
    chain[0].verify_directly_issued_by(ca)


def test_a_data_dir_keeps_its_security(tmp_path: Path) -> None:
    assert kept_security(tmp_path) is None
    assert checked_security(tmp_path, None) == "plaintext"
    (tmp_path / "plain" / "kraft-logs").mkdir(parents=True)
    with pytest.raises(BrokerStartError, match="written without authentication"):
        checked_security(tmp_path / "plain", "sasl_ssl")
    BrokerSecurity.in_directory(tmp_path / "secured")
    assert checked_security(tmp_path / "secured", None) == "sasl_ssl"
    with pytest.raises(BrokerStartError, match="let anyone write its log"):
        checked_security(tmp_path / "secured", "plaintext")
    (tmp_path / "cluster" / "node-1" / "kraft-logs").mkdir(parents=True)
    assert kept_security(tmp_path / "cluster") == "plaintext"


def test_the_format_arguments_reach_java_through_an_argfile_intact() -> None:
    text = argfile_text(["-cp", "/a b/*", 'x"y\\z', "SCRAM-SHA-512=[name=admin,password=p]"])
    assert text.splitlines() == [
        '"-cp"',
        '"/a b/*"',
        '"x\\"y\\\\z"',
        '"SCRAM-SHA-512=[name=admin,password=p]"',
    ]


# -- fairshare up ------------------------------------------------------------------------------
def test_up_starts_each_service_as_its_own_principal(tmp_path: Path) -> None:
    base = UpConfig(
        bootstrap="127.0.0.1:9",
        topics=Topics(),
        data_dir=tmp_path,
        database_url="sqlite://",
        metrics=False,
        slurm_cluster="hpc",
        charging_shards=2,
    )
    plain = service_commands(base, tmp_path)
    assert not any("--kafka-config" in argv for argv in plain.values())
    names = principals(base.pools)
    identities = {name: tmp_path / f"{name}.properties" for name in names}
    from dataclasses import replace

    secured = service_commands(replace(base, kafka_identities=identities), tmp_path)
    given = {
        service: Path(argv[argv.index("--kafka-config") + 1]).stem
        for service, argv in secured.items()
    }
    assert given == {
        "charging-1": "charging",
        "charging-2": "charging",
        "projector": "projector",
        "scheduler": "scheduler",
        "scheduler-2": "scheduler",
        "agent": "agent-demo",
        "agent-slurm": "agent-hpc",
        "api": "api",
    }
    assert ADMIN not in given.values()
    assert principal_of(base, "agent-slurm") == "agent-hpc"
