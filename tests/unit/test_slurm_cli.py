"""``fairshare agent slurm``: its options reach the adapter, and a Slurm that does not answer
stops it before it touches Kafka (exit 2, with Slurm's reason)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from services.agents import cli
from services.agents.agent import AgentSettings
from services.agents.slurm import SlurmAdapter, SlurmAgent
from services.agents.slurm.commands import SlurmCli, SlurmError
from tests.unit.test_slurm_adapter import FakeSlurm


def _fake(monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm) -> None:
    for method in ("list_nodes", "list_jobs", "read_completions", "show_topology"):
        monkeypatch.setattr(SlurmCli, method, lambda self, *a, m=method: getattr(slurm, m)(*a))
    # No native job waits: the agent reads Fairshare's partitions once before it starts.
    monkeypatch.setattr(SlurmCli, "list_native_jobs", lambda self, partitions: "")


def test_options_reach_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, FakeSlurm())
    seen: dict[str, Any] = {}

    def serve(adapter: object, shared: cli.Shared, settings: AgentSettings,
              loop: object = None) -> None:  # fmt: skip
        seen.update(adapter=adapter, kafka=shared.kafka, cluster=settings.cluster,
                    pool=settings.pool, hb=settings.heartbeat_s, confirm=settings.confirm_s,
                    loop=loop)  # fmt: skip

    monkeypatch.setattr(cli, "_serve", serve)
    result = CliRunner().invoke(
        cli.agent_app,
        [
            "slurm",
            "--kafka", "127.0.0.1:1",
            "--cluster", "gpu-a",
            "--partition", "gpu",
            "--output-dir", "/shared/logs",
            "--sbatch-option=--account=lab",
            "--sbatch-option=--cpus-per-gpu=8",
            "--pending-timeout-s", "60",
            "--heartbeat-s", "5",
            "--confirm-s", "120",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    adapter = seen["adapter"]
    assert isinstance(adapter, SlurmAdapter)
    assert (seen["cluster"], seen["pool"], seen["hb"], seen["confirm"]) == (
        "gpu-a",
        "gpu-a",
        5.0,
        120.0,
    )
    assert adapter.cluster == "gpu-a"
    assert adapter.partition == "gpu"
    assert adapter.pending_timeout_s == 60.0
    assert adapter.options.output_dir == "/shared/logs"
    assert adapter.options.extra == ("--account=lab", "--cpus-per-gpu=8")
    assert adapter.native_partitions == ("gpu",), "native work on Fairshare's partition by default"
    assert seen["kafka"] == "127.0.0.1:1"
    assert seen["loop"] is SlurmAgent, "the Slurm agent, not the generic one"


def test_a_slurm_that_does_not_answer_stops_the_agent_before_kafka(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def silent(self: SlurmCli, partition: str | None) -> str:
        raise SlurmError("sinfo exited 1: Unable to contact slurm controller")

    monkeypatch.setattr(SlurmCli, "list_nodes", silent)
    monkeypatch.setattr(cli, "_serve", lambda *a, **k: pytest.fail("reached Kafka"))
    result = CliRunner().invoke(cli.agent_app, ["slurm", "--kafka", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "refusing to start: Slurm: sinfo exited 1: Unable to contact" in result.output
