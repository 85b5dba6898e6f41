"""A real Slurm for the Slurm agent's tests, and the running system around it.

Slurm is the one ``.ci/start-slurm`` starts (found through ``sinfo``, like a person would).
Without it the tests are skipped with the reason, or fail under ``FAIRSHARE_REQUIRE_SLURM=1``
(CI). Each test takes a Fairshare cluster name of its own, so the jobs of one test are foreign
to the next, and cancels its jobs when it ends.

:class:`Stack` is the system as ``fairshare up`` runs it, minus the processes: the scheduler
service and the Slurm agent in threads over the session's Kafka, and the HTTP API (its FastAPI
app over a Kafka-backed view) through a test client.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.agents.agent import AgentSettings
from services.agents.slurm import SlurmAdapter, SlurmAgent
from services.agents.slurm.adapter import NativeOptions
from services.agents.slurm.commands import SlurmCli, SlurmError
from services.agents.slurm.parse import parse_squeue
from services.agents.slurm.submit import SubmitOptions
from tests.integration.cluster_stack import ADMIN, ANA, BO, ClusterStack, wait_until
from tests.integration.kafka_bus import KafkaBus

JOBCOMP_LOG = Path("/var/log/fairshare-slurm/jobcomp.log")
#: What Fairshare's job_submit plugin (deploy/slurm/job_submit.lua) reads on every submission;
#: the agent keeps it in production. The plugin refuses or holds a job on Fairshare's partition
#: ``gpu`` unless it is one of the agent's runs: named ``<workload>+<attempt>+<cluster>`` after
#: the file's ``cluster=``, by one of its ``agent_uid=``.
BINDINGS_FILE = Path("/etc/slurm/fairshare-bindings")
# what the Slurm tests import from here, defined with the stack they share with Kubernetes'
__all__ = ["ADMIN", "ANA", "BO", "Stack", "require_slurm", "running_stack", "wait_until"]


def pytest_configure(config: pytest.Config) -> None:
    """The marker, when this module is loaded as a plugin (``-p``) before pyproject has it."""
    config.addinivalue_line("markers", "slurm: needs a real Slurm (bash .ci/start-slurm)")


def agent_bindings(cluster: str, *accounts: tuple[str, str], pool_gpus: int = 16) -> str:
    """A bindings file for a Fairshare cluster of this name on the test cluster's partition
    ``gpu``, whose agent runs as this process's uid; ``accounts``: (account, budget) pairs."""
    lines = [f"cluster={cluster}", "partition=gpu", "largest_node_gpus=8"]
    lines += [f"pool_gpus={pool_gpus}", f"agent_uid={os.getuid()}"]
    lines += [f"account={account} budget={budget}" for account, budget in accounts]
    return "\n".join(lines) + "\n"


@contextmanager
def bindings_file(text: str | None) -> Iterator[Path]:
    """:data:`BINDINGS_FILE` says ``text`` (None: there is none) while the block runs, then
    what it said before; written whole, as the agent writes it."""

    def put(content: bytes | None) -> None:
        if content is None:
            BINDINGS_FILE.unlink(missing_ok=True)
            return
        temporary = BINDINGS_FILE.with_name(f".{BINDINGS_FILE.name}.test")
        temporary.write_bytes(content)
        temporary.chmod(0o644)
        os.replace(temporary, BINDINGS_FILE)

    before = BINDINGS_FILE.read_bytes() if BINDINGS_FILE.exists() else None
    put(None if text is None else text.encode())
    try:
        yield BINDINGS_FILE
    finally:
        put(before)


@dataclass(frozen=True)
class SlurmCluster:
    nodes: tuple[str, ...]
    gpus: dict[str, int]


def _find_slurm() -> SlurmCluster | str:
    """The cluster, or why there is none."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no Slurm commands (sinfo, sbatch) on PATH: run `bash .ci/start-slurm`"
    try:
        adapter = SlurmAdapter(SlurmCli(timeout_s=10), cluster="probe")
    except SlurmError as error:
        return f"Slurm does not answer ({error}): run `bash .ci/start-slurm`"
    specs = adapter.nodes()
    return SlurmCluster(tuple(s.name for s in specs), {s.name: s.gpus for s in specs})


def require_slurm() -> SlurmCluster:
    """The running Slurm; without one, skip (the reason shows with ``-ra``) or, under
    ``FAIRSHARE_REQUIRE_SLURM=1``, fail."""
    found = _find_slurm()
    if isinstance(found, str):
        if os.environ.get("FAIRSHARE_REQUIRE_SLURM") == "1":
            pytest.fail(f"Slurm required (FAIRSHARE_REQUIRE_SLURM=1) but: {found}")
        pytest.skip(found)
    return found


def cancel_jobs_of(cluster: str) -> None:
    """Cancel what is left in Slurm of a test's Fairshare cluster."""
    cli = SlurmCli()
    for job in parse_squeue(cli.list_jobs()):
        tag = job.tag
        if tag is not None and tag.cluster == cluster and not job.ended:
            with contextlib.suppress(SlurmError):  # ended meanwhile
                cli.cancel(job.job_id)


class Stack(ClusterStack):
    """Scheduler, Slurm agent and API over one test's topics and one Fairshare cluster."""

    def __init__(
        self,
        bus: KafkaBus,
        out: Path,
        *,
        drain_in_slurm: bool = False,
        native: NativeOptions | None = None,
    ) -> None:
        super().__init__(bus, f"slurm-{uuid.uuid4().hex[:8]}")
        self.out = out
        self.drain_in_slurm = drain_in_slurm
        #: Native work (the test cluster's partition ``gpu``, the plugin's bindings file), and
        #: the jobs a test sent with sbatch (cancelled at the end).
        self.native = native
        self.native_jobs: list[str] = []
        self.agent: SlurmAgent | None = None
        # Without native work the agent writes no bindings file: one naming this cluster lets
        # its runs through the job_submit plugin, as the agent's own file would.
        self._bindings = contextlib.ExitStack()
        if native is None and BINDINGS_FILE.parent.is_dir():
            self._bindings.enter_context(bindings_file(agent_bindings(self.cluster)))

    def start_agent(self) -> SlurmAgent:
        adapter = SlurmAdapter(
            SlurmCli(jobcomp_log=JOBCOMP_LOG if JOBCOMP_LOG.exists() else None),
            cluster=self.cluster,
            submit_options=SubmitOptions(output_dir=str(self.out)),
            refresh_s=0.3,
            pending_timeout_s=120.0,
            drain_in_slurm=self.drain_in_slurm,
            native=self.native,
        )
        settings = AgentSettings(self.cluster, self.pool, heartbeat_s=1.0)
        agent = SlurmAgent(adapter, self.bus.publisher(), settings)
        self.agent = agent
        self.run_agent(agent)
        return agent

    def close(self) -> None:
        try:
            super().close()
        finally:
            cancel_jobs_of(self.cluster)
            for job_id in self.native_jobs:
                subprocess.run(["scancel", job_id], capture_output=True, check=False)
            self._bindings.close()

    def jobs(self) -> list[Any]:
        """This cluster's jobs in Slurm, finished ones included."""
        return [
            job
            for job in parse_squeue(SlurmCli().list_jobs())
            if job.tag is not None and job.tag.cluster == self.cluster
        ]


@contextmanager
def running_stack(bus: KafkaBus, out: Path, **kwargs: Any) -> Iterator[Stack]:
    out.mkdir(parents=True, exist_ok=True)
    stack = Stack(bus, out, **kwargs)
    try:
        yield stack
    finally:
        stack.close()
