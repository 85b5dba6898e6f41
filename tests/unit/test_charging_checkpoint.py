"""Charging's fold checkpointed at any cut, then fed the tail, is the fold of the whole log; a
crash after charges were published past the checkpoint publishes none twice and loses none;
and runs leave the fold a horizon after their end without any later fact double-posting
(issue 23)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import EventData, GpuHeartbeat, LedgerCharge, WorkloadStarted
from events.times import HOUR
from projections.charging_state import ChargingState
from projections.checkpoint import CheckpointRejectedError, decode, encode
from projections.ledger import Ledger
from projections.live_state import LiveState
from projections.usage_snapshots import usage_snapshots
from services.bus.partitioning import partition_for_key
from tests.charging_facts import batch
from tests.unit.test_ledger import _at, run_events

CODE = "the fold's code"
Fact = tuple[EventData, int]
#: Short enough that the facts below span several horizons.
WINDOW_S, HORIZON_S = 2 * HOUR, 3 * HOUR


def _facts() -> list[Fact]:
    facts: list[Fact] = []
    for n, offset in enumerate((0, 5 * HOUR, 11 * HOUR, 18 * HOUR)):
        facts += batch(f"b{n}-", offset)
    return sorted(facts, key=lambda pair: pair[1])


FACTS = _facts()


def _source(data: EventData) -> tuple[str, int]:
    if isinstance(data, GpuHeartbeat):
        return ("heartbeats", 0)
    return ("workloads", partition_for_key(data.workload_id.encode(), 3))  # type: ignore[attr-defined]


def _fold(facts: list[Fact], state: ChargingState | None = None) -> tuple[ChargingState, list[Any]]:
    state = state or ChargingState.new(WINDOW_S, horizon_s=HORIZON_S)
    posted: list[LedgerCharge] = []
    for data, t in facts:
        posted += state.fold(data, float(t), _source(data))
    return state, posted


def _same(a: ChargingState, b: ChargingState) -> None:
    assert a.ledger.runs == b.ledger.runs
    assert a.ledger.settled == b.ledger.settled
    assert a.ledger.recorded == b.ledger.recorded
    assert a.ledger.early == b.ledger.early
    assert (a.progress, a.pruned_at, a.latest_time) == (b.progress, b.pruned_at, b.latest_time)
    now = a.latest_time
    assert usage_snapshots(a.usage, now) == usage_snapshots(b.usage, now)


@settings(max_examples=30, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(FACTS)))
def test_a_checkpoint_at_any_cut_then_the_tail_is_the_whole_fold(cut: int) -> None:
    whole, posted = _fold(FACTS)
    before, early = _fold(FACTS[:cut])
    checkpoint = decode(encode(before, {("workloads", 0): cut}, CODE), CODE, ChargingState)
    assert checkpoint.positions == {("workloads", 0): cut}
    resumed, late = _fold(FACTS[cut:], checkpoint.state)
    _same(resumed, whole)
    assert early + late == posted, "every charge posted once, none twice, in the same order"


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_charges_published_after_the_checkpoint_are_recognised_after_a_crash(data: Any) -> None:
    """The previous run folded past its checkpoint and published charges, then was killed: the
    restart reads those from the ledger's tail, publishes only the rest, and its usage counts
    each once."""
    cut = data.draw(st.integers(0, len(FACTS)), label="checkpoint")
    crash = data.draw(st.integers(cut, len(FACTS)), label="crash")
    whole, posted = _fold(FACTS)
    saved, before = _fold(FACTS[:cut])
    blob = encode(saved, {}, CODE)
    _, published_after = _fold(FACTS[cut:crash], decode(blob, CODE, ChargingState).state)
    restarted = decode(blob, CODE, ChargingState).state
    for charge in published_after:
        assert restarted.count_recorded(charge)
    _, republished = _fold(FACTS[cut:], restarted)
    assert sorted(c.charge_id for c in before + published_after + republished) == sorted(
        c.charge_id for c in posted
    )
    assert not restarted.ledger.recorded, "each recorded charge was derived again, then forgot"
    now = whole.latest_time
    assert usage_snapshots(restarted.usage, now) == usage_snapshots(whole.usage, now)


def test_a_checkpoint_of_one_fold_is_not_restored_as_another() -> None:
    state, _ = _fold(FACTS[:50])
    with pytest.raises(CheckpointRejectedError, match="not a LiveState"):
        decode(encode(state, {}, CODE), CODE)
    with pytest.raises(CheckpointRejectedError, match="not a ChargingState"):
        decode(encode(LiveState(), {}, CODE), CODE, ChargingState)


def test_the_shards_partitions_are_no_state_of_the_checkpoint() -> None:
    state = ChargingState.new(WINDOW_S, owns=lambda w: True, horizon_s=HORIZON_S)
    restored = decode(encode(state, {}, CODE), CODE, ChargingState).state
    assert restored.ledger.owns is None  # the restoring shard sets its own


# -- runs leaving the fold --------------------------------------------------------------------
def _expected_per_budget(facts: list[Fact]) -> dict[str, int]:
    ledger = Ledger()
    for data, t in facts:
        ledger.apply(data, float(t))
    totals: dict[str, int] = {}
    for charge in ledger.entries:
        totals[charge.budget] = totals.get(charge.budget, 0) + charge.signed_amount
    return totals


def test_ended_runs_leave_the_fold_and_the_charges_still_add_up() -> None:
    state, posted = _fold(FACTS)
    assert state.ledger.settled, "runs ended a horizon ago left the fold"
    assert len(state.ledger.runs) < len(
        {(d.workload_id, d.attempt) for d, _ in FACTS if isinstance(d, WorkloadStarted)}
    )
    totals: dict[str, int] = {}
    for charge in posted:
        totals[charge.budget] = totals.get(charge.budget, 0) + charge.signed_amount
    assert totals == _expected_per_budget(FACTS), "the audit's unpruned fold agrees"
    assert len({c.charge_id for c in posted}) == len(posted)


def test_redelivered_facts_of_a_run_that_left_the_fold_post_nothing() -> None:
    state, _ = _fold(FACTS)
    gone = {w for w in state.ledger.settled}
    assert gone
    again = [(d, t) for d, t in FACTS if getattr(d, "workload_id", None) in gone]
    again += [(d, t) for d, t in FACTS if isinstance(d, GpuHeartbeat)]
    runs_before = len(state.ledger.runs)
    _, posted = _fold(again, state)
    assert posted == [], "a duplicate start, heartbeat or end of a settled run is a no-op"
    assert len(state.ledger.runs) == runs_before
    assert not state.ledger.early, "nothing waits for a start that already happened"
    for workload in sorted(gone)[:3]:  # a charge of theirs read back is known, not recounted
        charge = f"charge:{workload}:1:{FACTS[0][1] // HOUR * HOUR}:0"
        assert state.ledger.knows(charge)


def test_memory_holds_the_runs_of_a_horizon_not_of_the_history() -> None:
    """Twelve days of back-to-back runs: the fold holds the runs of the last horizon only."""
    state = ChargingState.new(WINDOW_S, horizon_s=HORIZON_S)
    held = []
    t0 = FACTS[0][1]
    for day in range(12):
        facts: list[Fact] = []
        for i in range(24):
            start = t0 + day * 24 * HOUR + i * HOUR
            facts += run_events(f"d{day}-{i}", "lab/a", 2, start, start + 3000, True, 600)
        for data, t in sorted(facts, key=lambda pair: pair[1]):
            state.fold(data, float(t), _source(data))
        held.append(len(state.ledger.runs))
    # A horizon behind the slowest of three partitions: a few hours of runs, never the days.
    assert max(held) < 24, held
    assert max(held[6:]) <= max(held[:6]), "it does not grow with the history"
    series = next(iter(state.usage._series.values()))
    assert len(series.allocated) <= WINDOW_S // HOUR + 1, "usage keeps its window only"


def test_another_shards_charges_are_forgotten_once_out_of_the_window() -> None:
    from events.models.ledger import charge_id

    state = ChargingState.new(
        WINDOW_S, owns=lambda w: not w.startswith("other"), horizon_s=HORIZON_S
    )
    first = FACTS[0][1] // HOUR
    theirs = LedgerCharge(
        charge_id=charge_id("other", 1, first), workload_id="other", budget="lab/a", pool="p",
        bucket_start=_at(first * HOUR), kind="allocated", debit_account="budget:lab/a",
        credit_account="capacity:p", gpu_seconds=60, amount=60,
    )  # fmt: skip
    assert state.count_recorded(theirs)
    assert not state.count_recorded(theirs), "a duplicate on the ledger topic counts once"
    _fold(FACTS, state)
    assert theirs.charge_id not in state.ledger.recorded
