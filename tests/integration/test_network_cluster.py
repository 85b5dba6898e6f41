"""The compose file's secured Kafka, run here: ``fairshare broker network-files`` writes a
node's ``server.properties`` and its format @argfile; a real Apache Kafka formatted and started
with exactly those (as the compose file's ``kafka-N`` containers run them) serves the admin over
SASL_SSL, then the services' principals (``fairshare broker principals``, as the compose file's
``kafka-setup`` runs it), and refuses a client without credentials.

One node named ``localhost`` with free ports stands in for ``kafka-1..3``: containers and name
resolution are what this machine lacks (no Docker engine), not what the files say.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from services.brokers import free_port, wait_until_ready
from services.brokers.network_cluster import write_network_cluster
from services.bus.connection import read_properties
from tests.real_kafka import kafka_runtime_or_skip

pytestmark = [pytest.mark.broker, pytest.mark.slow]  # ~20 s: CI runs it with -m slow


def test_the_compose_files_make_a_secured_kafka(tmp_path: Path) -> None:
    java, libs = kafka_runtime_or_skip()
    port, controller_port = free_port(), free_port()
    directory = tmp_path / "kafka"
    (config,) = write_network_cluster(
        directory,
        ["localhost"],
        port=port,
        controller_port=controller_port,
        log_dir=str(tmp_path / "data"),
        libs=str(libs),
    )
    text = config.read_text()
    assert "PLAINTEXT" not in text
    assert f"advertised.listeners=SASL_SSL://localhost:{port}" in text

    formatted = subprocess.run(
        [str(java.path), f"@{directory / 'format-1.args'}"], capture_output=True, text=True
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    log = (tmp_path / "broker.log").open("wb")
    broker = subprocess.Popen(
        [str(java.path), "-Xmx512m", "-cp", f"{libs}/*", "kafka.Kafka", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    bootstrap = f"localhost:{port}"
    admin = read_properties(directory / "security" / "clients" / "admin.properties")
    try:
        wait_until_ready(bootstrap, 90, abort_check=lambda: _exited(broker), identity=admin)
        fairshare = str(Path(sys.executable).with_name("fairshare"))
        principals = subprocess.run(
            [fairshare, "broker", "principals", "--kafka", bootstrap,
             "--kafka-config", str(directory / "security" / "clients" / "admin.properties"),
             "--out", str(directory / "security"), "--cluster", "demo"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert principals.returncode == 0, principals.stdout + principals.stderr
        for name in ("api", "scheduler", "charging", "projector", "audit", "agent-demo"):
            assert (directory / "security" / "clients" / f"{name}.properties").is_file()

        anonymous = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
        with pytest.raises(KafkaException):
            anonymous.list_topics(timeout=5)
    finally:
        broker.terminate()
        broker.wait(30)
        log.close()


def _exited(process: subprocess.Popen[bytes]) -> str | None:
    code = process.poll()
    return None if code is None else f"the broker exited with {code}"
