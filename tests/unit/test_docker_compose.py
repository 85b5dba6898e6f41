"""docker-compose.yml runs the same Kafka the integration tests start, as a replicated cluster,
secured as ``fairshare up`` secures its own, and is safe to start as it is: no guessable token,
no unauthenticated Kafka listener and no database reachable from other machines, no secret
written in the file (these machines can't run Docker, so this is what keeps the file in step;
``tests/integration/test_network_cluster.py`` runs a real Kafka on the files it makes)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import yaml

from services.api.tokens import DEMO_TOKENS
from services.brokers import KAFKA_VERSION
from services.brokers.network_cluster import write_network_cluster
from services.bus.principals import principals

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
SERVICES = ("charging", "projector", "scheduler", "scheduler-standby", "agent", "api")


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return compose


def _services() -> dict[str, Any]:
    services: dict[str, Any] = _compose()["services"]
    return services


def _kafka_files_command() -> list[str]:
    """The arguments of ``fairshare broker network-files`` in the kafka-files service."""
    command = " ".join(_services()["kafka-files"]["command"])
    return command.split("fairshare broker network-files", 1)[1].split()


def _network_files(tmp_path: Path) -> list[Path]:
    """What the kafka-files service writes, written here with its own arguments."""
    arguments = _kafka_files_command()
    hosts = [arguments[i + 1] for i, word in enumerate(arguments) if word == "--host"]
    return write_network_cluster(tmp_path, hosts)


def test_compose_kafka_is_the_tested_version_in_kraft_mode(tmp_path: Path) -> None:
    services = _services()
    assert {*BROKERS, "postgres", *SERVICES} <= set(services)
    assert "kafka" not in services  # one broker is not a crash-safe deployment
    for name, config in zip(BROKERS, _network_files(tmp_path), strict=True):
        kafka = services[name]
        assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
        assert kafka["hostname"] == name
        node = kafka["environment"]["KAFKA_NODE_ID"]
        assert config.name == f"node-{node}.properties"
        assert "process.roles=broker,controller" in config.read_text()
        command = " ".join(kafka["command"])
        assert "java @/fairshare-kafka/format-$$KAFKA_NODE_ID.args" in command
        assert "kafka-server-start.sh /fairshare-kafka/node-$$KAFKA_NODE_ID.properties" in command
        assert "kafka-files" in kafka["depends_on"]
    assert services["projector"]["environment"]["FAIRSHARE_DATABASE_URL"].startswith(
        "postgresql+psycopg://"
    )


def test_three_brokers_form_one_quorum_and_replicate_three_times(tmp_path: Path) -> None:
    configs = [_properties(path) for path in _network_files(tmp_path)]
    assert [config["node.id"] for config in configs] == ["1", "2", "3"]
    voters = "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"
    assert {config["controller.quorum.voters"] for config in configs} == {voters}
    cluster_ids = {
        (tmp_path / f"format-{n}.args").read_text().split('"-t"\n"', 1)[1].split('"')[0]
        for n in (1, 2, 3)
    }
    assert len(cluster_ids) == 1
    assert len(base64.urlsafe_b64decode(cluster_ids.pop() + "==")) == 16  # a Kafka Uuid
    for name, config in zip(BROKERS, configs, strict=True):
        assert config["advertised.listeners"] == f"SASL_SSL://{name}:9092"
        assert config["default.replication.factor"] == "3"
        assert config["min.insync.replicas"] == "2"
        assert config["offsets.topic.replication.factor"] == "3"
        assert config["transaction.state.log.min.isr"] == "2"
        assert config["unclean.leader.election.enable"] == "false"
        assert config["log.dirs"] == "/var/lib/kafka/data"
    volumes = [_services()[name]["volumes"][0].split(":")[0] for name in BROKERS]
    assert len(set(volumes)) == 3


def test_services_use_all_three_brokers() -> None:
    services = _services()
    for name in SERVICES:
        service = services[name]
        assert service["environment"]["FAIRSHARE_KAFKA_BOOTSTRAP"] == (
            "kafka-1:9092,kafka-2:9092,kafka-3:9092"
        )
        assert service["depends_on"]["kafka-setup"]["condition"] == (
            "service_completed_successfully"
        )
        assert service["command"][-1].split("&& fairshare ")[1].split()[0] in SERVICES
    setup = services["kafka-setup"]
    assert {name: "service_healthy" for name in BROKERS} == {
        name: setup["depends_on"][name]["condition"] for name in BROKERS
    }


def test_each_service_is_its_own_principal_and_signs_with_its_own_key() -> None:
    """A service connects with its role's client settings (made by ``fairshare broker
    principals`` in kafka-setup) and signs with its role's key (``fairshare keys setup``)."""
    services = _services()
    setup = " ".join(services["kafka-setup"]["command"])
    clusters = re.findall(r"broker principals .*?--cluster (\S+)", setup)
    assert clusters == ["demo"]
    assert "fairshare keys setup --dir /fairshare-keys --cluster demo" in setup
    roles = principals(clusters)
    signers = {"api", "scheduler", "charging", "agent-demo"}
    expected = {
        "charging": "charging",
        "projector": "projector",
        "scheduler": "scheduler",
        "scheduler-standby": "scheduler",
        "agent": "agent-demo",
        "api": "api",
    }
    for service, principal in expected.items():
        assert principal in roles
        env = services[service]["environment"]
        clients = "/fairshare-kafka/security/clients"
        assert env["FAIRSHARE_KAFKA_CONFIG"] == f"{clients}/{principal}.properties"
        if principal in signers:
            assert env["FAIRSHARE_SIGNING_KEY"] == f"/fairshare-keys/{principal}.key"
        else:
            assert "FAIRSHARE_SIGNING_KEY" not in env
        assert "kafka-security:/fairshare-kafka:ro" in services[service]["volumes"]
    assert "--cluster demo" in " ".join(services["agent"]["command"])


def _properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


# -- safe to start as it is -------------------------------------------------------------------
def _published(service: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(host address or None for every interface, container port) of each published port."""
    out = []
    for entry in service.get("ports", []):
        parts = str(entry).rsplit(":", 2)
        address = parts[0] if len(parts) == 3 else None
        out.append((address, parts[-1]))
    return out


def test_every_kafka_listener_authenticates(tmp_path: Path) -> None:
    """No listener speaks plain text: clients and brokers SASL_SSL with SCRAM, controllers
    mutual TLS, the StandardAuthorizer with nothing allowed without an ACL; no broker port is
    published on the host."""
    for config in map(_properties, _network_files(tmp_path)):
        protocols = dict(p.split(":") for p in config["listener.security.protocol.map"].split(","))
        assert protocols == {"SASL_SSL": "SASL_SSL", "CONTROLLER": "SSL"}
        assert config["listeners"] == "SASL_SSL://:9092,CONTROLLER://:9093"
        assert config["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
        assert config["listener.name.controller.ssl.client.auth"] == "required"
        assert config["allow.everyone.if.no.acl.found"] == "false"
        assert config["authorizer.class.name"].endswith("StandardAuthorizer")
    for name in BROKERS:
        assert not _published(_services()[name])
    assert "--add-scram" in (tmp_path / "format-1.args").read_text()


def test_published_ports_are_loopback_except_the_api() -> None:
    for name, service in _services().items():
        for address, port in _published(service):
            if name == "api":
                assert address == "${FAIRSHARE_API_BIND:-127.0.0.1}", address
            else:
                assert address == "127.0.0.1", (name, port)


def test_the_api_serves_a_tokens_file_from_a_secret() -> None:
    """The API listens on 0.0.0.0 in its container: it must not be left with the demo tokens
    (it would refuse to start, but the file must not even ask for that)."""
    compose = _compose()
    api = compose["services"]["api"]
    command = " ".join(api["command"])
    assert "--host 0.0.0.0" in command
    tokens = re.search(r"--tokens (\S+)", command)
    assert tokens is not None, command
    assert tokens.group(1) == "/run/secrets/api-tokens"
    assert api["secrets"] == ["api-tokens"]
    assert compose["secrets"]["api-tokens"]["file"].startswith("${FAIRSHARE_API_TOKENS_FILE:?")
    text = COMPOSE.read_text()
    assert not [token for token in DEMO_TOKENS if token in text]


def test_no_secret_is_written_in_the_compose_file() -> None:
    """Passwords come from .env (compose's ${VAR:?...} refuses to start without them)."""
    services = _services()
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    for name, service in services.items():
        for key, value in service.get("environment", {}).items():
            if re.search("PASSWORD|SECRET|TOKEN|SASL_JAAS", key):
                assert str(value).startswith("${"), (name, key)
            for password in re.findall(r"://[^:/@]+:([^@]+)@", str(value)):
                assert password.startswith("${POSTGRES_PASSWORD:?"), (name, key)
    text = COMPOSE.read_text()
    assert "fairshare:fairshare@" not in text
    assert not re.search(r"PASSWORD: +[^$\s]", text)


def test_env_example_names_every_variable_and_holds_no_secret() -> None:
    example = (ROOT / ".env.example").read_text()
    settings = dict(
        line.split("=", 1) for line in example.splitlines() if line and not line.startswith("#")
    )
    used = set(re.findall(r"\$\{([A-Z_]+)", COMPOSE.read_text()))
    assert used == set(settings)
    assert settings["POSTGRES_PASSWORD"] == ""  # a placeholder: compose refuses it empty
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in gitignore
