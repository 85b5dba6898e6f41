"""Churn control (scheduling/churn.py, docs/design.md section 2.6): who may take
GPUs from whom, the margin that grows with the work at risk, starving gangs, held nodes, and
the properties the rules promise (no ping-pong, caches that change no decision)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import WorkloadRequeued
from projections.cluster_types import WorkloadState
from scheduling.churn import ChurnControl, room
from scheduling.fairshare_order import FairShareOrder
from scheduling.memos import PassMemos
from scheduling.work_at_risk import (
    CHECKPOINT_EVERY_KEY,
    RESTART_OVERHEAD_KEY,
    stop_loss,
    wasted_if_stopped,
)
from services.simulator.preemption_cost import PreemptionCost, at_risk
from tests.unit.scheduling_fixtures import (
    T0,
    Scenario,
    placed_ids,
    placements,
    preempted_ids,
    utc,
)
from tests.unit.test_scheduler_properties import PROPERTY_SETTINGS, World, simulate, worlds

WEEK = 7 * 24 * 3600
LATER = T0 + 1000  # past every 600 s contract started at T0
CHECKPOINTS = {CHECKPOINT_EVERY_KEY: 1800, RESTART_OVERHEAD_KEY: 180}


# -- the work at risk: one rule for the policy and the simulator ---------------------------------
@pytest.mark.parametrize(
    ("ran_s", "overhead_s", "every", "resumable"),
    [
        (7830, 0, 1800, True),
        (2000, 180, 1800, True),
        (100, 180, 1800, True),
        (5000, 180, 0, True),
        (5000, 0, 1800, False),
        (3600, 180, 600, True),
    ],
)
def test_the_policy_and_the_simulator_share_the_work_at_risk_rule(
    ran_s: float, overhead_s: float, every: int, resumable: bool
) -> None:
    cost = PreemptionCost(checkpoint_every_s=every, restart_overhead_s=180)
    assert at_risk(cost, ran_s, overhead_s, resumable) == stop_loss(
        ran_s, overhead_s, every, resumable
    )


def _workload(**fields: Any) -> WorkloadState:
    base: dict[str, Any] = {
        "workload_id": "w",
        "budget": "b",
        "pools": ("p",),
        "gpus": 4,
        "gang": "single-node",
        "min_runtime_s": 600,
        "resumable": True,
        "priority": 0,
        "submitter": "t",
        "spec": dict(CHECKPOINTS),
        "submitted_at": T0 - 10,
        "status": "running",
        "started_at": T0,
    }
    return WorkloadState(**{**base, **fields})


def test_a_stop_wastes_the_progress_since_the_last_checkpoint_and_the_next_restart() -> None:
    assert wasted_if_stopped(_workload(), T0 + 1850) == 4 * (50 + 180)
    # A resumed run checkpoints R later: 2,000 s in it has 1,820 s of progress, 20 at risk.
    assert wasted_if_stopped(_workload(attempt=2), T0 + 2000) == 4 * (20 + 180)
    assert wasted_if_stopped(_workload(resumable=False), T0 + 1850) == 4 * 1850
    # A job that declares nothing is taken to save its state on SIGTERM: nothing at risk.
    assert wasted_if_stopped(_workload(spec={}), T0 + 1850) == 0
    assert wasted_if_stopped(_workload(started_at=None, status="placed"), T0 + 1850) == 0


# -- who may take from whom -----------------------------------------------------------------------
def test_an_owed_budget_takes_what_the_victim_can_give_and_keep_its_entitlement() -> None:
    """a and b are entitled to 4 GPUs each; b holds 6, a 2. a may take 2 of b's, not 4, however
    much more b has used: one 2-GPU run goes, the other 2-GPU request waits."""
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("a-run", "a", (("n1", (2, 3)),), started_at=LATER - 1, min_runtime_s=3600)
    for i, part in enumerate((("n0", (0, 1)), ("n0", (2, 3)), ("n1", (0, 1)))):
        s.running(f"b-{i}", "b", (part,), started_at=T0 - i, min_runtime_s=60)
    s.submit("a-1", "a", gpus=2, at=T0)
    s.submit("a-2", "a", gpus=2, at=T0 + 1)
    s.set_usage({"a": 1_000.0, "b": 1_000_000.0})
    result = s.run(LATER)
    assert preempted_ids(result) == ["b-0"]
    assert placed_ids(result) == ["a-1"]


def test_an_owed_budget_never_ends_up_holding_a_larger_share_than_its_victim() -> None:
    """b holds exactly its entitlement (4), a nothing: a may take 2 (both then hold half of
    their entitlement), not 4 (a would hold all of its own, b half)."""
    for gpus, preempts in ((2, True), (4, False)):
        s = Scenario(nodes=(("n0", 4), ("n1", 4)))
        s.running("b-0", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=60)
        s.running("b-1", "b", (("n0", (2, 3)),), started_at=T0 - 1, min_runtime_s=60)
        s.running("c-0", "c", (("n1", (0, 1, 2, 3)),), started_at=LATER - 1, min_runtime_s=60)
        s.tree.create("c", 1.0, T0 - 3600)
        s.submit("a-new", "a", gpus=gpus)
        s.set_usage({"b": 1_000_000.0})
        assert bool(preempted_ids(s.run(LATER))) is preempts, gpus


def _catch_up(at: float, checkpoints: dict[str, Any]) -> list[str]:
    """a holds its entitlement (2 of 8 GPUs; c has half the weight and no work) and ranks 65%
    ahead of b, which can give 4 GPUs and keep its own."""
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0), ("c", 2.0)), nodes=(("n0", 4), ("n1", 4)))
    s.running("a-run", "a", (("n1", (0, 1)),), started_at=at - 1, min_runtime_s=3600)
    s.running("b-old", "b", (("n0", (0, 1, 2, 3)),), started_at=T0, spec=checkpoints)
    s.running("b-rest", "b", (("n1", (2, 3)),), started_at=at - 1, min_runtime_s=3600)
    s.submit("a-new", "a", gpus=4, min_runtime_s=600, at=at - 10)
    s.set_usage({"a": 3_661.0, "b": 10_000.0})  # (3_661 + 4 x 600) x 1.65 = 10_000
    return preempted_ids(s.run(at))


def test_catch_up_needs_a_margin_that_grows_with_the_work_at_risk() -> None:
    """Behind by 65%: enough for a run that has just checkpointed (4 GPUs x (100 + 180) s at
    risk: margin 53%), not for one 1,700 s past its checkpoint (4 x 1,880 s: margin 71%)."""
    assert _catch_up(T0 + 1900, CHECKPOINTS) == ["b-old"]
    assert _catch_up(T0 + 3500, CHECKPOINTS) == []
    assert _catch_up(T0 + 3500, {}) == ["b-old"]  # saves its state on SIGTERM: only the margin


def test_the_victim_whose_stop_wastes_least_goes_first() -> None:
    """Both runs may go; the older one has just checkpointed, the younger one is deep into
    its interval: the older one goes (the youngest only breaks ties)."""
    s = Scenario(nodes=(("n0", 2), ("n1", 2), ("n2", 4)))
    s.running("b-older", "b", (("n0", (0, 1)),), started_at=T0 - 900, spec=CHECKPOINTS)
    s.running("b-younger", "b", (("n1", (0, 1)),), started_at=T0 - 100, spec=CHECKPOINTS)
    s.running("b-rest", "b", (("n2", (0, 1, 2, 3)),), started_at=T0 + 2600, min_runtime_s=3600)
    s.submit("a-new", "a", gpus=2)
    s.set_usage({"b": 1_000_000.0})
    assert preempted_ids(s.run(T0 + 2_750)) == ["b-older"]


def test_a_starving_gang_catches_up_where_no_budget_could_give_it_room() -> None:
    """a is owed 4 GPUs; its gang needs the whole node b holds, and b would drop below its
    entitlement: the gang waits an hour (asking for a pass then), then catches up."""
    s = Scenario(nodes=(("n0", 8),))
    s.tree.create("c", 2.0, T0 - 3600)  # entitlements: a 2, b 2, c 4
    s.running("b-run", "b", (("n0", tuple(range(8))),), started_at=T0 - 7200, min_runtime_s=60)
    s.submit("a-gang", "a", gpus=8, at=T0)
    s.set_usage({"b": 1_000_000.0})
    waiting = s.run(T0 + 10)
    assert preempted_ids(waiting) == []
    assert waiting.wake_at == T0 + 3600
    assert preempted_ids(s.run(T0 + 3599)) == []
    assert preempted_ids(s.run(T0 + 3600)) == ["b-run"]


def test_a_requeued_job_gets_its_contract_again() -> None:
    """b-job was preempted and runs again: however far behind b ranks, its new run is safe
    for its min_runtime from the new start."""
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-job", "b", (("n0", (0,)),), started_at=T0 - 5000, min_runtime_s=600)
    s.running("b-two", "b", (("n0", (1,)),), started_at=T0 - 5000, min_runtime_s=600)
    s.running("b-long", "b", (("n0", (2, 3)),), started_at=T0 + 50, min_runtime_s=3600)
    s.preempted("b-job", T0)
    s.apply(
        WorkloadRequeued(
            workload_id="b-job", attempt=1, original_submit_time=utc(T0 - 5010), reason="preempted"
        ),
        T0,
    )
    s.place("b-job", (("n0", (0,)),), T0 + 1)
    s.start("b-job", T0 + 2)
    s.submit("a-new", "a", at=T0 + 3)
    s.set_usage({"b": 1_000_000.0})
    assert preempted_ids(s.run(T0 + 100)) == ["b-two"]
    s.submit("a-more", "a", at=T0 + 101)
    assert preempted_ids(s.run(T0 + 601)) == []
    assert preempted_ids(s.run(T0 + 602)) == ["b-job"]


def test_an_owed_gang_holds_the_node_that_will_be_free_soonest() -> None:
    """a's gang needs a whole node; n1's only run ends its contract in 10 minutes, n0's runs
    are b's, which a may not take. n1 is held: c's job goes to n0's free GPU instead of n1's."""
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0), ("c", 1.0)), nodes=(("n0", 4), ("n1", 4)))
    s.running("b-run", "b", (("n0", (0, 1, 2)),), started_at=T0 - 7200, min_runtime_s=60)
    s.running("c-run", "c", (("n1", (0, 1)),), started_at=T0 + 400, min_runtime_s=600)
    s.submit("a-gang", "a", gpus=4, at=T0)
    s.submit("c-one", "c", at=T0 + 1)
    s.set_usage({"a": 0.0, "b": 10.0, "c": 10_000_000.0})
    result = s.run(T0 + 410)
    assert preempted_ids(result) == []
    assert placements(result) == {"c-one": (("n0", (3,)),)}


# -- properties ---------------------------------------------------------------------------------
LEAVES = ("x/x1", "x/x2", "y")
held_gpus = st.integers(0, 16)
usages = st.sampled_from([0.0, 1_000.0, 50_000.0, 400_000.0])


@settings(max_examples=1500, deadline=None, database=None)
@given(
    weights=st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=4, max_size=4),
    held=st.lists(held_gpus, min_size=3, max_size=3),
    usage=st.lists(usages, min_size=3, max_size=3),
    victim=st.sampled_from(LEAVES),
    preemptor=st.sampled_from(LEAVES),
    taken=st.integers(1, 4),
    gained=st.integers(1, 4),
    waste=st.sampled_from([0.0, 600.0, 7_200.0, 60_000.0]),
)
def test_no_preemption_can_be_undone_by_the_same_rules(
    weights: list[float],
    held: list[int],
    usage: list[float],
    victim: str,
    preemptor: str,
    taken: int,
    gained: int,
    waste: float,
) -> None:
    """If a run of ``taken`` GPUs of the victim's budget may go to a request of ``gained`` GPUs
    of the preemptor's (by entitlement, or by catch-up with its margin), then afterwards a
    request of the victim's budget may not take that new run back by either rule."""
    if victim == preemptor:
        return
    budgets = (("x", 1.0), ("x/x1", 1.0), ("x/x2", 1.0), ("y", 1.0))
    s = Scenario(budgets=tuple((p, w) for (p, _), w in zip(budgets, weights, strict=True)))
    churn = ChurnControl()

    def order(holding: dict[str, float], used: dict[str, float]) -> FairShareOrder:
        return FairShareOrder(s.tree, "p", T0, used, 16, WEEK, holding)

    holding = {leaf: float(h) for leaf, h in zip(LEAVES, held, strict=True)}
    used = dict(zip(LEAVES, usage, strict=True))
    before = order(holding, used)
    extra = float(gained * 600)
    forward = room(before, victim, preemptor, gained)
    by_entitlement = forward.owed and taken <= forward.most
    allowed = churn.waste_allowed(before.slack(victim, preemptor, extra))
    by_catch_up = taken <= forward.keep and waste < allowed
    if not (by_entitlement or by_catch_up) or holding[victim] < taken:
        return
    holding[victim] -= taken
    holding[preemptor] += gained
    used[preemptor] += extra
    after = order(holding, used)
    back = room(after, preemptor, victim, taken)
    assert not (back.owed and gained <= back.most), (forward, back)
    assert not (gained <= back.keep and after.slack(preemptor, victim, taken * 600.0) > 0.5), back


def _without_caches(world: World) -> list[tuple[float, list[Any], list[Any]]]:
    """The same world, every pass starting from fresh memos (nothing kept from the last)."""
    import tests.unit.test_scheduler_properties as props

    original = props.run_pass

    def run_pass_cold(cluster: Any, tree: Any, usage: Any, ctx: Any, _memos: Any = None) -> Any:
        return original(cluster, tree, usage, ctx, PassMemos())

    props.run_pass = run_pass_cold
    try:
        return simulate(world).passes
    finally:
        props.run_pass = original


@settings(PROPERTY_SETTINGS, max_examples=40)
@given(worlds())
def test_caches_change_no_decision(world: World) -> None:
    """Victim index, failed searches, wastes, held GPUs and the debug lane's index are derived
    data: dropping them before every pass gives the very same decisions."""
    assert simulate(world).passes == _without_caches(world)


def test_the_margin_is_the_base_plus_the_waste_term() -> None:
    churn = ChurnControl(margin=0.5, margin_per_wasted_gpu_hour=0.1)
    assert churn.victim_margin(7200.0) == pytest.approx(0.7)
    assert churn.waste_allowed(0.7) == pytest.approx(7200.0)
    assert churn.waste_allowed(0.5) < 0
    assert churn.waste_allowed(math.inf) == math.inf
    with pytest.raises(ValueError, match="negative"):
        ChurnControl(margin=-1)
