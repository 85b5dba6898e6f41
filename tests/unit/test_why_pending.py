"""The typed reasons of ``why pending`` (scheduling/why_pending.py), one scenario
per kind of reason, and the queue order they are given in: the order a pass places work."""

from __future__ import annotations

from typing import TypeVar

import pytest

from events.models import BudgetClosed, NodeCordoned, NodeDown
from scheduling.why_pending import (
    BudgetAhead,
    BudgetQueue,
    Contract,
    CordonedNodes,
    DownNodes,
    FairShare,
    FitsNow,
    FundedFirst,
    Hold,
    InsufficientCapacity,
    NoNodes,
    NoShare,
    PendingCode,
    PendingReason,
    PoolQueue,
    RankedWork,
    RanksAhead,
    Starting,
    TooLarge,
    Unallocated,
    primary,
    queue_order,
)
from tests.unit.scheduling_fixtures import POOL, T0, Scenario, placed_ids

NOW = T0 + 120
R = TypeVar("R")


def queue_of(s: Scenario, pool: str = POOL, now: float = NOW) -> PoolQueue:
    return PoolQueue(s.cluster, s.tree, pool, now, s.usage_source(pool))


def reasons_of(
    s: Scenario, workload_id: str, pool: str = POOL, now: float = NOW
) -> tuple[PendingReason, ...]:
    queue = queue_of(s, pool, now)
    ids = [w.workload_id for w in queue.ordered]
    return queue.reasons(ids.index(workload_id) + 1)


def one(reasons: tuple[PendingReason, ...], kind: type[R]) -> R:
    found = [r for r in reasons if isinstance(r, kind)]
    assert len(found) == 1, reasons
    return found[0]


def codes(reasons: tuple[PendingReason, ...]) -> list[str]:
    return [r.code.value for r in reasons]


def test_no_share_for_a_closed_budget_and_its_work_comes_last() -> None:
    s = Scenario()
    s.submit("wb", "b", at=T0)
    s.submit("wa", "a", at=T0 + 1)
    s.tree.apply(BudgetClosed(budget="b", closed_by="admin"), T0 + 2)
    assert [w.workload_id for w in queue_of(s).ordered] == ["wa", "wb"]
    assert one(reasons_of(s, "wb"), NoShare) == NoShare("b", POOL)


def test_no_nodes_in_the_pool_says_only_that() -> None:
    s = Scenario()
    s.submit("wq", "a", pools=("q",))
    assert reasons_of(s, "wq", pool="q") == (NoNodes("q"),)


def test_fair_share_names_the_budgets_ahead_with_their_ranks() -> None:
    s = Scenario()
    s.set_usage({"b": 1_000_000.0})
    s.submit("wb", "b", at=T0)
    s.submit("wa1", "a", at=T0 + 1)
    s.submit("wa2", "a", at=T0 + 2)
    queue = queue_of(s)
    assert [w.workload_id for w in queue.ordered] == ["wa1", "wa2", "wb"]
    reason = one(reasons_of(s, "wb"), FairShare)
    assert (reason.budget, reason.rank) == ("b", 2)
    assert reason.usage_ratio == pytest.approx(queue.usage_ratio("b"))
    ahead = [(b.budget, b.rank, b.workloads_ahead) for b in reason.ahead]
    assert ahead == [("a", 1, sum(1 for w in queue.ordered[:2] if w.budget == "a"))]
    assert all(isinstance(b, BudgetAhead) for b in reason.ahead)
    assert reason.workloads_ahead == ahead[0][2]


def test_burst_work_waits_for_funded_work_not_for_budgets_ranking_ahead() -> None:
    """a ranks first; its burst job still comes after b's funded one: that is funded-first,
    never a fair-share reason naming b as ranking ahead."""
    s = Scenario()
    s.set_usage({"b": 1_000_000.0})
    s.running("r", "a", (("n0", (0, 1, 2, 3)),), started_at=T0, min_runtime_s=3600)
    s.submit("funded", "b", gpus=2, at=T0)
    s.submit("burst", "a", gpus=2, min_runtime_s=0, at=T0 + 1)
    reasons = reasons_of(s, "burst")
    assert one(reasons, FundedFirst) == FundedFirst(1, ("b",))
    assert not any(isinstance(r, FairShare) for r in reasons)
    assert primary(reasons) == Unallocated()


def test_the_deciding_reason_is_what_must_change_first() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("long", "a", (("n0", (0, 1, 2, 3)),), started_at=T0, min_runtime_s=3600)
    s.submit("w", "b", gpus=4, at=T0 + 60)
    s.submit("small", "b", gpus=1, at=T0 + 61)
    assert isinstance(primary(reasons_of(s, "small")), FitsNow)
    s.running("other", "a", (("n1", (0, 1, 2, 3)),), started_at=T0, min_runtime_s=600)
    decisive = primary(reasons_of(s, "w"))
    assert isinstance(decisive, Contract)
    assert decisive.waits_on.frees == "n1"  # its 4 GPUs alone fit the gang
    assert primary(()) is None


def test_budget_queue_lists_the_work_of_the_same_budget_ahead() -> None:
    s = Scenario()
    s.submit("first", "a", at=T0)
    s.submit("urgent", "a", at=T0 + 1, priority=5)
    s.submit("last", "a", at=T0 + 2)
    assert one(reasons_of(s, "last"), BudgetQueue) == BudgetQueue("a", ("urgent", "first"))
    assert not any(isinstance(r, FairShare) for r in reasons_of(s, "last"))


def test_too_large_for_the_gpus_that_are_up() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.apply(NodeDown(node="n1"), T0)
    s.submit("big", "a", gpus=8, gang="whole-nodes")
    reason = one(reasons_of(s, "big"), TooLarge)
    assert (reason.gpus, reason.limit, reason.limit_gpus) == (8, "pool", 4)
    assert reason.offer.needs_whole_nodes


def test_fits_now_on_the_largest_free_node() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 8)))
    s.submit("w", "a", gpus=2)
    reason = one(reasons_of(s, "w"), FitsNow)
    assert reason.offer.fits_now
    assert (reason.offer.largest_free_node, reason.offer.largest_free_gpus) == ("n1", 8)
    assert (reason.offer.free_gpus, reason.offer.capacity) == (12, 12)
    assert codes(reasons_of(s, "w")) == [PendingCode.FITS_NOW.value]


def test_insufficient_capacity_then_the_contract_it_waits_on() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("long", "a", (("n0", (0, 1, 2, 3)),), started_at=T0, min_runtime_s=3600)
    s.running("short", "a", (("n1", (0, 1, 2)),), started_at=T0 + 10, min_runtime_s=600)
    s.submit("w", "b", gpus=2, at=T0 + 60)
    reasons = reasons_of(s, "w")
    assert codes(reasons)[:2] == ["insufficient-capacity", "contract"]
    capacity = one(reasons, InsufficientCapacity)
    assert (capacity.offer.largest_free_node, capacity.offer.largest_free_gpus) == ("n1", 1)
    contract = one(reasons, Contract)
    # its end alone makes room on n1 (1 free + its 3), but a ranks ahead of b: not preemptible
    assert contract.waits_on == Hold("short", "a", 3, 600, T0 + 10 + 600, "n1", False)
    assert [h.workload_id for h in contract.holds] == ["short", "long"]


def test_unallocated_work_never_preempts() -> None:
    s = Scenario()
    s.running("r", "a", (("n0", (0, 1, 2, 3)),), started_at=T0)
    s.submit("burst", "b", gpus=1, min_runtime_s=0, at=T0 + 60)
    assert codes(reasons_of(s, "burst")) == ["insufficient-capacity", "unallocated"]
    assert one(reasons_of(s, "burst"), Unallocated) == Unallocated()


def test_starting_work_has_no_contract_yet() -> None:
    s = Scenario()
    s.submit("placed", "a", gpus=4, at=T0)
    s.place("placed", (("n0", (0, 1, 2, 3)),), T0 + 5)
    s.submit("w", "b", gpus=2, at=T0 + 60)
    assert one(reasons_of(s, "w"), Starting) == Starting(("placed",))


def test_running_work_of_a_budget_ranking_ahead_may_not_be_preempted() -> None:
    s = Scenario()
    s.set_usage({"b": 1_000_000.0})
    s.running("r", "a", (("n0", (0, 1, 2, 3)),), started_at=T0 - 3600, min_runtime_s=600)
    s.submit("w", "b", gpus=4, at=T0)
    reason = one(reasons_of(s, "w"), RanksAhead)
    assert reason == RanksAhead("b", (RankedWork("r", "a", 1),))
    assert not any(isinstance(r, Contract) for r in reasons_of(s, "w"))


def test_cordoned_and_down_nodes_of_the_pool() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 8), ("n2", 2)))
    s.apply(NodeCordoned(node="n1", cordoned_by="admin", reason="firmware"), T0)
    s.apply(NodeDown(node="n2"), T0)
    s.submit("w", "a", gpus=1)
    reasons = reasons_of(s, "w")
    assert one(reasons, CordonedNodes) == CordonedNodes(POOL, ("n1",), 8)
    assert one(reasons, DownNodes) == DownNodes(POOL, ("n2",))
    assert codes(reasons)[-2:] == ["cordoned-nodes", "down-nodes"]


def test_the_queue_is_the_order_in_which_a_pass_places_work() -> None:
    s = Scenario(budgets=(("a", 1.0), ("b", 2.0), ("c", 1.0)), nodes=(("n0", 8), ("n1", 8)))
    s.set_usage({"a": 50_000.0, "b": 20_000.0})
    for i, (budget, gpus, runtime) in enumerate(
        [("a", 2, 600), ("b", 1, 3600), ("c", 2, 0), ("b", 2, 600), ("a", 1, 1200), ("c", 1, 60)]
    ):
        s.submit(f"w{i}", budget, gpus=gpus, min_runtime_s=runtime, at=T0 + i)
    expected = [w.workload_id for w in queue_order(s.cluster, s.tree, POOL, NOW, s.usage[POOL])]
    assert placed_ids(s.run(NOW)) == expected
