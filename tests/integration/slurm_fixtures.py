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
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from events import new_event
from events.models import BudgetCreated, EventData, MembershipGranted
from services.agents.host import run_on_kafka
from services.agents.slurm import SlurmAdapter
from services.agents.slurm_agent import SlurmAgent
from services.agents.slurm_commands import SlurmCli, SlurmError
from services.agents.slurm_parse import parse_squeue
from services.agents.slurm_submit import SubmitOptions
from services.api import LiveView, create_app, default_tokens
from services.scheduler.service import SchedulerConfig, SchedulerService
from tests.integration.kafka_bus import KafkaBus

JOBCOMP_LOG = Path("/var/log/fairshare-slurm/jobcomp.log")
ADMIN = {"Authorization": "Bearer admin-token"}
ANA = {"Authorization": "Bearer ana-token"}
BO = {"Authorization": "Bearer bo-token"}


def pytest_configure(config: pytest.Config) -> None:
    """The marker, when this module is loaded as a plugin (``-p``) before pyproject has it."""
    config.addinivalue_line("markers", "slurm: needs a real Slurm (bash .ci/start-slurm)")


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


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.2)


def cancel_jobs_of(cluster: str) -> None:
    """Cancel what is left in Slurm of a test's Fairshare cluster."""
    cli = SlurmCli()
    for job in parse_squeue(cli.list_jobs()):
        tag = job.tag
        if tag is not None and tag.cluster == cluster and not job.ended:
            with contextlib.suppress(SlurmError):  # ended meanwhile
                cli.cancel(job.job_id)


class _Thread:
    """A loop in a thread, stopped by an event; errors surface on stop."""

    def __init__(self, name: str, body: Callable[[Callable[[], bool]], None]) -> None:
        self._stop = threading.Event()
        self.errors: list[BaseException] = []

        def run() -> None:
            try:
                body(self._stop.is_set)
            except BaseException as error:
                self.errors.append(error)

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "did not stop"
        assert self.errors == []


class Stack:
    """Scheduler, Slurm agent and API over one test's topics and one Fairshare cluster."""

    def __init__(self, bus: KafkaBus, out: Path, *, drain_in_slurm: bool = False) -> None:
        self.bus = bus
        self.out = out
        self.cluster = f"slurm-{uuid.uuid4().hex[:8]}"
        self.pool = self.cluster
        self.drain_in_slurm = drain_in_slurm
        self.agent: SlurmAgent | None = None
        self._agent_thread: _Thread | None = None
        self._scheduler_thread: _Thread | None = None
        self.view: LiveView | None = None
        self.client: TestClient | None = None

    # -- parts -----------------------------------------------------------------------------
    def seed(self, *facts: EventData) -> None:
        publisher = self.bus.publisher()
        now = datetime.now(UTC)
        for data in facts:
            publisher.publish(new_event(data, source="tests", time=now))
        publisher.flush()

    def seed_lab(self) -> None:
        """Budgets lab/a (ana) and lab/b (bo), weight 1 each."""
        self.seed(
            BudgetCreated(budget="lab", created_by="admin"),
            BudgetCreated(budget="lab/a", created_by="admin"),
            BudgetCreated(budget="lab/b", created_by="admin"),
            MembershipGranted(budget="lab/a", user="ana", role="member", granted_by="admin"),
            MembershipGranted(budget="lab/b", user="bo", role="member", granted_by="admin"),
        )

    def start_agent(self) -> SlurmAgent:
        adapter = SlurmAdapter(
            SlurmCli(jobcomp_log=JOBCOMP_LOG if JOBCOMP_LOG.exists() else None),
            cluster=self.cluster,
            submit_options=SubmitOptions(output_dir=str(self.out)),
            refresh_s=0.3,
            pending_timeout_s=120.0,
        )
        agent = SlurmAgent(
            adapter,
            self.bus.publisher(),
            cluster=self.cluster,
            pool=self.pool,
            heartbeat_s=1.0,
            drain_in_slurm=self.drain_in_slurm,
        )
        bootstrap, topics = self.bus.broker.bootstrap, self.bus.topics

        def body(should_stop: Callable[[], bool]) -> None:
            run_on_kafka(agent, bootstrap, topics, should_stop, poll_s=0.1)

        self.agent = agent
        self._agent_thread = _Thread(f"agent-{self.cluster}", body)
        wait_until(lambda: agent.started, "the agent to register its nodes")
        return agent

    def stop_agent(self) -> None:
        if self._agent_thread is not None:
            self._agent_thread.stop()
            self._agent_thread = None

    def start_scheduler(self) -> None:
        config = SchedulerConfig(tick_s=1.0, grace_period_s=5, heartbeat_timeout_s=60, poll_s=0.1)
        service = SchedulerService.over_kafka(
            self.bus.broker.bootstrap, self.bus.topics, config=config
        )
        self._scheduler_thread = _Thread("scheduler", service.run)

    def start_api(self) -> TestClient:
        self.view = LiveView.from_kafka(self.bus.broker.bootstrap, self.bus.topics)
        self.view.start()
        assert self.view.wait_caught_up(60.0), "the API's view did not catch up"
        self.client = TestClient(create_app(self.view, self.bus.publisher(), default_tokens()))
        return self.client

    def close(self) -> None:
        try:
            self.stop_agent()
            if self._scheduler_thread is not None:
                self._scheduler_thread.stop()
        finally:
            if self.view is not None:
                self.view.stop()
            cancel_jobs_of(self.cluster)

    # -- reading ---------------------------------------------------------------------------
    def api(self) -> TestClient:
        assert self.client is not None
        return self.client

    def workload(self, workload_id: str) -> dict[str, Any]:
        response = self.api().get(f"/workloads/{workload_id}", headers=ADMIN)
        if response.status_code == 404:
            return {}
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def node(self, name: str) -> dict[str, Any]:
        response = self.api().get("/nodes", headers=ADMIN)
        assert response.status_code == 200, response.text
        nodes: list[dict[str, Any]] = response.json()["nodes"]
        return next(n for n in nodes if n["node"] == name)

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
