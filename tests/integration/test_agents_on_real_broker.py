"""The simulated agent through a real Kafka: facts and commands in; registrations, starts, ends
and heartbeats out; a restart publishes nothing twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from events import TopicKind, new_event
from events.envelope import Envelope
from events.models import (
    DecisionRecord,
    EventData,
    GpuHeartbeat,
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
    WorkloadSubmitted,
)
from services.agents import (
    AgentSettings,
    ClusterAgent,
    SimulatedAdapter,
    read_history,
    run_on_kafka,
    simulated_nodes,
)
from tests.integration.kafka_bus import KafkaBus

pytestmark = [pytest.mark.broker]

CLUSTER, POOL = "kc", "kc-pool"


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class AgentThread:
    def __init__(self, bus: KafkaBus, checkpoint_every_s: float | None = None) -> None:
        self.agent = ClusterAgent(
            SimulatedAdapter(simulated_nodes(CLUSTER, 2, 4, "h100")),
            bus.publisher(),
            AgentSettings(CLUSTER, POOL, heartbeat_s=0.3),
        )
        self._stop = threading.Event()
        self.errors: list[BaseException] = []

        def run() -> None:
            try:
                run_on_kafka(
                    self.agent,
                    bus.broker.bootstrap,
                    bus.topics,
                    self._stop.is_set,
                    poll_s=0.1,
                    checkpoint_every_s=checkpoint_every_s,
                )
            except BaseException as error:  # surfaced by stop()
                self.errors.append(error)

        self._thread = threading.Thread(target=run, name="agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()
        assert self.errors == []


def _published(bus: KafkaBus, *types: type[EventData]) -> list[Envelope[Any]]:
    history = read_history(bus.broker.bootstrap, bus.topics, list(TopicKind))
    return [e for e in history if isinstance(e.data, types)]


def test_the_simulated_agent_runs_a_placed_workload_through_kafka(bus: KafkaBus) -> None:
    # Long on purpose: one workload's life through a real broker, each step waiting on the
    # facts the previous one produced.
    now = datetime.now(UTC)
    publisher = bus.publisher()

    def publish(data: EventData) -> None:
        publisher.publish(new_event(data, source="tests", time=now))

    node0, node1 = f"{CLUSTER}-node-00", f"{CLUSTER}-node-01"
    # One node registered by hand already (same shape: the agent leaves it), one not.
    publish(NodeRegistered(node=node0, cluster=CLUSTER, pool=POOL, gpus=4, gpu_type="h100"))
    publish(
        WorkloadSubmitted(
            workload_id="w1",
            budget="lab/a",
            pools=(POOL,),
            gpus=2,
            min_runtime_s=60,
            submitter="bo",
            spec={"duration_s": 1.0},
        )
    )
    publisher.flush()

    first = AgentThread(bus)
    try:
        _wait(lambda: set(first.agent.state.cluster.nodes) == {node0, node1}, "registration")
        placement = Placement(nodes=(NodeGpus(node=node1, gpus=(2, 3)),))
        publish(
            PlaceCommand(
                command_id="place-w1-1",
                cluster=CLUSTER,
                pool=POOL,
                workload_id="w1",
                attempt=1,
                budget="lab/a",
                placement=placement,
                allocated=True,
                min_runtime_s=60,
                spec={"duration_s": 1.0},
                decision=DecisionRecord(pass_id=1, input_position=(), reason="fairshare"),
            )
        )
        publish(
            WorkloadPlaced(
                workload_id="w1",
                attempt=1,
                pool=POOL,
                placement=placement,
                allocated=True,
                command_id="place-w1-1",
            )
        )
        publisher.flush()
        workloads = first.agent.state.cluster.workloads
        _wait(lambda: workloads["w1"].status == "succeeded", "the finish, read back")
    finally:
        first.stop()

    started = [e.data for e in _published(bus, WorkloadStarted)]
    assert [(s.workload_id, s.attempt, s.pool, s.allocated) for s in started] == [
        ("w1", 1, POOL, True)
    ]
    assert started[0].placement == placement
    finished = [e.data for e in _published(bus, WorkloadFinished)]
    assert [(f.workload_id, f.outcome, f.exit_code) for f in finished] == [("w1", "succeeded", 0)]
    registered = [e for e in _published(bus, NodeRegistered) if e.source != "tests"]
    assert [e.data.node for e in registered] == [node1]
    beats = [e.data for e in _published(bus, GpuHeartbeat)]
    assert {b.node for b in beats} == {node0, node1}
    occupied = [
        (g.index, g.attempt) for b in beats if b.node == node1 for g in b.gpus if g.occupant == "w1"
    ]
    assert set(occupied) == {(2, 1), (3, 1)}

    # A restart rebuilds its state from the log and publishes no fact twice.
    second = AgentThread(bus)
    try:
        _wait(lambda: second.agent.started, "the restarted agent to catch up")
        _wait(lambda: second.agent.published["alive"] >= 4, "two rounds of liveness signals")
        assert second.agent.state.cluster.workloads["w1"].status == "succeeded"
    finally:
        second.stop()
    assert len(_published(bus, WorkloadStarted)) == 1
    assert len(_published(bus, WorkloadFinished)) == 1
    assert len(_published(bus, NodeRegistered)) == 2
    assert second.agent.published["registered"] == 0


def test_a_restarted_agent_reads_only_the_tail_after_its_checkpoint(bus: KafkaBus) -> None:
    """Issue 23: an agent killed on a long history is back from the latest checkpoint of its
    fold (saved as soon as its first catch-up ended), reading only what came after it."""
    from services.bus.checkpoints import KafkaCheckpoints

    now = datetime.now(UTC)
    publisher = bus.publisher()
    for n in range(50):
        submission = WorkloadSubmitted(
            workload_id=f"c{n}",
            budget="lab/a",
            pools=(POOL,),
            gpus=1,
            min_runtime_s=60,
            submitter="bo",
        )
        publisher.publish(new_event(submission, source="tests", time=now))
    publisher.flush()
    store = KafkaCheckpoints(bus.broker.bootstrap, bus.topics, f"agent-{CLUSTER}")
    first = AgentThread(bus, checkpoint_every_s=3600)
    try:
        _wait(lambda: first.agent.started, "the first catch-up")
        _wait(lambda: store.load() is not None, "its checkpoint, saved once caught up")
    finally:
        first.stop()
    assert first.agent.caught_up_events >= 50
    second = AgentThread(bus, checkpoint_every_s=3600)
    try:
        _wait(lambda: second.agent.started, "the restart's catch-up")
        assert second.agent.state.cluster.workloads.keys() >= {f"c{n}" for n in range(50)}
    finally:
        second.stop()
    assert second.agent.caught_up_events < first.agent.caught_up_events
    assert second.agent.published["registered"] == 0, "its nodes came with the checkpoint"
