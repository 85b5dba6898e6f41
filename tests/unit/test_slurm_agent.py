"""The Slurm agent's loop over the in-memory bus and a fake Slurm: runs become jobs and their
ends facts, a restart adopts jobs instead of submitting them again, drains pass between Slurm
and Fairshare both ways without echoing, GPUs taken around Fairshare are reported and waited
for, and jobs whose runs the log no longer has are cancelled."""

from __future__ import annotations

from events.models import (
    GpuHeartbeat,
    NodeAlive,
    NodeCordoned,
    NodeUncordoned,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
)
from services.agents.slurm.adapter import SlurmAdapter
from services.agents.slurm.agent import FOREIGN_OCCUPANT, SLURM_ACTOR, SlurmAgent
from services.agents.slurm.parse import RunTag, job_name
from services.bus.memory import InMemoryBroker
from tests.unit.test_agents import (
    CLUSTER,
    NODE0,
    NODE1,
    FakeClock,
    Harness,
    place,
    preempt,
    submit,
)
from tests.unit.test_slurm_adapter import FakeSlurm


def harness(
    slurm: FakeSlurm,
    *,
    broker: InMemoryBroker | None = None,
    clock: FakeClock | None = None,
    drain_in_slurm: bool = False,
) -> Harness:
    """A :class:`Harness` whose agent is the Slurm agent (its adapter reads Slurm each round)."""
    clock = clock or FakeClock()
    adapter = SlurmAdapter(
        slurm, cluster=CLUSTER, refresh_s=0.0, drain_in_slurm=drain_in_slurm, clock=clock
    )
    return Harness(adapter, broker=broker, clock=clock, loop=SlurmAgent)


def name(wid: str, attempt: int = 1) -> str:
    return job_name(RunTag(wid, attempt, CLUSTER))


def run_one(h: Harness, slurm: FakeSlurm, wid: str = "w1", gpus: tuple[int, ...] = (0, 1)) -> None:
    submit(h, wid, gpus=len(gpus), command=["train", "--epochs", "3"])
    place(h, wid, gpus=gpus)
    h.tick()
    assert slurm.job_named(name(wid)).state == "RUNNING"


def test_a_placement_runs_as_a_pinned_job_and_its_exit_code_is_the_finish() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    run_one(h, slurm)
    [call] = slurm.submissions()
    assert {f"--nodelist={NODE0}", "--gres=gpu:2", "--nodes=1"} <= set(call)
    assert "exec train --epochs 3" in slurm.job_named(name("w1")).script
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["w1"]
    h.tick(5)
    slurm.exit(name("w1"), 3)
    h.tick(1)
    [finished] = h.facts(WorkloadFinished)
    assert (finished.outcome, finished.exit_code) == ("failed", 3)
    assert "exited with status 3" in finished.message
    h.tick(60)
    assert len(slurm.submissions()) == 1


def test_a_preemption_is_sigterm_through_slurm_then_preempted() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    run_one(h, slurm)
    h.tick(100)
    preempt(h, "w1", grace_s=30)
    h.tick(1)
    job_id = slurm.job_named(name("w1")).job_id
    assert ("signal", "TERM", job_id) in slurm.calls
    h.tick(1)
    [preempted] = h.facts(WorkloadPreempted)
    assert preempted.ran_s >= 100
    assert h.facts(WorkloadFinished) == []


def test_a_restarted_agent_adopts_the_running_job_and_reports_its_end() -> None:
    slurm = FakeSlurm()
    first = harness(slurm)
    run_one(first, slurm)
    first.tick(30)
    second = harness(slurm, broker=first.broker, clock=first.clock)
    second.tick(1)
    assert len(slurm.submissions()) == 1, "adopted, not submitted again"
    assert second.facts(WorkloadLost) == []
    slurm.exit(name("w1"), 0)
    second.tick(1)
    assert [(f.outcome, f.exit_code) for f in second.facts(WorkloadFinished)] == [("succeeded", 0)]
    assert len(second.facts(WorkloadStarted)) == 1


def test_a_job_submitted_just_before_a_crash_is_not_submitted_twice() -> None:
    slurm = FakeSlurm()
    first = harness(slurm)
    submit(first, "w1", gpus=1, command="true")
    place(first, "w1", gpus=(0,))
    first.tick()
    # the first incarnation dies after sbatch, before its WorkloadStarted left: replay that by
    # removing nothing from Slurm and starting over from a log without the start
    broker = InMemoryBroker()
    fresh = Harness(broker=broker, clock=first.clock, start=False)
    submit(fresh, "w1", gpus=1, command="true")
    place(fresh, "w1", gpus=(0,))
    second = harness(slurm, broker=broker, clock=first.clock)
    second.tick(1)
    assert len(slurm.submissions()) == 1
    assert [s.workload_id for s in second.facts(WorkloadStarted)] == ["w1"]


def test_a_running_job_gone_from_slurm_after_a_restart_is_lost() -> None:
    slurm = FakeSlurm()
    first = harness(slurm)
    run_one(first, slurm)
    slurm.jobs.clear()  # purged, no completion log
    second = harness(slurm, broker=first.broker, clock=first.clock)
    second.tick(1)
    assert [lost.workload_id for lost in second.facts(WorkloadLost)] == ["w1"]


def test_a_drain_in_slurm_cordons_and_a_resume_lifts_that_cordon_only() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    slurm.drain(NODE0, "fans")
    h.tick(1)
    [cordon] = h.facts(NodeCordoned)
    assert (cordon.node, cordon.cordoned_by) == (NODE0, SLURM_ACTOR)
    assert "fans" in cordon.reason
    assert h.agent.state.cluster.nodes[NODE0].cordoned
    h.tick(1)
    assert len(h.facts(NodeCordoned)) == 1, "one drain, one cordon"

    slurm.set_node_state(NODE0, "RESUME", None)
    h.tick(1)
    assert [u.uncordoned_by for u in h.facts(NodeUncordoned)] == [SLURM_ACTOR]
    assert not h.agent.state.cluster.nodes[NODE0].cordoned

    # a Fairshare admin's cordon is theirs: an idle Slurm node does not lift it
    h.publish(NodeCordoned(node=NODE1, cordoned_by="ops", reason="firmware"))
    h.tick(1)
    assert h.agent.state.cluster.nodes[NODE1].cordoned
    assert len(h.facts(NodeUncordoned)) == 1
    assert [c for c in slurm.calls if c[0] == "scontrol"] == [("scontrol", NODE0, "RESUME", "")]


def test_an_admin_who_uncordons_a_slurm_drain_is_not_overruled_by_it() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    slurm.drain(NODE0, "fans")
    h.tick(1)
    h.publish(NodeUncordoned(node=NODE0, uncordoned_by="ops"))
    h.tick(1)
    h.tick(1)
    assert not h.agent.state.cluster.nodes[NODE0].cordoned
    assert len(h.facts(NodeCordoned)) == 1
    slurm.drain(NODE0, "fans again", at="2026-12-02T08:00:00")
    h.tick(1)
    assert len(h.facts(NodeCordoned)) == 2, "a new drain is a new cordon"


def test_drain_in_slurm_hands_a_cordoned_node_to_slurm_and_back() -> None:
    slurm = FakeSlurm()
    h = harness(slurm, drain_in_slurm=True)
    h.publish(NodeCordoned(node=NODE1, cordoned_by="ops", reason="firmware"))
    h.tick(1)
    h.tick(1)
    drains = [c for c in slurm.calls if c[0] == "scontrol"]
    assert drains == [("scontrol", NODE1, "DRAIN", "fairshare: cordoned by ops: firmware")]
    assert [c.cordoned_by for c in h.facts(NodeCordoned)] == ["ops"], "its own drain not echoed"
    h.publish(NodeUncordoned(node=NODE1, uncordoned_by="ops"))
    h.tick(1)
    h.tick(1)
    assert [c for c in slurm.calls if c[0] == "scontrol"][1:] == [("scontrol", NODE1, "RESUME", "")]
    assert slurm.nodes[NODE1].state == "idle"
    assert h.facts(NodeUncordoned) == [NodeUncordoned(node=NODE1, uncordoned_by="ops")]


def test_without_the_option_no_cordon_reaches_slurm() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    h.publish(NodeCordoned(node=NODE1, cordoned_by="ops"))
    h.tick(1)
    assert [c for c in slurm.calls if c[0] == "scontrol"] == []


def test_gpus_of_jobs_around_fairshare_are_occupied_and_waited_for() -> None:
    slurm = FakeSlurm()
    foreign = slurm.foreign(NODE0, 3)
    h = harness(slurm)
    h.tick(10)
    beat = next(b for b in reversed(h.facts(GpuHeartbeat)) if b.node == NODE0)
    assert [(g.index, g.occupant, g.attempt) for g in beat.gpus] == [
        (0, None, None),
        (1, FOREIGN_OCCUPANT, None),
        (2, FOREIGN_OCCUPANT, None),
        (3, FOREIGN_OCCUPANT, None),
    ]
    submit(h, "w1", gpus=2, command="true")
    place(h, "w1", gpus=(0, 1))
    h.tick(1)
    assert slurm.submissions() == [], "it would pend in Slurm while counted running"
    assert h.facts(WorkloadStarted) == []
    slurm.end(foreign, 0)
    h.tick(1)
    assert len(slurm.submissions()) == 1
    assert [s.workload_id for s in h.facts(WorkloadStarted)] == ["w1"]
    h.tick(10)
    beat = next(b for b in reversed(h.facts(GpuHeartbeat)) if b.node == NODE0)
    assert [g.occupant for g in beat.gpus] == ["w1", "w1", None, None]


def test_a_job_whose_run_the_log_no_longer_has_is_cancelled_after_a_grace() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    run_one(h, slurm)
    stray = slurm.foreign(NODE1, 1, name=name("w1", attempt=7))  # an attempt long gone
    other = slurm.foreign(NODE1, 1, name=job_name(RunTag("w1", 7, "another-cluster")))
    h.tick(1)
    assert ("cancel", stray) not in slurm.calls
    h.tick(10)
    assert ("cancel", stray) in slurm.calls
    assert ("cancel", other) not in slurm.calls, "another cluster's job is not ours"
    assert slurm.job_named(name("w1")).state == "RUNNING", "the live attempt is left alone"
    assert h.agent.cancelled_strays == 1  # type: ignore[attr-defined]


def test_a_node_slurm_marks_down_gets_no_liveness_signals() -> None:
    slurm = FakeSlurm()
    h = harness(slurm)
    slurm.nodes[NODE1].state = "down"
    h.tick(10)
    h.tick(10)
    nodes = [b.node for b in h.facts(NodeAlive)]
    assert nodes.count(NODE0) >= 2
    assert nodes.count(NODE1) <= 1, "at most the first round, before Slurm said down"
