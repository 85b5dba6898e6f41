"""The agent stops a run at its time limit (its place command's ``time_limit_s``, counted from
its start) and reports it finished, failed, with the message "time limit"."""

from __future__ import annotations

from collections.abc import Iterable

from events.models import (
    NodeGpus,
    PlaceCommand,
    Placement,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadPreempted,
)
from services.agents.agent import TIME_LIMIT_MESSAGE
from tests.unit.test_agents import CLUSTER, NODE0, POOL, T0, Harness, decision, preempt, submit


def place_with_limit(
    h: Harness, workload_id: str, limit_s: int | None, gpus: Iterable[int] = (0,)
) -> None:
    placement = Placement(nodes=(NodeGpus(node=NODE0, gpus=tuple(gpus)),))
    command_id = f"place-{workload_id}-1"
    h.publish(
        PlaceCommand(
            command_id=command_id,
            cluster=CLUSTER,
            pool=POOL,
            workload_id=workload_id,
            attempt=1,
            budget="lab/a",
            placement=placement,
            allocated=False,
            min_runtime_s=0,
            decision=decision(),
            time_limit_s=limit_s,
        )
    )
    h.publish(
        WorkloadPlaced(
            workload_id=workload_id,
            attempt=1,
            pool=POOL,
            placement=placement,
            allocated=False,
            command_id=command_id,
        )
    )


def test_a_run_is_stopped_at_its_limit_and_reported_failed() -> None:
    h = Harness()
    submit(h, "w1", duration_s=1000, stop_s=5)  # would run 1000 s; exits 5 s after SIGTERM
    place_with_limit(h, "w1", 60)
    h.tick()
    assert h.status("w1") == "running"
    h.tick(59)
    assert h.facts(WorkloadFinished) == []
    h.tick(1)  # the limit: SIGTERM
    assert h.facts(WorkloadFinished) == []
    h.tick(5)  # it exited
    finished = h.events(WorkloadFinished)
    assert [(f.data.outcome, f.data.message) for f in finished] == [("failed", TIME_LIMIT_MESSAGE)]
    assert finished[0].data.message == "time limit"
    assert finished[0].data.exit_code == 143
    assert finished[0].epoch_seconds == T0 + 65
    assert h.status("w1") == "failed"
    assert h.agent.state.cluster.workloads["w1"].end_message == "time limit"
    assert h.facts(WorkloadPreempted) == []
    h.tick(100)
    assert len(h.facts(WorkloadFinished)) == 1


def test_a_run_that_ends_before_its_limit_succeeds() -> None:
    h = Harness()
    submit(h, "w1", duration_s=30)
    place_with_limit(h, "w1", 60)
    h.tick()
    h.tick(30)
    assert [(f.outcome, f.message) for f in h.facts(WorkloadFinished)] == [("succeeded", "")]


def test_a_command_without_a_limit_never_stops_the_run() -> None:
    h = Harness()
    submit(h, "w1")  # no duration: runs until stopped
    place_with_limit(h, "w1", None)
    h.tick()
    h.tick(30 * 86400)
    assert h.facts(WorkloadFinished) == []
    assert h.status("w1") == "running"


def test_a_preemption_before_the_limit_is_a_preemption() -> None:
    h = Harness()
    submit(h, "w1", stop_s=2)
    place_with_limit(h, "w1", 600)
    h.tick()
    h.tick(100)
    preempt(h, "w1", grace_s=30)
    h.tick()
    h.tick(2)
    assert [p.ran_s for p in h.facts(WorkloadPreempted)] == [102]
    assert h.facts(WorkloadFinished) == []


def test_a_restarted_agent_stops_an_adopted_run_at_its_limit() -> None:
    h = Harness()
    submit(h, "w1", duration_s=1000)
    place_with_limit(h, "w1", 120)
    h.tick()
    h.tick(60)
    again = Harness(broker=h.broker, clock=h.clock)  # a restart adopts the run
    again.tick(60)
    again.tick(1)
    assert [(f.outcome, f.message) for f in again.facts(WorkloadFinished)] == [
        ("failed", "time limit")
    ]
