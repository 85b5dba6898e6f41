"""The main job for now: a small lab publishing its facts through a real broker and reading
them back, end to end through the same bus, serde and dead-letter path every service uses.

It grows into the full ``fairshare up`` (API, scheduler, projections, agents) in later issues;
what it shows today is that the event language survives a real Kafka-protocol round trip.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from events import Envelope, TopicKind, Topics, new_event
from events.models import (
    BudgetCreated,
    EventData,
    GpuHeartbeat,
    GpuReading,
    MembershipGranted,
    NodeRegistered,
    WorkloadSubmitted,
)
from services.bus.admin import ensure_topics
from services.bus.kafka import KafkaEventPublisher, KafkaEventSubscriber
from services.bus.port import Delivery

CLUSTER = "demo-cluster"
POOL = "demo-pool"
NODES = ("node-01", "node-02")
GPUS_PER_NODE = 4


def opening_facts() -> list[EventData]:
    """A two-team lab, two nodes and a few workloads: the facts a scheduler would start from."""
    facts: list[EventData] = [
        BudgetCreated(budget="lab", weight=1.0, created_by="admin"),
        BudgetCreated(budget="lab/vision", weight=2.0, created_by="admin"),
        BudgetCreated(budget="lab/robotics", weight=1.0, created_by="admin"),
        MembershipGranted(budget="lab/vision", user="ana", role="member", granted_by="admin"),
        MembershipGranted(budget="lab/robotics", user="bo", role="member", granted_by="admin"),
    ]
    facts += [
        NodeRegistered(node=n, cluster=CLUSTER, pool=POOL, gpus=GPUS_PER_NODE, gpu_type="virtual")
        for n in NODES
    ]
    for i, (budget, user, gpus, contract) in enumerate(
        [
            ("lab/vision", "ana", 2, 3600),
            ("lab/robotics", "bo", 4, 1800),
            ("lab/vision", "ana", 1, 0),
        ]
    ):
        facts.append(
            WorkloadSubmitted(
                workload_id=f"demo-{i}",
                budget=budget,
                pools=(POOL,),
                gpus=gpus,
                min_runtime_s=contract,
                submitter=user,
                spec={"command": ["sleep", "60"], "duration_s": 60},
            )
        )
    return facts


def heartbeats(sequence: int) -> list[GpuHeartbeat]:
    """Idle GPUs with a gently varying reading (nothing is scheduled yet in this demo)."""
    return [
        GpuHeartbeat(
            node=node,
            cluster=CLUSTER,
            sequence=sequence,
            gpus=tuple(
                GpuReading(
                    index=g,
                    utilisation_pct=float((sequence * 7 + g * 13) % 10),
                    memory_used_bytes=0,
                    memory_total_bytes=80 << 30,
                )
                for g in range(GPUS_PER_NODE)
            ),
        )
        for node in NODES
    ]


def summarise(envelope: Envelope[Any]) -> str:
    data = envelope.data
    if isinstance(data, WorkloadSubmitted):
        return f"{data.gpus} GPU(s) for {data.budget}, contract {data.min_runtime_s}s"
    if isinstance(data, GpuHeartbeat):
        busy = sum(1 for gpu in data.gpus if gpu.occupant)
        return f"{len(data.gpus)} GPUs, {busy} busy"
    if isinstance(data, BudgetCreated):
        return f"weight {data.weight:g}"
    if isinstance(data, NodeRegistered):
        return f"{data.gpus} x {data.gpu_type} in {data.pool}"
    if isinstance(data, MembershipGranted):
        return f"{data.user} is {data.role}"
    return ""


@dataclass
class DemoResult:
    published: Counter[str] = field(default_factory=Counter)
    read_back: Counter[str] = field(default_factory=Counter)
    mismatched: int = 0

    @property
    def intact(self) -> bool:
        return self.published == self.read_back and self.mismatched == 0


def run_demo(
    bootstrap: str,
    *,
    topics: Topics,
    duration_s: float | None,
    console: Console,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> DemoResult:
    """Publish the opening facts, then a heartbeat round per second; read everything back."""
    run_id = uuid.uuid4().hex[:8]
    source = f"fairshare/demo/{run_id}"
    ensure_topics(bootstrap, topics)
    publisher = KafkaEventPublisher(bootstrap, topics, client_id=f"demo-{run_id}")
    subscriber = KafkaEventSubscriber(
        bootstrap, f"fairshare-demo-{run_id}", list(TopicKind), topics
    )
    sent: dict[str, Envelope[Any]] = {}
    result = DemoResult()

    def publish(batch: list[EventData]) -> None:
        for data in batch:
            envelope = new_event(data, source=source, time=clock())
            sent[envelope.id] = envelope
            publisher.publish(envelope)
            result.published[envelope.type] += 1
        publisher.flush()

    console.print(f"[bold]run {run_id}[/]: publishing to {bootstrap} (topics {topics.prefix}*)")
    console.print("events as read back from the broker (heartbeats: first rounds only):")
    publish(opening_facts())
    deadline = None if duration_s is None else time.monotonic() + duration_s
    sequence = itertools.count()
    try:
        with stop_requested_on_signals() as stop_requested:
            while not stop_requested() and (deadline is None or time.monotonic() < deadline):
                publish(list(heartbeats(next(sequence))))
                for delivery in _poll_for(subscriber, 1.0):
                    _record(delivery, sent, result, console, source)
            # Read back whatever is still in flight, for an exact tally.
            wait_until = time.monotonic() + 15
            while result.read_back != result.published and time.monotonic() < wait_until:
                for delivery in subscriber.poll(timeout_s=0.5):
                    _record(delivery, sent, result, console, source)
            subscriber.commit()
    finally:
        subscriber.close()
        publisher.close()
    console.print(_tally(result))
    total = sum(result.published.values())
    if result.intact:
        console.print(f"[green]all {total} events read back intact[/] through {bootstrap}")
    else:
        console.print(
            f"[red]mismatch:[/] published {dict(result.published)}, "
            f"read back {dict(result.read_back)}, {result.mismatched} altered"
        )
    return result


def _poll_for(subscriber: KafkaEventSubscriber, seconds: float) -> Iterator[Delivery]:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        yield from subscriber.poll(timeout_s=max(0.05, until - time.monotonic()))


def _record(
    delivery: Delivery,
    sent: dict[str, Envelope[Any]],
    result: DemoResult,
    console: Console,
    source: str,
) -> None:
    envelope = delivery.envelope
    if envelope.source != source:
        return  # an earlier run's events, still in the durable log
    result.read_back[envelope.type] += 1
    if sent.get(envelope.id) != envelope:
        result.mismatched += 1
    if not isinstance(envelope.data, GpuHeartbeat) or envelope.data.sequence < 2:
        position = delivery.position
        console.print(
            f"  {envelope.time:%H:%M:%S} [cyan]{envelope.type.removeprefix('fairshare.')}[/] "
            f"[bold]{envelope.subject}[/] {summarise(envelope)} "
            f"[dim]({position.topic}/{position.partition}@{position.offset})[/]",
            highlight=False,
        )


def _tally(result: DemoResult) -> Table:
    table = Table("event type", "published", "read back", title="round trip")
    for event_type in sorted(result.published | result.read_back):
        table.add_row(
            event_type, str(result.published[event_type]), str(result.read_back[event_type])
        )
    return table


@contextmanager
def stop_requested_on_signals() -> Iterator[Callable[[], bool]]:
    """Ctrl-C / SIGTERM ask the loop to finish its round, so the tally stays exact."""
    requested = False

    def handle(_signum: int, _frame: object) -> None:
        nonlocal requested
        requested = True

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
