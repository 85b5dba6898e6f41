"""The Fairshare side of the run: a Kafka (an embedded Apache Kafka, or ``--kafka``'s under a
fresh topic prefix), the budgets the load charges, and the scheduler and the Kubernetes agent,
each its own process started with the command an operator would run (``fairshare scheduler``,
``fairshare agent kubernetes``): one interpreter each, as deployed, so the agent's loop is not
slowed by the benchmark's own threads sharing its GIL.

The agent takes only the run's nodes (``--node-selector`` on the run's label) and only the
run's Jobs (``--scheduler-name`` of the run's own), so other runs and tests on the same
cluster are never touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from events import TopicKind, Topics
from events.models import BudgetCreated, GroupBound, NodeRegistered

if TYPE_CHECKING:
    from services.launcher.children import Child

Report = Callable[[str], None]

#: The budget tree: one leaf, the namespace's default budget.
ROOT_BUDGET = "bench"
LEAF_BUDGET = "bench/kubernetes"


@dataclass(frozen=True)
class ServiceOptions:
    """What the two services are told (the rest are their commands' defaults)."""

    kubeconfig: Path
    cluster: str
    namespace: str
    node_selector: str
    scheduler_name: str
    #: The agent's liveness signals per node (``fairshare agent --heartbeat-s``).
    heartbeat_s: float = 10.0
    #: The scheduler's pass at least this often (``fairshare scheduler --tick-s``).
    tick_s: float = 5.0


@dataclass
class RunningServices:
    bootstrap: str
    topics: Topics
    broker_description: str
    children: list[Child] = field(default_factory=list)
    #: Services that had to be killed when stopped.
    unclean: list[str] = field(default_factory=list)

    def supervise(self) -> None:
        """Raise, saying why, when a service died: nothing would bind the rest."""
        from services.launcher.children import describe_exit, last_log_line

        for child in self.children:
            code = child.process.poll() if child.process is not None else None
            if code is not None:
                raise RuntimeError(
                    f"{child.name} exited ({describe_exit(code)}): {last_log_line(child.log_path)}"
                    f" (its log: {child.log_path})"
                )

    def registered(self, cluster: str) -> set[str]:
        """The nodes of ``cluster`` the log has registered, read up to its end now."""
        from services.agents.serve import read_history

        return {
            envelope.data.node
            for envelope in read_history(self.bootstrap, self.topics, (TopicKind.CLUSTER,))
            if isinstance(envelope.data, NodeRegistered) and envelope.data.cluster == cluster
        }


@contextmanager
def fairshare_services(
    options: ServiceOptions,
    *,
    kafka: str | None,
    data_dir: Path,
    prefix: str,
    report: Report,
) -> Iterator[RunningServices]:
    """The broker, the budgets and the two services, stopped (and the broker with them) on
    exit, whatever ended the run."""
    from services.brokers import external_broker, start_apache_kafka
    from services.bus.admin import ensure_topics
    from services.launcher.children import child_for, spawn_child, stop_children

    if kafka is None:
        report(f"starting Apache Kafka in {data_dir / 'broker'}")
        broker = start_apache_kafka(data_dir / "broker", die_with_parent=True, security="plaintext")
    else:
        broker = external_broker(kafka)
    running: RunningServices | None = None
    try:
        topics = Topics(prefix=prefix)
        ensure_topics(broker.bootstrap, topics)
        seed_budgets(broker.bootstrap, topics, options.cluster, options.namespace)
        running = RunningServices(broker.bootstrap, topics, broker.description)
        logs = data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name, argv in service_commands(options, broker.bootstrap, topics).items():
            child = child_for(name, argv, logs)
            spawn_child(child)
            running.children.append(child)
        report(
            "scheduler and agent started ("
            + ", ".join(f"{c.name} pid {c.process.pid}" for c in running.children if c.process)
            + f"; logs in {logs})"
        )
        yield running
    finally:
        try:
            if running is not None:
                running.unclean = [c.name for c in stop_children(running.children)]
        finally:
            broker.stop()


def service_commands(
    options: ServiceOptions, bootstrap: str, topics: Topics
) -> dict[str, list[str]]:
    """The ``fairshare`` arguments of the scheduler and the agent."""
    common = ["--kafka", bootstrap, "--topic-prefix", topics.prefix]
    # JSON log lines: they carry their time, which says when each thing happened
    return {
        "scheduler": [
            "--log-json", "scheduler", *common,
            "--sole",
            "--tick-s", f"{options.tick_s:g}",
            "--checkpoint-every-s", "0",
        ],
        "agent-kubernetes": [
            "--log-json", "agent", "kubernetes", *common,
            "--cluster", options.cluster,
            "--heartbeat-s", f"{options.heartbeat_s:g}",
            "--checkpoint-every-s", "0",
            "--kubeconfig", str(options.kubeconfig.resolve()),
            "--namespace", options.namespace,
            "--node-selector", options.node_selector,
            "--scheduler-name", options.scheduler_name,
        ],
    }  # fmt: skip


def seed_budgets(bootstrap: str, topics: Topics, cluster: str, namespace: str) -> None:
    """The budget tree (one leaf) and the namespace bound to the leaf as its default, so the
    Jobs name no budget, as most users' would not."""
    from events import new_event
    from services.bus.kafka import KafkaEventPublisher

    publisher = KafkaEventPublisher(bootstrap, topics, client_id="bench-kubernetes")
    now = datetime.now(UTC)
    try:
        for data in (
            BudgetCreated(budget=ROOT_BUDGET, created_by="bench"),
            BudgetCreated(budget=LEAF_BUDGET, created_by="bench"),
            GroupBound(
                budget=LEAF_BUDGET, cluster=cluster, group=namespace, default=True, bound_by="bench"
            ),
        ):
            publisher.publish(new_event(data, source="bench", time=now))
        publisher.flush()
    finally:
        publisher.close()


def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float,
    supervise: Callable[[], None] = lambda: None,
    every_s: float = 0.5,
) -> float:
    """Seconds until ``condition()`` held; RuntimeError after ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        supervise()
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)
    return time.monotonic() - started
