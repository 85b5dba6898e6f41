"""The stack a load benchmark runs against: ``fairshare up``'s services (every one its own
process, two schedulers under one lease, ``UpConfig``'s defaults for ticks and heartbeats) on
an embedded Apache Kafka broker, or on ``bootstrap``'s under a fresh topic prefix, with a
simulated cluster of the given shape and no demo stream."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from events import Topics

Report = Callable[[str], None]


@dataclass
class BenchStack:
    stack: Any  # services.launcher.Stack (imported lazily: the launcher pulls in much)
    topics: Topics
    broker_description: str
    #: Services that did not stop cleanly, known once the stack stopped.
    unclean: list[str] = field(default_factory=list)


@contextmanager
def bench_stack(
    *,
    name: str,
    nodes: int,
    gpus_per_node: int,
    data_dir: Path,
    bootstrap: str | None,
    report: Report,
) -> Iterator[BenchStack]:
    from services.brokers import external_broker, free_port, start_embedded_broker
    from services.launcher import Stack, UpConfig
    from services.launcher.identities import stack_identities

    if bootstrap is None:
        report(f"starting Apache Kafka in {data_dir / 'broker'}")
        # secured as ``fairshare up`` starts it: every service its own principal over SASL_SSL
        broker, _ = start_embedded_broker(data_dir / "broker", "apache-kafka")
        topics = Topics(prefix=f"{name}.")
    else:
        broker = external_broker(bootstrap)
        topics = Topics(prefix=f"{name}-{uuid.uuid4().hex[:8]}.")
    up = UpConfig(
        bootstrap=broker.bootstrap,
        topics=topics,
        data_dir=data_dir,
        database_url=f"sqlite:///{data_dir.resolve()}/fairshare.db",
        api_port=free_port(),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        submit_every_s=0,
    )
    try:
        with stack_identities(broker, up, report) as secured:
            stack = Stack(secured)
            running = BenchStack(stack, topics, broker.description)
            try:
                stack.start()
                stack.wait_for_api(timeout_s=240, report=report)
                wait_for_nodes(stack, nodes, report)
                yield running
            finally:
                running.unclean = stack.stop()
    finally:
        broker.stop()


def wait_for_nodes(stack: Any, nodes: int, report: Report, timeout_s: float = 120) -> None:
    """Until the API shows every simulated node: a submission before that would wait for its
    node to register, which is start-up, not what a benchmark measures."""
    from services.client.api import FairshareClient

    deadline = time.monotonic() + timeout_s
    with FairshareClient(stack.config.api_url, "admin-token", timeout_s=10) as client:
        while time.monotonic() < deadline:
            stack.supervise(report)
            try:
                seen = len(client.request("GET", "/nodes")["nodes"])
            except Exception:  # the API still starting
                seen = 0
            if seen >= nodes:
                return
            time.sleep(0.5)
    raise RuntimeError(f"the API did not show {nodes} nodes within {timeout_s:.0f} s")
