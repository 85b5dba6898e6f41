"""The log of a local ``fairshare up`` found from its data dir (services/brokers/local.py,
services/audit/local_log.py): the audit and export commands need neither --kafka nor the audit
principal's settings beside it, and say what to pass where there is none."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.brokers.local import local_kafka
from services.cli import app


def _up_data_dir(root: Path, *ports: int, secured: bool = True) -> Path:
    broker = root / "broker"
    if len(ports) == 1:
        broker.mkdir(parents=True)
        (broker / "ports.json").write_text(json.dumps({"port": ports[0], "controller_port": 1}))
    else:
        for node_id, port in enumerate(ports, 1):
            node = broker / f"node-{node_id}"
            node.mkdir(parents=True)
            (node / "ports.json").write_text(json.dumps({"port": port}))
    if secured:
        clients = broker / "security" / "clients"
        clients.mkdir(parents=True)
        (clients / "audit.properties").write_text("security.protocol=SASL_SSL\n")
    return root


def test_one_node_secured(tmp_path: Path) -> None:
    found = local_kafka(_up_data_dir(tmp_path, 41234))
    assert found is not None
    assert found.bootstrap == "127.0.0.1:41234"
    assert found.client_config == tmp_path / "broker" / "security" / "clients" / "audit.properties"


def test_three_nodes_plain(tmp_path: Path) -> None:
    found = local_kafka(_up_data_dir(tmp_path, 41001, 41002, 41003, secured=False))
    assert found is not None
    assert found.bootstrap == "127.0.0.1:41001,127.0.0.1:41002,127.0.0.1:41003"
    assert found.client_config is None


def test_no_up_here(tmp_path: Path) -> None:
    assert local_kafka(tmp_path) is None


@pytest.mark.parametrize(
    "command", [["audit", "replay"], ["audit", "verify"], ["audit", "decisions"]]
)
def test_without_a_log_the_audit_says_what_to_pass(
    tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAIRSHARE_KAFKA_BOOTSTRAP", raising=False)
    result = CliRunner().invoke(app, [*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "--events FILE or --kafka BOOTSTRAP" in result.output
    assert str(tmp_path) in result.output.replace("\n", "")


def test_the_audit_reads_the_local_up_s_broker_as_its_auditor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Kafka listens on the port here: the command must get as far as connecting there,
    with the audit principal's settings in use, and say so."""
    monkeypatch.delenv("FAIRSHARE_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("FAIRSHARE_KAFKA_CONFIG", raising=False)
    _up_data_dir(tmp_path, 9)
    used: list[Path | None] = []
    tried: list[str] = []
    monkeypatch.setattr("services.bus.connection.use_config_file", used.append)
    monkeypatch.setattr("services.bus.connection.configured_file", lambda: None)

    def read_to_end(bootstrap: str, names: object) -> list[object]:
        tried.append(bootstrap)
        return []

    monkeypatch.setattr("services.bus.export.read_to_end", read_to_end)
    monkeypatch.setattr("services.brokers.handle.wait_until_ready", lambda *a, **k: None)
    result = CliRunner().invoke(app, ["audit", "verify", "--data-dir", str(tmp_path)])
    assert tried == ["127.0.0.1:9"], result.output
    assert used == [tmp_path / "broker" / "security" / "clients" / "audit.properties"]
    assert "as its audit principal" in result.output


@pytest.mark.parametrize("command", [["audit", "verify"], ["audit", "decisions"]])
def test_beside_a_stopped_up_the_audit_says_so_in_a_line(
    tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data dir names a broker, but `fairshare up` has stopped: one line saying so and
    exit 1, where a KafkaException traceback was."""
    monkeypatch.delenv("FAIRSHARE_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("FAIRSHARE_KAFKA_CONFIG", raising=False)
    monkeypatch.setattr("services.audit.local_log.READY_TIMEOUT_S", 1.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _up_data_dir(tmp_path, port, secured=False)
    result = CliRunner().invoke(app, [*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    said = " ".join(result.output.split())
    assert f"does not answer at 127.0.0.1:{port}" in said
    assert "Traceback" not in result.output
