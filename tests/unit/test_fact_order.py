"""Ledger entries that do not depend on read order (docs/spec/log-v1.md 8.9): every reader that
sorts the facts into the canonical order (``events.fact_order``) derives the same entries with
the same ids, whatever order it read them in: equal-time facts, facts of other partitions
interleaved anyhow, late losses after confirmed hours, ends at an hour's edge, duplicates."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from events import new_event
from events.envelope import Envelope, derived_event_id
from events.fact_order import fact_key, in_fact_order
from events.models import (
    EventData,
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    NodeGpus,
    Placement,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.times import HOUR
from projections.ledger import Ledger, charge_event_id
from services.audit.replay import replay
from services.bench.fixtures import synthetic_log
from services.cli import app

T0 = 1_800_000_000 - 1_800_000_000 % HOUR  # on the hour
Log = list[Envelope[Any]]


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0, UTC) + timedelta(seconds=seconds)


def _heartbeat(node: str, workload: str, gpus: int, t: float) -> GpuHeartbeat:
    readings = tuple(
        GpuReading(index=i, occupant=workload, attempt=1, utilisation_pct=90.0, memory_used_bytes=1)
        for i in range(gpus)
    )
    return GpuHeartbeat(node=node, cluster="c", sequence=int(t), gpus=readings)


@st.composite
def run_facts(draw: st.DrawFn, index: int) -> list[tuple[EventData, float]]:
    """One run's facts, at times in seconds after T0 (microseconds included, hour edges likely)."""
    workload, node = f"wl-{index}", f"node-{index % 3}"
    gpus = draw(st.integers(1, 4))
    edge = st.integers(0, 4).map(lambda h: float(h * HOUR))
    time = st.one_of(edge, st.floats(0, 4 * HOUR).map(lambda t: round(t, 6)))
    start = draw(time)
    placement = Placement(nodes=(NodeGpus(node=node, gpus=tuple(range(gpus))),))
    facts: list[tuple[EventData, float]] = [
        (
            WorkloadSubmitted(
                workload_id=workload,
                budget=f"lab/b{index % 2}",
                pools=("p",),
                gpus=gpus,
                min_runtime_s=600,
                submitter="u",
            ),
            start - 10,
        ),
        (
            WorkloadStarted(
                workload_id=workload, attempt=1, pool="p", placement=placement, allocated=True
            ),
            start,
        ),
    ]
    beats = draw(st.lists(time.filter(lambda t: t >= start), max_size=6))
    facts += [(_heartbeat(node, workload, gpus, t), t) for t in beats]
    ending = draw(st.sampled_from(["running", "finished", "preempted", "lost", "lost twice"]))
    last = max([start, *beats])
    if ending in ("finished", "preempted"):
        end = draw(time.filter(lambda t: t >= start))
        kind = WorkloadFinished if ending == "finished" else WorkloadPreempted
        fact = (
            WorkloadFinished(workload_id=workload, attempt=1, outcome="succeeded")
            if kind is WorkloadFinished
            else WorkloadPreempted(workload_id=workload, attempt=1, command_id="c", ran_s=0)
        )
        facts.append((fact, end))
    elif ending.startswith("lost"):
        # A late loss: dated at a last heartbeat earlier than heartbeats that confirmed hours.
        for _ in range(2 if ending == "lost twice" else 1):
            dated = draw(st.floats(start, last).map(lambda t: round(t, 6)))
            lost = WorkloadLost(
                workload_id=workload, attempt=1, node=node, last_heartbeat=_at(dated)
            )
            facts.append((lost, last + draw(st.sampled_from([0.0, 60.0]))))
    return facts


def _log(runs: list[list[tuple[EventData, float]]], duplicates: list[int]) -> Log:
    log: Log = []
    for i, facts in enumerate(runs):
        for k, (data, t) in enumerate(facts):
            # unique per record, as a log's ids are (runs share nodes: the subject is not enough)
            event_id = derived_event_id("test", str(i), type(data).event_type, str(k))
            log.append(new_event(data, source="fairshare/test", time=_at(t), event_id=event_id))
    log += [log[i % len(log)] for i in duplicates]  # redelivered records
    return log


def _ledger(log: Log) -> list[LedgerCharge]:
    ledger = Ledger()
    for fact in log:
        ledger.apply(fact.data, fact.epoch_seconds)
    return ledger.entries


@settings(max_examples=150, deadline=None)
@given(
    runs=st.integers(1, 5).flatmap(lambda n: st.tuples(*(run_facts(i) for i in range(n)))),
    duplicates=st.lists(st.integers(0, 1000), max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_order_sorted_into_the_canonical_one_posts_the_same_entries(
    runs: tuple[list[tuple[EventData, float]], ...], duplicates: list[int], seed: int
) -> None:
    log = _log(list(runs), duplicates)
    canonical = _ledger(in_fact_order(log))
    shuffled = list(log)
    random.Random(seed).shuffle(shuffled)
    assert _ledger(in_fact_order(shuffled)) == canonical
    # the same ledger, entry for entry, as an audit reads it from the shuffled log
    recorded = [
        new_event(c, source="fairshare/charging", time=_at(0), event_id=charge_event_id(c))
        for c in canonical
    ]
    # ... the charges in the order posted (one ledger partition per workload keeps it),
    # interleaved with the facts anyhow, as an export interleaves partitions
    mixed: list[Any] = list(shuffled)
    rng = random.Random(seed + 1)
    at = 0
    for charge in recorded:
        at = rng.randint(at, len(mixed))
        mixed.insert(at, charge)
        at += 1
    result = replay(mixed)
    assert result.identical, result.differences


def test_a_late_loss_read_before_or_after_the_heartbeat_posts_one_ledger() -> None:
    """The worked example of the spec (8.8): the hour confirmed by a heartbeat at 11:00 and cut
    short by a loss dated 10:58:20 is posted and corrected, in whichever order a reader meets
    them, once sorted; folded as read, the loss first, the hour is posted once, smaller."""
    run: list[tuple[EventData, float]] = []
    placement = Placement(nodes=(NodeGpus(node="n1", gpus=(0, 1)),))
    run.append(
        (
            WorkloadSubmitted(
                workload_id="wl-1",
                budget="lab/v",
                pools=("p",),
                gpus=2,
                min_runtime_s=600,
                submitter="u",
            ),
            HOUR - 20,
        )
    )
    run.append(
        (
            WorkloadStarted(
                workload_id="wl-1", attempt=1, pool="p", placement=placement, allocated=True
            ),
            HOUR - 1,
        )
    )
    run.append((_heartbeat("n1", "wl-1", 2, 3 * HOUR), 3 * HOUR))
    lost = WorkloadLost(
        workload_id="wl-1", attempt=1, node="n1", last_heartbeat=_at(3 * HOUR - 100)
    )
    run.append((lost, 3 * HOUR + 60))
    log = _log([run], [])
    loss_first = [log[0], log[1], log[3], log[2]]
    sorted_entries = _ledger(in_fact_order(loss_first))
    assert [c.charge_id.rsplit(":", 1)[1] for c in sorted_entries] == ["0", "0", "0", "1"]
    assert sorted_entries == _ledger(in_fact_order(log)) == _ledger(log)
    as_read = _ledger(loss_first)
    assert as_read != sorted_entries
    assert sum(c.signed_gpu_seconds for c in as_read) == sum(
        c.signed_gpu_seconds for c in sorted_entries
    )


ID_A = "00000000-0000-4000-8000-00000000000a"
ID_B = "00000000-0000-4000-8000-00000000000b"
ID_Z = "ffffffff-0000-4000-8000-000000000000"


def test_the_order_is_time_then_topic_then_id() -> None:
    heartbeat = new_event(_heartbeat("n1", "wl-1", 1, 0), source="s", time=_at(5), event_id=ID_A)
    finished = new_event(
        WorkloadFinished(workload_id="wl-1", attempt=1, outcome="succeeded"),
        source="s",
        time=_at(5),
        event_id=ID_Z,
    )
    earlier = new_event(
        _heartbeat("n2", "wl-2", 1, 0), source="s", time=_at(4.999999), event_id=ID_B
    )
    later_id = new_event(_heartbeat("n3", "wl-3", 1, 0), source="s", time=_at(5), event_id=ID_B)
    assert in_fact_order([later_id, heartbeat, finished, earlier]) == [
        earlier,
        finished,  # a workload fact before a heartbeat of the same microsecond
        heartbeat,
        later_id,
    ]
    assert fact_key(finished) < fact_key(heartbeat)


def test_audit_replay_of_a_shuffled_log_is_identical_unless_folded_as_read(
    tmp_path: Path,
) -> None:
    """``fairshare audit replay --shuffle SEED``: the records read in another order (each
    workload's charges kept in theirs); the canonical order makes it change nothing. With
    ``--read-order`` the facts are folded as read, and the same shuffle breaks the ledger
    (an end read before its start ends nothing)."""
    log = tmp_path / "log.ndjson"
    synthetic_log(log, 600)
    runner = CliRunner()
    for flags in ([], ["--shuffle", "3"], ["--shuffle", "4"]):
        result = runner.invoke(app, ["audit", "replay", "--events", str(log), *flags])
        assert result.exit_code == 0, result.output
        assert "identical" in result.stdout
    as_read = runner.invoke(
        app, ["audit", "replay", "--events", str(log), "--shuffle", "3", "--read-order"]
    )
    assert as_read.exit_code == 1, as_read.output
