"""docker-compose.yml runs the same Kafka the integration tests start (these machines can't run
Docker, so this is what keeps the two in step)."""

from __future__ import annotations

from pathlib import Path

import yaml

from services.brokers import KAFKA_VERSION

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def test_compose_kafka_is_the_tested_version_in_kraft_mode() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    kafka = services["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert kafka["environment"]["KAFKA_LOG_RETENTION_MS"] == "-1"
    assert {"kafka", "postgres", "charging", "projector", "scheduler", "agent", "api"} <= set(
        services
    )
    assert services["projector"]["environment"]["FAIRSHARE_DATABASE_URL"].startswith(
        "postgresql+psycopg://"
    )
    for name in ("charging", "projector", "scheduler", "agent", "api"):
        assert services[name]["environment"]["FAIRSHARE_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert services[name]["command"][-1].split("&& fairshare ")[1].split()[0] in (
            "charging",
            "projector",
            "scheduler",
            "agent",
            "api",
        )
