"""The Slurm adapter honours the adapter contract (tests/agent_adapter_contract.py) over a real
Slurm (``bash .ci/start-slurm``): each case under a Fairshare cluster name of its own, so that
no case sees another's jobs, and its jobs cancelled when it ends."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.agents.slurm import SlurmAdapter
from services.agents.slurm.commands import SlurmCli
from services.agents.slurm.submit import SubmitOptions
from tests import agent_adapter_contract as contract
from tests.integration.slurm_fixtures import (
    JOBCOMP_LOG,
    SlurmCluster,
    agent_bindings,
    bindings_file,
    cancel_jobs_of,
    require_slurm,
)

pytestmark = [pytest.mark.slurm]


class RealSlurm(contract.ShellCommands):
    """The Slurm of ``.ci/start-slurm``, under one Fairshare cluster's name."""

    executor = "slurm"
    spin_s = 0.2
    adopts: contract.Adopts = "found"
    timeout_s = 60.0
    poll_s = 0.3
    settle_s = 3.0
    grace_s = 4.0
    # what Slurm reports of a job killed by a signal is its own: the cases check that it
    # did not succeed
    term_exit = None
    kill_exit = None

    def __init__(self, out: Path) -> None:
        self.cluster = f"contract-{uuid.uuid4().hex[:8]}"
        self.out = out

    def adapter(self) -> SlurmAdapter:
        return SlurmAdapter(
            SlurmCli(jobcomp_log=JOBCOMP_LOG if JOBCOMP_LOG.exists() else None),
            cluster=self.cluster,
            submit_options=SubmitOptions(output_dir=str(self.out)),
            refresh_s=0.3,
            pending_timeout_s=120.0,
        )


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    return require_slurm()


@pytest.fixture
def real_slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[RealSlurm]:
    out = tmp_path / "slurm-out"
    out.mkdir()
    cluster = RealSlurm(out)
    try:
        # the job_submit plugin lets the agent's own runs through for the cluster it names
        with bindings_file(agent_bindings(cluster.cluster)):
            yield cluster
    finally:
        cancel_jobs_of(cluster.cluster)


@pytest.mark.parametrize("case", contract.CASES, ids=lambda c: c.__name__)
def test_the_slurm_adapter_honours_the_contract(
    case: Callable[[contract.Cluster], None], real_slurm: RealSlurm
) -> None:
    case(real_slurm)
