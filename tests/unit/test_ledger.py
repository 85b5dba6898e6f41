"""The ledger fold: charges add up to the occupancy integral, never double-post, never follow
an end, and do not depend on the order in which topics were read."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from events import decode_binary, encode_binary, new_event
from events.models import (
    EventData,
    GpuHeartbeat,
    GpuReading,
    NodeGpus,
    Placement,
    WorkloadFinished,
    WorkloadLost,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.times import HOUR
from projections.ledger import Ledger

T0 = 1_700_000_000 - 1_700_000_000 % HOUR  # on the hour


def _at(t: int) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def run_events(
    workload: str,
    budget: str,
    gpus: int,
    start: int,
    end: int,
    allocated: bool,
    heartbeat_every: int,
    lost: bool = False,
) -> list[tuple[EventData, int]]:
    placement = Placement(nodes=(NodeGpus(node=f"node-{workload}", gpus=tuple(range(gpus))),))
    events: list[tuple[EventData, int]] = [
        (
            WorkloadSubmitted(
                workload_id=workload,
                budget=budget,
                pools=("p",),
                gpus=gpus,
                min_runtime_s=600 if allocated else 0,
                submitter="u",
            ),
            start - 10,
        ),
        (
            WorkloadStarted(
                workload_id=workload, attempt=1, pool="p", placement=placement, allocated=allocated
            ),
            start,
        ),
    ]
    t = start + heartbeat_every
    last = start
    while t < end:
        readings = tuple(
            GpuReading(
                index=i, occupant=workload, attempt=1, utilisation_pct=90.0, memory_used_bytes=1
            )
            for i in range(gpus)
        )
        events.append(
            (GpuHeartbeat(node=f"node-{workload}", cluster="c", sequence=t, gpus=readings), t)
        )
        last = t
        t += heartbeat_every
    if lost:
        events.append(
            (
                WorkloadLost(
                    workload_id=workload,
                    attempt=1,
                    node=f"node-{workload}",
                    last_heartbeat=_at(last),
                ),
                end + 120,
            )
        )
    else:
        events.append((WorkloadFinished(workload_id=workload, attempt=1, outcome="succeeded"), end))
    return events


def fold(events: Sequence[tuple[EventData, int]]) -> Ledger:
    ledger = Ledger()
    for data, t in events:
        ledger.apply(data, float(t))
    return ledger


def test_a_run_is_charged_per_hour_bucket_as_heartbeats_close_each_hour() -> None:
    ledger = Ledger()
    posted_along_the_way = 0
    events = run_events("w", "lab/a", 2, T0 + 1800, T0 + 3 * HOUR + 600, True, 300)
    for data, t in events[:-1]:
        posted_along_the_way += len(ledger.apply(data, float(t)))
    assert posted_along_the_way == 3, "three hours closed before the end: charged while running"
    ledger.apply(*events[-1])
    amounts = [(int(e.bucket_start.timestamp()) - T0, e.gpu_seconds) for e in ledger]
    assert amounts == [(0, 2 * 1800), (HOUR, 2 * HOUR), (2 * HOUR, 2 * HOUR), (3 * HOUR, 2 * 600)]
    first = ledger.entries[0]
    assert (first.debit_account, first.credit_account) == ("budget:lab/a", "capacity:p")
    assert first.amount == first.gpu_seconds
    assert first.charge_id == f"charge:w:1:{T0}:0"


def test_unallocated_occupancy_is_recorded_free_at_zero() -> None:
    ledger = fold(run_events("w", "lab/a", 1, T0, T0 + 100, False, 30))
    (entry,) = ledger.entries
    assert entry.kind == "unallocated"
    assert (entry.gpu_seconds, entry.amount) == (100, 0)
    assert entry.debit_account == "free:p"


def test_a_lost_run_is_charged_to_its_last_heartbeat_only() -> None:
    events = run_events("w", "lab/a", 1, T0, T0 + 5000, True, 1000, lost=True)
    ledger = fold(events)
    assert sum(e.gpu_seconds for e in ledger) == 4000  # last heartbeat at T0 + 4000


def test_a_later_earlier_end_is_a_correction_never_an_edit() -> None:
    events = run_events("w", "lab/a", 1, T0, T0 + 2 * HOUR, True, 600)
    ledger = fold(events)
    before = [e.model_copy() for e in ledger]
    ledger.apply(
        WorkloadLost(workload_id="w", attempt=1, node="n", last_heartbeat=_at(T0 + 1800)),
        float(T0 + 3 * HOUR),
    )
    assert ledger.entries[: len(before)] == before, "old entries are never changed"
    corrections = ledger.entries[len(before) :]
    assert corrections
    assert all(c.corrects is not None for c in corrections)
    assert all(c.debit_account == "capacity:p" for c in corrections)
    assert ledger.totals()[("lab/a", "p", T0)] == 1800
    assert sum(v for v in ledger.totals().values()) == 1800


def test_duplicates_and_late_heartbeats_change_nothing() -> None:
    events = run_events("w", "lab/a", 2, T0 + 10, T0 + 2 * HOUR, True, 900)
    ledger = fold(events)
    entries = list(ledger.entries)
    for data, t in events:
        assert ledger.apply(data, float(t)) == []
    late = GpuHeartbeat(
        node="node-w",
        cluster="c",
        sequence=1,
        gpus=(
            GpuReading(index=0, occupant="w", attempt=1, utilisation_pct=1.0, memory_used_bytes=0),
        ),
    )
    assert ledger.apply(late, float(T0 + 5 * HOUR)) == [], "no charge after the end"
    assert ledger.entries == entries


def test_charges_are_valid_events() -> None:
    ledger = fold(run_events("w", "lab/a", 4, T0 + 7, T0 + 2 * HOUR + 9, True, 700))
    for entry in ledger:
        record = encode_binary(new_event(entry, source="t", time=_at(T0)))
        assert decode_binary(record.value, record.headers).data == entry


runs = st.lists(
    st.tuples(
        st.integers(0, 3),  # budget
        st.integers(1, 8),  # gpus
        st.integers(0, 3 * HOUR),  # start offset
        st.integers(1, 5 * HOUR),  # duration
        st.booleans(),  # allocated
        st.integers(60, 2 * HOUR),  # heartbeat period
        st.booleans(),  # lost
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(runs=runs, seed=st.integers(0, 10_000))
def test_ledger_equals_the_integral_of_occupancy_whatever_the_topic_interleaving(
    runs: list[Any], seed: int
) -> None:
    expected: dict[str, int] = {}
    streams: list[list[tuple[EventData, int]]] = []
    for i, (budget, gpus, offset, duration, allocated, period, lost) in enumerate(runs):
        start, end = T0 + offset, T0 + offset + duration
        events = run_events(f"w{i}", f"b{budget}", gpus, start, end, allocated, period, lost)
        streams.append(events)
        if lost:
            heartbeats = [t for data, t in events if isinstance(data, GpuHeartbeat)]
            end = heartbeats[-1] if heartbeats else start
        if allocated:
            expected[f"b{budget}"] = expected.get(f"b{budget}", 0) + gpus * (end - start)
    # Workload events keep their order (one key, one partition); heartbeats travel on another
    # topic and may be read before or after them: interleave the two at random, twice.
    orders = []
    for attempt in range(2):
        rng = random.Random(seed + attempt)
        merged: list[tuple[EventData, int]] = []
        for events in streams:
            workload = [e for e in events if not isinstance(e[0], GpuHeartbeat)]
            beats = [e for e in events if isinstance(e[0], GpuHeartbeat)]
            for e in beats:
                workload.insert(rng.randint(0, len(workload)), e)
            merged.append(workload)
        flat = [e for events in merged for e in events]
        orders.append(fold(flat))
    first, second = orders
    charged: dict[str, int] = {}
    for entry in first:
        if entry.kind == "allocated":
            sign = -1 if entry.debit_account.startswith("capacity:") else 1
            charged[entry.budget] = charged.get(entry.budget, 0) + sign * entry.amount
        assert entry.bucket_start.timestamp() % HOUR == 0
    assert {b: v for b, v in charged.items() if v} == {b: v for b, v in expected.items() if v}
    assert len({e.charge_id for e in first}) == len(first.entries), "no duplicate charge ids"
    assert first.totals() == second.totals(), "totals do not depend on read order"


def test_a_run_read_before_its_submission_is_held_and_charged_to_its_budget() -> None:
    """After a broker lost the submission's write and it was written again later, a start can
    be read first: the fold holds the run's facts until the budget is known, so every reader of
    the log (charging, the audit, the simulator) posts the same charges, never to budget ''."""
    facts = run_events("w", "lab/a", 2, T0 + 60, T0 + 3 * HOUR, True, 600)
    submission = next(pair for pair in facts if isinstance(pair[0], WorkloadSubmitted))
    in_order = Ledger()
    for data, t in facts:
        in_order.apply(data, float(t))
    late = Ledger()
    early_charges = []
    for data, t in [pair for pair in facts if pair is not submission]:
        early_charges += late.apply(data, float(t))
    assert early_charges == []
    assert late.held
    late.apply(*submission)
    assert not late.held
    assert sorted(c.charge_id for c in late) == sorted(c.charge_id for c in in_order)
    assert {c.budget for c in late} == {"lab/a"}
