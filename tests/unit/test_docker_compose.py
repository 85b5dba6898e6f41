"""docker-compose.yml runs the same Kafka the integration tests start, as a replicated cluster
(these machines can't run Docker, so this is what keeps the two in step)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from services.brokers import KAFKA_VERSION

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
SERVICES = ("charging", "projector", "scheduler", "agent", "api")


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
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
    for index, (name, env) in enumerate(zip(BROKERS, envs, strict=True)):
        assert env["KAFKA_ADVERTISED_LISTENERS"] == (
            f"PLAINTEXT://{name}:9092,HOST://localhost:{29092 + index}"
        )
        assert services[name]["ports"] == [f"{29092 + index}:29092"]
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
