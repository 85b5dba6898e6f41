"""The simulated and the local adapters honour the adapter contract
(tests/agent_adapter_contract.py), which the integration tests hold a real Slurm and a real
Kubernetes to as well."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from services.agents.local import LocalAdapter
from services.agents.simulated import SimulatedAdapter, simulated_nodes
from tests import agent_adapter_contract as contract
from tests.unit.test_agents import FakeClock


class SimulatedCluster:
    """Simulated nodes on a clock moved by hand: every incarnation shares it."""

    executor = "simulated"
    adopts: contract.Adopts = "all"
    timeout_s = 3600.0
    poll_s = 1.0
    settle_s = 0.0
    grace_s = 10.0
    term_exit = 143
    kill_exit = 143  # it plays a run that exits at the kill as one that exits on SIGTERM

    def __init__(self) -> None:
        self.clock = FakeClock()

    def adapter(self) -> SimulatedAdapter:
        return SimulatedAdapter(simulated_nodes("c1", 2, 4, "h100"), clock=self.clock)

    def spec(
        self, *, seconds: float | None = None, exit_code: int = 0, ignores_sigterm: bool = False
    ) -> dict[str, object]:
        spec: dict[str, object] = {"exit_code": exit_code}
        if seconds is not None:
            spec["duration_s"] = seconds
        if ignores_sigterm:
            spec["stop_s"] = 1e9
        return spec

    def unrunnable(self) -> dict[str, object] | None:
        return None

    def now(self) -> float:
        return self.clock()

    def sleep(self, seconds: float) -> None:
        self.clock.advance(seconds)


class LocalCluster(contract.ShellCommands):
    """This machine: real processes, virtual GPU slots."""

    executor = "local"
    spin_s = 0.05
    adopts: contract.Adopts = "none"
    timeout_s = 10.0
    poll_s = 0.05
    settle_s = 0.5
    grace_s = 1.0
    term_exit = 143
    kill_exit = 137

    def __init__(self, tmp_path: Path) -> None:
        self.logs = tmp_path / "logs"

    def adapter(self) -> LocalAdapter:
        return LocalAdapter("box", virtual_gpus=4, use_nvml=False, log_dir=self.logs)


Case = Callable[[contract.Cluster], None]


@pytest.mark.parametrize("case", contract.CASES, ids=lambda c: c.__name__)
def test_the_simulated_adapter_honours_the_contract(case: Case) -> None:
    case(SimulatedCluster())


@pytest.mark.parametrize("case", contract.CASES, ids=lambda c: c.__name__)
def test_the_local_adapter_honours_the_contract(case: Case, tmp_path: Path) -> None:
    case(LocalCluster(tmp_path))
