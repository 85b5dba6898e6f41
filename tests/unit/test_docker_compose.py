"""docker-compose.yml runs the same Kafka the integration tests start, as a replicated cluster,
and is safe to start as it is: no guessable token, no unauthenticated Kafka listener and no
database reachable from other machines, no secret written in the file (these machines can't
run Docker, so this is what keeps the file in step)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import yaml

from services.api.tokens import DEMO_TOKENS
from services.brokers import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
SERVICES = ("charging", "projector", "scheduler", "agent", "api")


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return compose


def _services() -> dict[str, Any]:
    services: dict[str, Any] = _compose()["services"]
    return services


def test_compose_kafka_is_the_tested_version_in_kraft_mode() -> None:
    services = _services()
    assert {*BROKERS, "postgres", *SERVICES} <= set(services)
    assert "kafka" not in services  # one broker is not a crash-safe deployment
    for name in BROKERS:
        kafka = services[name]
        assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
        assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert kafka["environment"]["KAFKA_LOG_RETENTION_MS"] == "-1"
    assert services["projector"]["environment"]["FAIRSHARE_DATABASE_URL"].startswith(
        "postgresql+psycopg://"
    )


def test_three_brokers_form_one_quorum_and_replicate_three_times() -> None:
    services = _services()
    envs = [services[name]["environment"] for name in BROKERS]
    assert [env["KAFKA_NODE_ID"] for env in envs] == ["1", "2", "3"]
    voters = "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"
    assert {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in envs} == {voters}
    cluster_ids = {env["CLUSTER_ID"] for env in envs}
    assert len(cluster_ids) == 1
    assert len(base64.urlsafe_b64decode(cluster_ids.pop() + "==")) == 16  # a Kafka Uuid
    for name, env in zip(BROKERS, envs, strict=True):
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    volumes = [services[name]["volumes"][0].split(":")[0] for name in BROKERS]
    assert len(set(volumes)) == 3


def test_services_use_all_three_brokers() -> None:
    services = _services()
    for name in SERVICES:
        service = services[name]
        assert service["environment"]["FAIRSHARE_KAFKA_BOOTSTRAP"] == (
            "kafka-1:9092,kafka-2:9092,kafka-3:9092"
        )
        assert set(BROKERS) <= set(service["depends_on"])
        assert service["command"][-1].split("&& fairshare ")[1].split()[0] in SERVICES


# -- safe to start as it is -------------------------------------------------------------------
def _published(service: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(host address or None for every interface, container port) of each published port."""
    out = []
    for entry in service.get("ports", []):
        parts = str(entry).rsplit(":", 2)
        address = parts[0] if len(parts) == 3 else None
        out.append((address, parts[-1]))
    return out


def _listeners(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Listener name -> (port, security protocol)."""
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    listeners = {}
    for listener in env["KAFKA_LISTENERS"].split(","):
        name, address = listener.split("://")
        listeners[name] = (address.rsplit(":", 1)[1], protocols[name])
    return listeners


def test_no_kafka_listener_without_authentication_is_published() -> None:
    """Anyone reaching a PLAINTEXT listener can write events: such a listener stays inside
    the compose network; a published one would have to be SASL with SCRAM."""
    services = _services()
    for name in BROKERS:
        env = services[name]["environment"]
        listeners = _listeners(env)
        for _address, port in _published(services[name]):
            [(listener, protocol)] = [(n, p) for n, (lp, p) in listeners.items() if lp == port]
            assert protocol in ("SASL_PLAINTEXT", "SASL_SSL"), (name, listener, protocol)
            assert "SCRAM" in env.get("KAFKA_SASL_ENABLED_MECHANISMS", ""), name
        advertised = env["KAFKA_ADVERTISED_LISTENERS"]
        assert "localhost" not in advertised
        assert "HOST" not in listeners


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
