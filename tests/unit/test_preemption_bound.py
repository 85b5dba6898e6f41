"""No job is preempted more than ``MAX_PREEMPTIONS`` times (scheduling/churn.py,
docs/design.md section 2.6): the fold counts the preempt commands against a workload, every
attempt, cancellations not counted; at the bound no rule chooses it as a victim, but a drain
still stops it (a node sent for repair must empty) up to ``MAX_STOPS`` stops in all, except
under the settings of logs decided when drains waited for it."""

from __future__ import annotations

from events.models import NodeCordoned, WorkloadCancelled
from scheduling.churn import MAX_PREEMPTIONS, MAX_STOPS, ChurnControl
from tests.unit.scheduling_fixtures import T0, Scenario, preempted_ids

LATER = T0 + 1000  # past every 600 s contract started at T0


def _b_holds_the_node() -> Scenario:
    """b holds the whole node (entitled to half): a may take one of its 2-GPU runs; b-other
    has been preempted as often as the bound allows, so only b-run can be that victim."""
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-run", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=600)
    s.running("b-other", "b", (("n0", (2, 3)),), started_at=T0 - 60, min_runtime_s=600)
    s.cluster.workloads["b-other"].preemptions = MAX_PREEMPTIONS
    s.set_usage({"a": 0.0, "b": 1_000_000.0})
    return s


def test_the_fold_counts_preemptions_but_not_cancellations() -> None:
    s = _b_holds_the_node()
    s.submit("a-job", "a", gpus=2, at=LATER)
    assert preempted_ids(s.run(LATER + 1)) == ["b-run"]
    assert s.cluster.workloads["b-run"].preemptions == 1
    s.apply(WorkloadCancelled(workload_id="b-other", cancelled_by="tester"), LATER + 4)
    cancelled = s.run(LATER + 5)
    assert preempted_ids(cancelled) == ["b-other"], "a cancellation stops it whatever the bound"
    assert s.cluster.workloads["b-other"].preemptions == MAX_PREEMPTIONS


def test_a_job_preempted_as_often_as_the_bound_is_no_victim_any_more() -> None:
    s = _b_holds_the_node()
    s.cluster.workloads["b-run"].preemptions = MAX_PREEMPTIONS - 1
    s.submit("a-job", "a", gpus=2, at=LATER)
    assert preempted_ids(s.run(LATER + 1)) == ["b-run"], "one below the bound: still a victim"

    s = _b_holds_the_node()
    s.cluster.workloads["b-run"].preemptions = MAX_PREEMPTIONS
    s.submit("a-job", "a", gpus=2, at=LATER)
    assert preempted_ids(s.run(LATER + 1)) == []


def test_a_drain_stops_a_job_at_the_bound_once_its_contract_is_over() -> None:
    s = _b_holds_the_node()
    s.apply(NodeCordoned(node="n0", cordoned_by="admin", reason="repair"), LATER)
    assert preempted_ids(s.run(LATER + 1)) == ["b-other", "b-run"], "the node empties"
    assert s.cluster.workloads["b-other"].preemptions == MAX_PREEMPTIONS + 1


def test_no_job_is_stopped_more_than_max_stops_times_in_all() -> None:
    s = _b_holds_the_node()
    s.cluster.workloads["b-other"].preemptions = MAX_STOPS
    s.apply(NodeCordoned(node="n0", cordoned_by="admin", reason="repair"), LATER)
    assert preempted_ids(s.run(LATER + 1)) == ["b-run"], "b-other has had its last stop"


def test_a_drain_inside_the_contract_still_waits_for_it() -> None:
    s = _b_holds_the_node()
    s.apply(NodeCordoned(node="n0", cordoned_by="admin", reason="repair"), T0 + 10)
    assert preempted_ids(s.run(T0 + 11)) == [], "both runs are inside their 600 s contracts"


def test_under_the_old_rule_a_drain_waits_for_a_job_at_the_bound() -> None:
    old = ChurnControl(drain_bound=MAX_PREEMPTIONS)
    s = _b_holds_the_node()
    s.apply(NodeCordoned(node="n0", cordoned_by="admin", reason="repair"), LATER)
    assert preempted_ids(s.run(LATER + 1, churn=old)) == ["b-run"], "the drain stops what it may"
    s.cluster.workloads["b-other"].preemptions = MAX_PREEMPTIONS - 1
    assert preempted_ids(s.run(LATER + 2, churn=old)) == ["b-other"]


def test_the_bound_is_a_setting() -> None:
    s = _b_holds_the_node()
    s.cluster.workloads["b-run"].preemptions = 2
    s.submit("a-job", "a", gpus=2, at=LATER)
    assert preempted_ids(s.run(LATER + 1, churn=ChurnControl(max_preemptions=2))) == []
    assert preempted_ids(s.run(LATER + 2, churn=ChurnControl(max_preemptions=3))) == ["b-run"]
