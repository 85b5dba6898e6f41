"""``fairshare up`` gives each service a metrics port of its own and names them all for
Prometheus in the data directory; the supervisor tells each child how often it restarted it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from events import Topics
from services.launcher.children import RESTARTS_ENV, child_for, service_commands, spawn_child
from services.launcher.config import UpConfig
from services.metrics import endpoint


def _config(tmp_path: Path, **fields: object) -> UpConfig:
    config = UpConfig("127.0.0.1:9092", Topics(), tmp_path, "sqlite://", api_port=8123)
    return replace(config, **fields)  # type: ignore[arg-type]


def _port(argv: list[str]) -> int:
    return int(argv[argv.index("--metrics-port") + 1])


def test_every_service_but_the_api_gets_a_port_of_its_own_before_its_options(
    tmp_path: Path,
) -> None:
    commands = service_commands(_config(tmp_path, charging_shards=2), tmp_path / "logs")
    own = {name: argv for name, argv in commands.items() if name != "api"}
    assert sorted(own) == ["agent", "charging-1", "charging-2", "projector", "scheduler",
                           "scheduler-2"]  # fmt: skip
    ports = [_port(argv) for argv in own.values()]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < 65536 for port in ports)
    assert "--metrics-port" not in commands["api"], "the API serves /metrics on its own port"
    assert commands["agent"][:4] == ["agent", "simulated", "--metrics-port", str(ports[-1])]
    for argv in own.values():
        at = argv.index("--metrics-host")
        assert argv[at + 1] == "127.0.0.1"


def test_the_targets_name_every_service_and_a_ready_configuration_scrapes_them(
    tmp_path: Path,
) -> None:
    commands = service_commands(_config(tmp_path, api_host="0.0.0.0"), tmp_path / "logs")
    directory = tmp_path / "prometheus"
    groups = json.loads((directory / "targets.json").read_text())
    targets = {group["labels"]["service"]: group["targets"] for group in groups}
    assert targets == {
        **{name: [f"127.0.0.1:{_port(argv)}"] for name, argv in commands.items() if name != "api"},
        "api": ["127.0.0.1:8123"],  # a wildcard host is scraped on the loopback
    }
    config = yaml.safe_load((directory / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["file_sd_configs"] == [{"files": [str((directory / "targets.json").resolve())]}]
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("FAIRSHARE_REQUIRE_PROMETHEUS"):
            pytest.fail("promtool is required here (apt-get install prometheus)")
        return  # the YAML was checked above; promtool checks the rest where it exists
    checked = subprocess.run(
        [promtool, "check", "config", str(directory / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_without_metrics_nothing_is_added_or_written(tmp_path: Path) -> None:
    commands = service_commands(_config(tmp_path, metrics=False), tmp_path / "logs")
    assert not any("--metrics-port" in argv for argv in commands.values())
    assert not (tmp_path / "prometheus").exists()


def test_a_child_is_told_how_often_it_was_restarted(tmp_path: Path) -> None:
    child = child_for("probe", ["--help"], tmp_path)
    child.argv = [
        "python3",
        "-c",
        f"import os; print(os.environ[{RESTARTS_ENV!r}])",
    ]
    child.restarts = 3
    spawn_child(child)
    assert child.process is not None
    assert child.process.wait(30) == 0
    assert child.log_path.read_text().strip() == "3"
    assert endpoint.restarts_from({RESTARTS_ENV: child.log_path.read_text()}) == 3
    assert RESTARTS_ENV == endpoint.RESTARTS_ENV, "the launcher does not import the service's"
