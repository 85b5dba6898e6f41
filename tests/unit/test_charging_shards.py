"""Charging split by workload: shards that each fold their own workloads' facts and every
heartbeat post, together, exactly the charges of one fold of the whole log."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import EventData, GpuHeartbeat, LedgerCharge
from projections.ledger import Ledger
from services.bus.partitioning import partition_for_key
from services.charging.shards import owner_test
from tests.charging_facts import batch

FACTS = batch("w", 0)
WORKLOADS = sorted({d.workload_id for d, _t in FACTS if hasattr(d, "workload_id")})


def _fold(facts: list[tuple[EventData, int]], owns: object = None) -> dict[str, LedgerCharge]:
    ledger = Ledger(owns=owns)  # type: ignore[arg-type]
    for data, t in facts:
        ledger.apply(data, float(t))
    return {charge.charge_id: charge for charge in ledger.entries}


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(WORKLOADS)))
def test_two_shards_post_exactly_the_charges_of_one_fold(mine: set[str]) -> None:
    whole = _fold(FACTS)
    shards = []
    for owns in (mine.__contains__, lambda w: w not in mine):
        # a shard reads its own workloads' facts (their partitions) and every heartbeat
        facts = [
            (d, t)
            for d, t in FACTS
            if isinstance(d, GpuHeartbeat) or owns(d.workload_id)  # type: ignore[attr-defined]
        ]
        shards.append(_fold(facts, owns))
    assert not shards[0].keys() & shards[1].keys()
    assert {**shards[0], **shards[1]} == whole


def test_a_shard_keeps_no_other_shards_runs_waiting() -> None:
    # the shared node's heartbeats name two workloads; a shard owning one of them holds no
    # early confirmation for the other (it would wait for a start it never reads)
    ledger = Ledger(owns=lambda w: w == "ws1")
    for data, t in FACTS:
        if isinstance(data, GpuHeartbeat) or getattr(data, "workload_id", None) == "ws1":
            ledger.apply(data, float(t))
    assert not ledger.early
    assert {run[0] for run in ledger.runs} == {"ws1"}


def test_ownership_follows_the_producers_partitioner() -> None:
    owns = owner_test(frozenset({0, 2}), 3)
    for workload in WORKLOADS:
        assert owns(workload) == (partition_for_key(workload.encode(), 3) in {0, 2})
    assert owns(WORKLOADS[0]) == owns(WORKLOADS[0])  # cached answers agree
