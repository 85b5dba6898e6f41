"""``fairshare up`` and tokens: ``--tokens FILE`` reaches the API child, a bad file stops it
before anything starts, and what it prints carries no token in a URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from events import Topics
from services.api.tokens_file import add_token
from services.cli import app
from services.launcher import cli as launcher_cli
from services.launcher.children import service_commands
from services.launcher.config import UpConfig
from services.launcher.stack import ready_lines

runner = CliRunner()


def _config(tmp_path: Path, tokens_file: Path | None = None) -> UpConfig:
    return UpConfig(
        bootstrap="127.0.0.1:9092",
        topics=Topics(),
        data_dir=tmp_path,
        database_url="sqlite:///x.db",
        tokens_file=tokens_file,
    )


def test_the_tokens_file_is_passed_to_the_api_child(tmp_path: Path) -> None:
    api = service_commands(_config(tmp_path, tmp_path / "tokens.json"), tmp_path)["api"]
    assert api[api.index("--tokens") + 1] == str(tmp_path / "tokens.json")
    assert "--tokens" not in service_commands(_config(tmp_path), tmp_path)["api"]


def test_the_printed_dashboard_link_carries_no_token(tmp_path: Path) -> None:
    demo = ready_lines(_config(tmp_path), "api 1")
    assert demo[0] == "dashboard http://127.0.0.1:8000/dashboard"
    assert not [line for line in demo if "token=" in line]
    assert "sign in to the dashboard with admin-token" in demo[-1]
    assert any(line.startswith("pids     api 1") for line in demo)
    metrics = [line for line in demo if line.startswith("metrics  ")]
    assert metrics
    assert str(tmp_path / "prometheus" / "targets.json") in metrics[0]

    with_file = ready_lines(_config(tmp_path, tmp_path / "tokens.json"), "api 1")
    assert with_file[0] == "dashboard http://127.0.0.1:8000/dashboard"
    assert f"from {tmp_path / 'tokens.json'}" in with_file[-1]
    assert not [line for line in with_file if "admin-token" in line or "token=" in line]


class _Broker:
    bootstrap = "127.0.0.1:1"
    description = "none"

    def stop(self) -> None:
        pass


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[UpConfig]:
    """What ``fairshare up`` would run, without a broker or services."""
    configs: list[UpConfig] = []

    def run_up(_broker: Any, config: UpConfig, _duration: float | None) -> None:
        configs.append(config)

    monkeypatch.setattr(launcher_cli, "_broker_for_up", lambda *_: _Broker())
    monkeypatch.setattr(launcher_cli, "_run_up", run_up)
    return configs


def test_up_with_a_tokens_file_runs_no_demo_stream(
    tmp_path: Path, started: list[UpConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "ana")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["up", "--data-dir", str(tmp_path), "--tokens", "tokens.json"])
    assert result.exit_code == 0, result.output
    [config] = started
    assert config.tokens_file == path.resolve()  # absolute: the child may run elsewhere
    assert config.submit_every_s == 0
    assert "demo workload stream is off" in result.stdout


def test_up_without_a_file_keeps_the_demo(
    tmp_path: Path, started: list[UpConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAIRSHARE_API_TOKENS", raising=False)
    result = runner.invoke(app, ["up", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    [config] = started
    assert config.tokens_file is None
    assert config.submit_every_s > 0


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "cannot read"), ('{"admin-token-1": {"user": "root"}}', "in clear")],
)
def test_up_refuses_a_bad_tokens_file_before_starting_anything(
    tmp_path: Path, started: list[UpConfig], content: str | None, needle: str
) -> None:
    path = tmp_path / "tokens.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["up", "--data-dir", str(tmp_path), "--tokens", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert started == []


def test_the_banner_is_printed_whole_off_a_terminal(tmp_path: Path) -> None:
    """Printed to a pipe at 40 columns, each ready line stays one line: paths and URLs are
    never folded mid-word (the terminal wraps what is too long by itself)."""
    from rich.console import Console

    from services.runtime.cli_options import console

    deep = tmp_path / ("a-rather-long-directory-name-" * 3)
    lines = ready_lines(_config(deep), "api 1 charging 2 projector 3 scheduler 4")
    narrow = Console(width=40, soft_wrap=console.soft_wrap, force_terminal=False)
    with narrow.capture() as captured:
        for line in lines:
            narrow.print(line)
    assert captured.get().splitlines() == lines
