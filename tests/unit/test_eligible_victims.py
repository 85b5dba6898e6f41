"""Who a preemptor may take from is decided per sibling subtree of its ancestors (every budget
under one sibling gets the same answer from the churn rules) and per GPU count within it,
rather than budget by budget and run by run: on random trees, holdings, usage, closed budgets
and preemptors, both ways give the same victims, with or without a floor on the GPUs needed,
before and after victims are taken out of the index within a pass."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import BudgetClosed
from scheduling.churn import ChurnControl
from scheduling.fairshare_order import FairShareOrder, held_by_leaf
from scheduling.memos import PassMemos
from scheduling.preemption import (
    VictimIndex,
    VictimRule,
    _Ask,
    _eligible_by_budget,
    _eligible_by_subtree,
)
from scheduling.work_at_risk import CHECKPOINT_EVERY_KEY
from tests.unit.scheduling_fixtures import POOL, T0, Scenario

#: A tree three levels deep, where internal budgets also hold work of their own.
BUDGETS = ("a", "a/1", "a/2", "a/1/x", "a/1/y", "b", "b/1", "b/2", "c")
NODE_GPUS = 8


@st.composite
def situations(draw: st.DrawFn) -> tuple[Scenario, str, int, int, float, float, ChurnControl]:
    weights = draw(st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=9, max_size=9))
    nodes = draw(st.integers(2, 8))
    # most runs in a few budgets: sides that hold beyond their entitlement (catch-up)
    hot = draw(st.lists(st.sampled_from(BUDGETS), min_size=1, max_size=3))
    s = Scenario(
        budgets=tuple(zip(BUDGETS, weights, strict=True)),
        nodes=tuple((f"n{i}", NODE_GPUS) for i in range(nodes)),
    )
    now = T0 + 10_000
    free = {f"n{i}": list(range(NODE_GPUS)) for i in range(nodes)}
    runs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(hot * 4 + list(BUDGETS)),
                st.integers(1, 4),
                # min runtime: 0 is unallocated work; some are still inside their contract
                st.sampled_from([0, 600, 3600, 20_000]),
                st.sampled_from([100, 2_000, 9_000, 40_000]),  # started this long ago
                # what a stop would waste: none, since a checkpoint, or the whole run
                st.sampled_from([(True, None), (True, 1_800), (False, None)]),
            ),
            max_size=40,
        )
    )
    for k, (budget, gpus, min_runtime_s, ago, (resumable, every)) in enumerate(runs):
        node = next((n for n, left in free.items() if len(left) >= gpus), None)
        if node is None:
            break
        taken, free[node] = tuple(free[node][:gpus]), free[node][gpus:]
        spec = {} if every is None else {CHECKPOINT_EVERY_KEY: every}
        s.running(
            f"r{k}", budget, ((node, taken),), now - ago, min_runtime_s,
            resumable=resumable, spec=spec,
        )  # fmt: skip
    for budget in draw(st.lists(st.sampled_from(BUDGETS), max_size=2, unique=True)):
        s.tree.apply(BudgetClosed(budget=budget, closed_by="ops"), now - 50)
    preemptor = draw(st.sampled_from(hot + list(BUDGETS)))  # a hot one is owed nothing
    # close usage ratios put the catch-up margin near the waste of a stop
    usage = {b: draw(st.sampled_from([0.0, 1e5, 1.3e5, 1.8e5, 1e6])) for b in BUDGETS}
    s.usage[POOL] = usage
    churn = draw(
        st.sampled_from(
            [
                ChurnControl(),
                ChurnControl(margin_per_wasted_gpu_hour=0.0),
                ChurnControl(margin=0.0, owed_tolerance=0.0),
            ]
        )
    )
    waited = draw(st.sampled_from([30, 5_000]))  # an hour or more: a whole-node gang starves
    gpus, need = draw(st.integers(1, 16)), draw(st.integers(0, 30))
    return s, preemptor, gpus, need, now, now - waited, churn


@settings(max_examples=300, deadline=None, database=None)
@given(situations())
def test_by_subtree_and_by_budget_name_the_same_victims(
    situation: tuple[Scenario, str, int, int, float, float, ChurnControl],
) -> None:
    s, budget, gpus, need, now, submitted_at, churn = situation
    s.submit("p", budget, gpus=gpus, at=submitted_at, gang="whole-nodes")
    cluster = s.cluster
    preemptor = cluster.workloads["p"]
    order = FairShareOrder(
        s.tree,
        POOL,
        now,
        s.usage[POOL],
        cluster.capacity(POOL),
        7 * 86_400,
        held_by_leaf(cluster, POOL),
    )
    if budget not in order.shares:
        return  # judged budget by budget anyway (eligible_victims)
    victims = VictimIndex(cluster, POOL, now)
    memo = PassMemos().of_pool(POOL)
    rule = VictimRule(churn, node_size=NODE_GPUS)
    starving = rule.starving(preemptor, now)
    extra = 0.0 if order.due(budget) else float(preemptor.gpus * preemptor.min_runtime_s)

    def both(floor: int) -> None:
        ask = _Ask(
            cluster, POOL, preemptor, order, victims, rule, now, memo, floor, starving, extra
        )
        assert _eligible_by_subtree(ask) == _eligible_by_budget(ask)

    for floor in range(0, 41, 4):  # the cheap bound refuses at the same floors
        both(floor)
    both(need)
    found = sorted(
        _eligible_by_budget(
            _Ask(cluster, POOL, preemptor, order, victims, rule, now, memo, 0, starving, extra)
        )
    )
    victims.remove(cluster, tuple(found[::2]))  # taken by an earlier preemptor of the pass
    both(0)
    both(need)


def test_a_run_that_would_waste_too_much_is_left_out_of_its_size() -> None:
    """Catch-up: ``b`` holds about its entitlement (owed nothing), ``a`` holds 2 GPUs beyond
    it and ranks behind ``b`` by a margin that allows 10,800 GPU-seconds of waste. Of ``a``'s
    one- and two-GPU runs past their contract, those a stop would waste more on are not
    victims, though their size is; both ways agree on which."""
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0)), nodes=tuple((f"n{i}", 8) for i in range(5)))
    now = T0 + 50_000
    s.running("a-big", "a", (("n0", tuple(range(8))),), now - 9_000, 600)
    s.running("a-big2", "a", (("n1", tuple(range(8))),), now - 9_000, 600)
    s.running("a-cheap", "a", (("n2", (0, 1)),), now - 9_000, 600)  # resumable: wastes 0
    s.running("a-dear", "a", (("n2", (2, 3)),), now - 9_000, 600, resumable=False)
    s.running("a-inside", "a", (("n2", (4, 5)),), now - 100, 600, resumable=False)
    s.running("b-0", "b", (("n3", tuple(range(8))),), now - 100, 20_000)
    s.running("b-1", "b", (("n4", tuple(range(8))),), now - 100, 20_000)
    s.running("b-2", "b", (("n2", (6, 7)),), now - 100, 20_000)
    s.submit("p", "b", gpus=2, at=now - 30)
    cluster = s.cluster
    usage = {"a": 1.8e5, "b": 1e5}
    order = FairShareOrder(
        s.tree, POOL, now, usage, cluster.capacity(POOL), 7 * 86_400, held_by_leaf(cluster, POOL)
    )
    rule = VictimRule(ChurnControl(), node_size=8)
    preemptor = cluster.workloads["p"]
    ask = _Ask(
        cluster, POOL, preemptor, order, VictimIndex(cluster, POOL, now), rule, now,
        PassMemos().of_pool(POOL), 0, False, float(2 * 600),
    )  # fmt: skip
    assert _eligible_by_subtree(ask) == _eligible_by_budget(ask) == {"a-cheap"}


def test_a_closed_budget_is_judged_alone_and_counted_once() -> None:
    """``a/2`` is closed (no share): its runs are judged by their own budget, not as part of
    the sibling ``a`` of the preemptor's ``b``, and their GPUs count once toward the bound
    below which nothing is looked at (8 GPUs of ``a/1`` and 2 of ``a/2`` could be freed)."""
    s = Scenario(
        budgets=(("a", 1.0), ("a/1", 1.0), ("a/2", 1.0), ("b", 1.0)),
        nodes=(("n0", 8), ("n1", 8)),
    )
    now = T0 + 50_000
    s.running("a1-0", "a/1", (("n0", (0, 1, 2, 3)),), now - 9_000, 600)
    s.running("a1-1", "a/1", (("n0", (4, 5, 6, 7)),), now - 9_000, 600)
    s.running("a2-0", "a/2", (("n1", (0, 1)),), now - 9_000, 600)
    s.tree.apply(BudgetClosed(budget="a/2", closed_by="ops"), now - 50)
    s.submit("p", "b", gpus=2, at=now - 30)
    cluster = s.cluster
    order = FairShareOrder(
        s.tree, POOL, now, {}, cluster.capacity(POOL), 7 * 86_400, held_by_leaf(cluster, POOL)
    )
    rule = VictimRule(ChurnControl(), node_size=8)
    victims = VictimIndex(cluster, POOL, now)
    memo = PassMemos().of_pool(POOL)

    def found(need: int) -> frozenset[str]:
        preemptor = cluster.workloads["p"]
        ask = _Ask(cluster, POOL, preemptor, order, victims, rule, now, memo, need, False, 1200.0)
        by_subtree = _eligible_by_subtree(ask)
        assert by_subtree == _eligible_by_budget(ask)
        return by_subtree

    assert found(10) == {"a1-0", "a1-1", "a2-0"}
    assert found(11) == frozenset()
