"""The cluster agent's reconcile loop over the in-memory bus, with a fake clock.

The simulated adapter plays the cluster; every test reads back what the agent published."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pytest

from events.envelope import Envelope, new_event
from events.models import (
    DecisionRecord,
    EventData,
    GpuHeartbeat,
    NodeAlive,
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.commands import ReasonCode
from events.topics import TopicKind
from services.agents import (
    AGENT_TOPICS,
    CATCH_UP_TOPICS,
    AgentLoop,
    AgentSettings,
    ClusterAdapter,
    ClusterAgent,
    SimulatedAdapter,
    fact_id,
    host_agent,
    simulated_nodes,
)
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber

T0 = 1_790_000_000.0
CLUSTER, POOL = "c1", "p1"
NODE0, NODE1 = "c1-node-00", "c1-node-01"


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def drain(subscriber: InMemorySubscriber) -> list[Envelope[Any]]:
    out: list[Envelope[Any]] = []
    while batch := subscriber.poll(timeout_s=0):
        out.extend(delivery.envelope for delivery in batch)
    return out


class Harness:
    """One agent incarnation on a shared in-memory broker (put together by the agent host),
    driven step by step."""

    def __init__(
        self,
        adapter: ClusterAdapter | None = None,
        *,
        broker: InMemoryBroker | None = None,
        clock: FakeClock | None = None,
        heartbeat_s: float = 10.0,
        confirm_s: float = 300.0,
        loop: AgentLoop[Any] = ClusterAgent,
        start: bool = True,
    ) -> None:
        """``loop``: what drives the adapter (the generic loop, or a family's own)."""
        self.broker = broker or InMemoryBroker()
        self.clock = clock or FakeClock()
        self.publisher = InMemoryPublisher(self.broker)
        self.adapter = adapter or SimulatedAdapter(
            simulated_nodes(CLUSTER, 2, 4, "h100"), clock=self.clock
        )
        settings = AgentSettings(CLUSTER, POOL, heartbeat_s=heartbeat_s, confirm_s=confirm_s)
        self.agent = host_agent(self.adapter, self.publisher, settings, loop=loop, clock=self.clock)
        self.subscriber = InMemorySubscriber(self.broker, f"agent-{uuid.uuid4()}", AGENT_TOPICS)
        if start:
            self.boot()

    def boot(self) -> None:
        """Catch up with the whole log (heartbeats included), then register the nodes."""
        history = InMemorySubscriber(self.broker, f"history-{uuid.uuid4()}", CATCH_UP_TOPICS)
        self.agent.catch_up(drain(history))
        self.agent.start()
        self.agent.pump(self.subscriber, 0)

    def tick(self, seconds: float = 0.0) -> None:
        """Advance the clock, then one loop round: read, reconcile, read back."""
        self.clock.advance(seconds)
        self.agent.pump(self.subscriber, 0)
        self.agent.step()
        self.agent.pump(self.subscriber, 0)

    def publish(self, data: EventData, at: float | None = None) -> None:
        self.publisher.publish(
            new_event(data, source="tests", time=utc(self.clock() if at is None else at))
        )

    def events(self, *types: type[EventData]) -> list[Envelope[Any]]:
        reader = InMemorySubscriber(self.broker, f"check-{uuid.uuid4()}", list(TopicKind))
        return [e for e in drain(reader) if isinstance(e.data, types)]

    def facts(self, *types: type[EventData]) -> list[Any]:
        return [e.data for e in self.events(*types)]

    def status(self, workload_id: str) -> str:
        return self.agent.state.cluster.workloads[workload_id].status


def decision(reason: ReasonCode = "fairshare") -> DecisionRecord:
    return DecisionRecord(
        pass_id=1,
        input_position=(),
        reason=reason,
        preemptor="wl-x" if reason == "preempt-for" else None,
    )


def submit(h: Harness, workload_id: str, gpus: int = 1, **spec: Any) -> None:
    h.publish(
        WorkloadSubmitted(
            workload_id=workload_id,
            budget="lab/a",
            pools=(POOL,),
            gpus=gpus,
            min_runtime_s=0,
            submitter="bo",
            spec=spec,
        )
    )


def place(
    h: Harness,
    workload_id: str,
    node: str = NODE0,
    gpus: Iterable[int] = (0,),
    attempt: int = 1,
    command_id: str | None = None,
) -> None:
    """What the scheduler publishes for a placement: the command and the fact."""
    placement = Placement(nodes=(NodeGpus(node=node, gpus=tuple(gpus)),))
    command_id = command_id or f"place-{workload_id}-{attempt}"
    h.publish(
        PlaceCommand(
            command_id=command_id,
            cluster=CLUSTER,
            pool=POOL,
            workload_id=workload_id,
            attempt=attempt,
            budget="lab/a",
            placement=placement,
            allocated=False,
            min_runtime_s=0,
            decision=decision(),
        )
    )
    h.publish(
        WorkloadPlaced(
            workload_id=workload_id,
            attempt=attempt,
            pool=POOL,
            placement=placement,
            allocated=False,
            command_id=command_id,
        )
    )


def preempt(
    h: Harness,
    workload_id: str,
    attempt: int = 1,
    grace_s: int = 30,
    reason: ReasonCode = "preempt-for",
    command_id: str | None = None,
) -> str:
    command_id = command_id or f"preempt-{workload_id}-{attempt}"
    h.publish(
        PreemptCommand(
            command_id=command_id,
            cluster=CLUSTER,
            pool=POOL,
            workload_id=workload_id,
            attempt=attempt,
            grace_period_s=grace_s,
            requeue=True,
            decision=decision(reason),
        )
    )
    return command_id


# -- registration ------------------------------------------------------------------------------


def test_nodes_are_registered_once_across_restarts() -> None:
    h = Harness()
    registered = h.facts(NodeRegistered)
    assert sorted((n.node, n.cluster, n.pool, n.gpus, n.gpu_type) for n in registered) == [
        (NODE0, CLUSTER, POOL, 4, "h100"),
        (NODE1, CLUSTER, POOL, 4, "h100"),
    ]
    assert set(h.agent.state.cluster.nodes) == {NODE0, NODE1}
    Harness(broker=h.broker, clock=h.clock)  # a restart: the log has them already
    assert len(h.facts(NodeRegistered)) == 2


# -- place, start, finish ----------------------------------------------------------------------


def test_place_starts_then_finishes_after_the_duration() -> None:
    h = Harness()
    submit(h, "w1", gpus=2, duration_s=100)
    place(h, "w1", gpus=(0, 1))
    h.tick()
    started = h.events(WorkloadStarted)
    assert len(started) == 1
    assert started[0].data.placement.nodes[0].gpus == (0, 1)
    assert started[0].data.pool == POOL
    assert started[0].time == utc(T0)
    assert started[0].id == fact_id("started", "w1", 1)
    assert h.status("w1") == "running"

    h.tick(99)
    assert h.facts(WorkloadFinished) == []
    h.tick(1.5)
    finished = h.events(WorkloadFinished)
    assert [(f.data.outcome, f.data.exit_code) for f in finished] == [("succeeded", 0)]
    assert finished[0].time == utc(T0 + 100.5)
    assert h.status("w1") == "succeeded"
    h.tick(60)
    assert len(h.facts(WorkloadStarted)) == 1
    assert len(h.facts(WorkloadFinished)) == 1


def test_a_simulated_failure_exit_code_is_reported_failed() -> None:
    h = Harness()
    submit(h, "w1", duration_s=5, exit_code=3)
    place(h, "w1")
    h.tick()
    h.tick(5)
    assert [(f.outcome, f.exit_code) for f in h.facts(WorkloadFinished)] == [("failed", 3)]


def test_a_repeated_place_command_is_a_no_op() -> None:
    h = Harness()
    submit(h, "w1", duration_s=10)
    place(h, "w1")
    place(h, "w1")  # the scheduler's command and fact again (new event ids)
    h.tick()
    place(h, "w1")
    h.tick(1)
    assert len(h.facts(WorkloadStarted)) == 1
    h.tick(10)
    place(h, "w1")  # after the end too
    h.tick(1)
    h.tick(20)
    assert len(h.facts(WorkloadStarted)) == 1
    assert len(h.facts(WorkloadFinished)) == 1


def test_work_placed_on_another_clusters_nodes_is_left_alone() -> None:
    h = Harness()
    h.publish(NodeRegistered(node="other-1", cluster="c2", pool=POOL, gpus=4, gpu_type="x"))
    submit(h, "w1", duration_s=10)
    place(h, "w1", node="other-1")
    h.tick()
    assert h.facts(WorkloadStarted) == []


# -- preemption --------------------------------------------------------------------------------


def test_preempt_stops_the_run_and_reports_how_long_it_ran() -> None:
    h = Harness()
    submit(h, "w1", stop_s=4)  # no duration: runs until stopped; exits 4 s after SIGTERM
    place(h, "w1")
    h.tick()
    h.tick(42)
    command_id = preempt(h, "w1", grace_s=30)
    h.tick()
    assert h.facts(WorkloadPreempted) == []  # still exiting
    h.tick(4)
    preempted = h.facts(WorkloadPreempted)
    assert [(p.command_id, p.ran_s, p.attempt) for p in preempted] == [(command_id, 46, 1)]
    assert h.status("w1") == "preempted"
    h.tick(5)
    assert len(h.facts(WorkloadPreempted)) == 1
    preempt(h, "w1")  # the same command again
    h.tick()
    assert len(h.facts(WorkloadPreempted)) == 1


def test_the_grace_period_bounds_the_stop() -> None:
    h = Harness()
    submit(h, "w1", stop_s=100)
    place(h, "w1")
    h.tick()
    preempt(h, "w1", grace_s=10)
    h.tick()
    h.tick(9)
    assert h.facts(WorkloadPreempted) == []
    h.tick(1)
    assert [p.ran_s for p in h.facts(WorkloadPreempted)] == [10]


def test_preempt_of_an_unknown_or_old_attempt_is_a_no_op() -> None:
    h = Harness()
    submit(h, "w1", duration_s=30)
    place(h, "w1")
    h.tick()
    preempt(h, "w1", attempt=2)
    preempt(h, "nobody", attempt=1)
    h.tick(10)
    assert h.facts(WorkloadPreempted) == []
    h.tick(20)
    assert [f.outcome for f in h.facts(WorkloadFinished)] == ["succeeded"]


def test_preempt_before_the_start_reports_zero_without_starting() -> None:
    h = Harness()
    submit(h, "blocker")
    place(h, "blocker", gpus=(0,))
    h.tick()
    # w1 is placed on a GPU the blocker holds physically (it waits for the blocker to exit),
    # then preempted itself before it could start.
    preempt(h, "blocker", grace_s=30)
    submit(h, "w1", duration_s=10)
    h.agent.pump(h.subscriber, 0)
    assert h.agent.state.cluster.workloads["blocker"].preempting
    place(h, "w1", gpus=(0,))
    # Read in one poll, the command comes before the placement (commands before workloads):
    # the fold ignores it, the agent still honours it.
    preempt(h, "w1", grace_s=30, reason="cancel")
    h.tick()
    h.tick()
    preempted = {p.workload_id: p.ran_s for p in h.facts(WorkloadPreempted)}
    assert preempted == {"blocker": 0, "w1": 0}
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["blocker"]


def test_a_preemptor_starts_only_once_its_victim_has_exited() -> None:
    h = Harness()
    submit(h, "victim", stop_s=5)
    place(h, "victim", gpus=(0, 1))
    h.tick()
    preempt(h, "victim", grace_s=30)
    submit(h, "preemptor", duration_s=50)
    place(h, "preemptor", gpus=(1, 2))  # the scheduler released the victim's GPUs at once
    h.tick()
    h.tick(4)
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["victim"]
    h.tick(1)  # the victim exits; its end is read back
    h.tick()
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["victim", "preemptor"]
    assert h.facts(WorkloadPreempted)[0].ran_s == 5
    assert h.status("preemptor") == "running"


def test_a_cancel_while_running_goes_the_preempt_way() -> None:
    h = Harness()
    submit(h, "w1")
    place(h, "w1")
    h.tick()
    h.tick(7)
    h.publish(WorkloadCancelled(workload_id="w1", cancelled_by="bo"))
    h.tick()
    assert h.facts(WorkloadPreempted) == []  # the scheduler's preempt command decides
    preempt(h, "w1", reason="cancel", grace_s=10)
    h.tick()
    h.tick()
    assert [p.ran_s for p in h.facts(WorkloadPreempted)] == [7]
    assert h.status("w1") == "cancelled"


# -- heartbeats --------------------------------------------------------------------------------


def test_liveness_signals_name_occupants_every_interval() -> None:
    h = Harness(heartbeat_s=10)
    submit(h, "w1", gpus=2, duration_s=100)
    place(h, "w1", node=NODE1, gpus=(1, 3))
    h.tick()
    beats = h.facts(NodeAlive)
    assert sorted(b.node for b in beats) == [NODE0, NODE1]
    by_node = {b.node: b for b in beats}
    node1 = by_node[NODE1]
    assert node1.cluster == CLUSTER
    assert [(g.index, g.occupant, g.attempt) for g in node1.gpus] == [
        (0, None, None),
        (1, "w1", 1),
        (2, None, None),
        (3, "w1", 1),
    ]
    assert node1.gpus[1].utilisation_pct > 0
    assert node1.gpus[0].utilisation_pct == 0
    assert node1.gpus[0].memory_used_bytes == 0
    assert all(g.occupant is None for g in by_node[NODE0].gpus)

    for _ in range(6):
        h.tick(3)  # 18 s: one more round at +12 s
    beats = h.facts(NodeAlive)
    assert len(beats) == 4
    sequences = [b.sequence for b in beats if b.node == NODE1]
    assert sequences == sorted(sequences)
    assert len(set(sequences)) == 2


def test_a_failed_node_stops_heartbeating_and_is_left_alone() -> None:
    adapter_clock = FakeClock()
    adapter = SimulatedAdapter(simulated_nodes(CLUSTER, 2, 4, "h100"), clock=adapter_clock)
    h = Harness(adapter, clock=adapter_clock, heartbeat_s=10)
    submit(h, "w1", duration_s=20)
    place(h, "w1", node=NODE1)
    h.tick()
    adapter.fail_node(NODE1)
    submit(h, "w2", duration_s=20)
    place(h, "w2", node=NODE1, gpus=(2,))
    h.tick(10)
    h.tick(30)
    beats = h.facts(NodeAlive)
    assert [b.node for b in beats].count(NODE1) == 1  # only before the failure
    assert [b.node for b in beats].count(NODE0) == 3
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["w1"]
    assert h.facts(WorkloadFinished) == []  # its run vanished: the scheduler reports it lost


# -- the log moves on without the agent --------------------------------------------------------


def test_a_run_the_log_reports_lost_is_stopped_and_not_reported() -> None:
    h = Harness()
    submit(h, "w1", duration_s=100)
    place(h, "w1", gpus=(0,))
    h.tick()
    h.publish(WorkloadLost(workload_id="w1", attempt=1, node=NODE0, last_heartbeat=utc(h.clock())))
    h.tick(1)
    h.tick(1)
    assert h.agent.runs == {}
    assert all(s.utilisation_pct == 0 for s in h.adapter.readings(NODE0))
    h.tick(200)
    assert h.facts(WorkloadFinished) == []


def test_a_failed_publish_is_retried_under_the_same_id() -> None:
    h = Harness()
    submit(h, "w1", duration_s=10)
    place(h, "w1")
    h.publisher.unavailable = True
    h.tick()
    h.tick(1)
    assert h.facts(WorkloadStarted) == []
    h.publisher.unavailable = False
    h.tick(1)
    h.tick(1)
    started = h.events(WorkloadStarted)
    assert [e.id for e in started] == [fact_id("started", "w1", 1)]
    assert started[0].time == utc(T0)  # when it really started
    h.tick(10)
    assert len(h.facts(WorkloadFinished)) == 1


# -- restarts ----------------------------------------------------------------------------------


def test_a_restarted_simulated_agent_resumes_without_duplicates() -> None:
    h = Harness()
    submit(h, "w1", duration_s=100)
    place(h, "w1")
    submit(h, "w2", stop_s=0)
    place(h, "w2", gpus=(1,))
    h.tick()
    h.tick(30)
    # The agent dies (nothing closed); a new incarnation with a new adapter reads the log.
    clock = FakeClock(h.clock())
    again = Harness(
        SimulatedAdapter(simulated_nodes(CLUSTER, 2, 4, "h100"), clock=clock),
        broker=h.broker,
        clock=clock,
    )
    again.tick()
    assert set(again.agent.runs) == {"w1", "w2"}
    assert all(run.adopted for run in again.agent.runs.values())
    preempt(again, "w2", grace_s=5)
    again.tick(10)
    again.tick()
    assert [(p.workload_id, p.ran_s) for p in again.facts(WorkloadPreempted)] == [("w2", 40)]
    again.tick(59)
    assert again.facts(WorkloadFinished) == []
    again.tick(1.5)  # 100 s after the logged start
    assert [f.workload_id for f in again.facts(WorkloadFinished)] == ["w1"]
    assert len(again.facts(WorkloadStarted)) == 2
    assert len(again.facts(NodeRegistered)) == 2
    again.tick(10)
    heartbeat = [b for b in again.facts(GpuHeartbeat) if b.node == NODE0][-1]
    assert heartbeat.gpus[0].occupant is None  # w1 is over


def test_a_restart_before_the_start_was_logged_starts_it_once() -> None:
    h = Harness()
    submit(h, "w1", duration_s=100)
    place(h, "w1")
    h.publisher.unavailable = True
    h.tick()  # started in the adapter, but the fact never reached the log
    again = Harness(broker=h.broker, clock=h.clock)
    again.tick()
    assert [e.id for e in again.events(WorkloadStarted)] == [fact_id("started", "w1", 1)]


@pytest.mark.parametrize("heartbeat_s", [0.0, -1.0])
def test_heartbeat_interval_must_be_positive(heartbeat_s: float) -> None:
    with pytest.raises(ValueError, match="heartbeat_s"):
        Harness(heartbeat_s=heartbeat_s)


def test_a_placement_read_before_the_preempt_that_freed_its_gpus_is_retried() -> None:
    h = Harness()
    submit(h, "victim")
    place(h, "victim", gpus=(0,))
    h.tick()
    submit(h, "preemptor", duration_s=10)
    place(h, "preemptor", gpus=(0,))  # the scheduler's pass: victim preempted, preemptor placed
    h.agent.pump(h.subscriber, 0)  # ... but the placement is read first
    assert [e.data.workload_id for e in h.agent.state.waiting] == ["preemptor"]
    assert h.status("preemptor") == "pending"
    preempt(h, "victim", grace_s=30)
    h.tick()
    assert h.agent.state.waiting == []
    assert h.status("preemptor") == "placed"
    h.tick()
    h.tick()
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["victim", "preemptor"]
    assert [p.workload_id for p in h.facts(WorkloadPreempted)] == ["victim"]


def test_facts_in_flight_are_not_published_again() -> None:
    h = Harness()
    submit(h, "w1", duration_s=5)
    place(h, "w1")
    h.agent.pump(h.subscriber, 0)
    for _ in range(3):
        h.agent.step()  # nothing read back in between
    assert len(h.facts(WorkloadStarted)) == 1
    h.clock.advance(5)
    for _ in range(3):
        h.agent.step()
    assert len(h.facts(WorkloadFinished)) == 1
    h.tick()
    assert h.agent.in_flight == set()
    assert h.status("w1") == "succeeded"
