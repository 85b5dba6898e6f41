"""The running system around a cluster agent under test, minus the processes: the scheduler
service and the agent in threads over the session's Kafka, and the HTTP API (its FastAPI app
over a Kafka-backed view) through a test client. The Slurm and Kubernetes agents' tests each
add their agent (``slurm_fixtures.Stack``, ``kubernetes_stack.KubernetesStack``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi.testclient import TestClient

from events import new_event
from events.models import BudgetCreated, EventData, MembershipGranted
from services.agents.agent import ClusterAgent
from services.agents.serve import run_on_kafka
from services.api import LiveView, create_app, default_tokens
from services.scheduler.host import SchedulerConfig
from services.scheduler.serve import kafka_scheduler
from tests.integration.kafka_bus import KafkaBus

ADMIN = {"Authorization": "Bearer admin-token"}
ANA = {"Authorization": "Bearer ana-token"}
BO = {"Authorization": "Bearer bo-token"}


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.2)


class LoopThread:
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

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "did not stop"
        assert self.errors == []


class ClusterStack:
    """Scheduler, one agent and the API over one test's topics and one Fairshare cluster."""

    def __init__(self, bus: KafkaBus, cluster: str) -> None:
        self.bus = bus
        self.cluster = cluster
        self.pool = cluster
        self._agent_thread: LoopThread | None = None
        self._scheduler_thread: LoopThread | None = None
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

    def run_agent(self, agent: ClusterAgent) -> None:
        """Run ``agent`` over the session's Kafka in a thread, until it registered its nodes."""
        bootstrap, topics = self.bus.broker.bootstrap, self.bus.topics

        def body(should_stop: Callable[[], bool]) -> None:
            run_on_kafka(agent, bootstrap, topics, should_stop, poll_s=0.1)

        self._agent_thread = LoopThread(f"agent-{self.cluster}", body)
        wait_until(lambda: agent.started, "the agent to register its nodes")

    def stop_agent(self) -> None:
        if self._agent_thread is not None:
            self._agent_thread.stop()
            self._agent_thread = None

    def start_scheduler(self) -> None:
        config = SchedulerConfig(tick_s=1.0, grace_period_s=5, heartbeat_timeout_s=60, poll_s=0.1)
        service = kafka_scheduler(self.bus.broker.bootstrap, self.bus.topics, config=config)
        self._scheduler_thread = LoopThread("scheduler", service.run)

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
