"""The options of scaling out by pool: ``fairshare up --lease-per-pool`` hands each scheduler a
disjoint set of preferred pools (the defaults unchanged), ``fairshare scheduler`` checks its
options, and a simulated agent deals its nodes out over several pools."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from events import Topics
from services.agents.simulated import simulated_nodes
from services.cli import app
from services.launcher.children import scheduler_pools, service_commands
from services.launcher.config import UpConfig

runner = CliRunner()


def _config(tmp_path: Path, **fields: object) -> UpConfig:
    config = UpConfig(
        bootstrap="127.0.0.1:9092", topics=Topics(), data_dir=tmp_path, database_url="sqlite:///x"
    )
    return replace(config, **fields)  # type: ignore[arg-type]


def _schedulers(config: UpConfig, tmp_path: Path) -> dict[str, list[str]]:
    """The schedulers' commands, without their metrics ports (each has its own)."""
    return {
        k: _without_metrics_port(v)
        for k, v in service_commands(config, tmp_path).items()
        if "scheduler" in k
    }


def _without_metrics_port(argv: list[str]) -> list[str]:
    at = argv.index("--metrics-port")
    return argv[:at] + argv[at + 2 :]


def test_by_default_the_schedulers_share_one_lease(tmp_path: Path) -> None:
    schedulers = _schedulers(_config(tmp_path), tmp_path)
    assert sorted(schedulers) == ["scheduler", "scheduler-2"]
    assert schedulers["scheduler"] == schedulers["scheduler-2"]
    assert "--lease-per-pool" not in schedulers["scheduler"]


def test_with_a_lease_per_pool_each_scheduler_prefers_its_share(tmp_path: Path) -> None:
    config = _config(tmp_path, lease_per_pool=True, slurm_cluster="hpc", schedulers=3)
    assert config.pools == ("demo", "hpc")
    schedulers = _schedulers(config, tmp_path)
    tails = {name: argv[argv.index("--lease-per-pool") :] for name, argv in schedulers.items()}
    assert tails == {
        "scheduler": ["--lease-per-pool", "--pools", "demo"],
        "scheduler-2": ["--lease-per-pool", "--pools", "hpc"],
        "scheduler-3": ["--lease-per-pool"],  # none left: it adopts what others leave
    }


def test_pools_are_dealt_out_round_robin() -> None:
    pools = ["p1", "p2", "p3", "p4", "p5"]
    shares = [scheduler_pools(pools, i, 2) for i in range(2)]
    assert shares == [
        ["--lease-per-pool", "--pools", "p1,p3,p5"],
        ["--lease-per-pool", "--pools", "p2,p4"],
    ]


def test_the_scheduler_refuses_pools_without_a_lease_per_pool() -> None:
    result = runner.invoke(app, ["scheduler", "--kafka", "x:1", "--pools", "p1"])
    assert result.exit_code == 2
    assert "--lease-per-pool" in result.output
    result = runner.invoke(app, ["scheduler", "--kafka", "x:1", "--lease-per-pool", "--sole"])
    assert result.exit_code == 2
    adopt = ["--lease-per-pool", "--lease-ttl-s", "10", "--lease-adopt-s", "5"]
    result = runner.invoke(app, ["scheduler", "--kafka", "x:1", *adopt])
    assert result.exit_code == 2


def test_a_simulated_agent_deals_its_nodes_out_over_several_pools() -> None:
    nodes = simulated_nodes("sim", 5, 4, pools=["p1", "p2"])
    assert [(n.name, n.pool) for n in nodes] == [
        ("sim-node-00", "p1"),
        ("sim-node-01", "p2"),
        ("sim-node-02", "p1"),
        ("sim-node-03", "p2"),
        ("sim-node-04", "p1"),
    ]
    assert {n.pool for n in simulated_nodes("sim", 2, 4)} == {None}


def test_the_simulated_agent_refuses_more_pools_than_nodes() -> None:
    result = runner.invoke(
        app, ["agent", "simulated", "--kafka", "x:1", "--nodes", "1", "--pools", "a,b"]
    )
    assert result.exit_code == 2


def test_charging_runs_as_one_host_or_as_named_shards(tmp_path: Path) -> None:
    plain = service_commands(_config(tmp_path), tmp_path)
    assert [k for k in plain if k.startswith("charging")] == ["charging"]
    assert "--instance" not in plain["charging"]
    sharded = service_commands(_config(tmp_path, charging_shards=3), tmp_path)
    shards = {k: v for k, v in sharded.items() if k.startswith("charging")}
    assert sorted(shards) == ["charging-1", "charging-2", "charging-3"]
    # each its own static member of the one group
    assert [v[v.index("--instance") + 1] for _k, v in sorted(shards.items())] == ["1", "2", "3"]
