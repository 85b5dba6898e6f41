"""The read models do not depend on how the log is cut into transactions: the projector applies a
batch's consecutive workload facts together, to their rows read once and changed in memory
(services/projector/workload_fold.py), and one fact per transaction reads and writes them each
time; both must leave every table the same.

The facts are a random story of a few workloads, read out of time order across workloads (as a
projector catching up reads partitions) and in time order within each (a workload's facts share
its partition), with everything the rules tell apart: repeated submissions and redelivered
facts (the same event at a new offset), facts of an attempt already requeued, cancellations
while waiting or running, work too large for a pool until a node makes it big enough, a job
array whose elements' facts are read before it (they wait for it), and charges (corrections
too) read before or after the runs they charge start and end."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, select

from events import new_event
from events.envelope import Envelope
from events.models import (
    EventData,
    LedgerCharge,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
)
from events.models.ledger import charge_id
from events.positions import Delivery, Position
from services.projector.sql_projector import SqlProjector
from services.read_models.tables import early_facts, metadata
from tests.databases import fresh_database
from tests.factories import submitted

T0 = 1_790_000_000 - 1_790_000_000 % 3600
POOLS = ("p", "q")
ARRAY = "arr"
#: Plain submissions, and the elements of the array (its fact submits them all).
WORKLOADS = ("a", "b", "c", "d", *(f"{ARRAY}_{i}" for i in range(3)))
#: What happens next, and how often (starts, ends and submissions twice as often).
KINDS = (
    *("submit", "array", "node", "place", "start", "finish", "preempt", "lose", "requeue"),
    *("cancel", "start", "finish", "submit", "charge", "charge"),
)


def _placement(gpus: int) -> Placement:
    return Placement(nodes=(NodeGpus(node="n0", gpus=tuple(range(gpus))),))


def story(rng: random.Random, length: int) -> list[Envelope[Any]]:
    """``length`` facts: each workload's at increasing times from a random start in its first
    day, the array's before its elements'; a few read twice (a producer's retry: the same event
    again, before its workload's next). A node registers after every fact read before it, and
    before every fact read after it. (Read out of time order with other facts of its workload,
    a fact would close demand intervals before they open, whose histograms no longer follow
    from the intervals: those logs depend on where the transactions are cut, as they did before
    the workload facts were applied together.)"""
    told: list[Envelope[Any]] = []
    latest: dict[str, Envelope[Any]] = {}  # each workload's (array's, node's) last fact
    clocks: dict[str, int] = {}
    submitted_ones: list[str] = []
    nodes = 0
    registered_at = T0  # the latest node's time: every later fact is later

    def tick(workload: str) -> int:
        start = clocks.get(workload, max(registered_at, T0 + 3600 + rng.randrange(24 * 3600)))
        clocks[workload] = start + rng.randrange(1, 4 * 3600)
        return clocks[workload]

    for _ in range(length):
        if latest and rng.random() < 0.08:
            told.append(latest[rng.choice(sorted(latest))])  # the same event at a new offset
            continue
        # a plain workload's facts follow its submission on its partition; an element's may
        # come before its array's
        workload = rng.choice([*submitted_ones, *WORKLOADS[4:]])
        attempt = rng.choice((1, 1, 1, 2))
        pool = rng.choice(POOLS)
        gpus = rng.choice((1, 2, 8, 16))
        fact: EventData
        match rng.choice(KINDS):
            case "submit":
                workload = rng.choice(WORKLOADS[:4])
                submitted_ones.append(workload)
                spec = {"checkpoint_every_s": rng.choice((300, 900))} if rng.random() < 0.5 else {}
                fact = submitted(
                    workload,
                    budget=rng.choice(("lab/a", "lab/b")),
                    pools=tuple(rng.sample(POOLS, rng.choice((1, 2)))),
                    gpus=gpus,
                    min_runtime_s=rng.choice((0, 600, 600)),
                    resumable=rng.random() < 0.7,
                    spec=spec,
                )
            case "array":
                workload = ARRAY
                clocks[ARRAY] = T0
                fact = WorkloadArraySubmitted(
                    array_id=ARRAY,
                    indices="0-2",
                    max_running=2,
                    budget="lab/a",
                    pools=POOLS,
                    gpus=rng.choice((2, 16)),
                    min_runtime_s=600,
                    submitter="ana",
                    spec={"checkpoint_every_s": 600},
                )
            case "node":
                nodes += 1
                workload = f"n{nodes}"
                registered_at = max(clocks.values(), default=T0) + 1
                clocks.update({name: max(clock, registered_at) for name, clock in clocks.items()})
                clocks[workload] = registered_at
                fact = NodeRegistered(
                    node=workload, cluster="c", pool=pool, gpus=8, gpu_type="H100"
                )
            case "place":
                fact = WorkloadPlaced(
                    workload_id=workload,
                    attempt=attempt,
                    pool=pool,
                    placement=_placement(2),
                    allocated=True,
                    command_id=f"place:{workload}:{attempt}",
                )
            case "start":
                fact = WorkloadStarted(
                    workload_id=workload,
                    attempt=attempt,
                    pool=pool,
                    placement=_placement(2),
                    allocated=rng.random() < 0.8,
                )
            case "finish":
                fact = WorkloadFinished(
                    workload_id=workload,
                    attempt=attempt,
                    outcome=rng.choice(("succeeded", "failed")),
                    exit_code=0,
                )
            case "preempt":
                fact = WorkloadPreempted(
                    workload_id=workload,
                    attempt=attempt,
                    command_id=f"preempt:{workload}:{attempt}",
                    ran_s=600,
                )
            case "lose":
                fact = WorkloadLost(
                    workload_id=workload,
                    attempt=attempt,
                    node="n0",
                    last_heartbeat=datetime.fromtimestamp(clocks.get(workload, T0) + 1, UTC),
                )
            case "charge":
                # the ledger's own partition: a run's hour charged before or after its start
                hour = (clocks.get(workload, T0) // 3600 + rng.randrange(-2, 3)) * 3600
                seconds = rng.choice((600, 3600))
                fact = LedgerCharge(
                    charge_id=charge_id(workload, attempt, hour // 3600, rng.choice((0, 0, 1))),
                    workload_id=workload,
                    budget="lab/a",
                    pool=pool,
                    bucket_start=datetime.fromtimestamp(hour, UTC),
                    kind="allocated",
                    debit_account="budget:lab/a",
                    credit_account=f"capacity:{pool}",
                    gpu_seconds=seconds,
                    amount=seconds,
                    corrects=rng.choice((None, None, None, charge_id(workload, attempt, 0))),
                )
            case "requeue":
                fact = WorkloadRequeued(
                    workload_id=workload,
                    attempt=attempt,
                    original_submit_time=datetime.fromtimestamp(T0, UTC),
                    reason="preempted",
                )
            case _:
                fact = WorkloadCancelled(workload_id=workload, cancelled_by="ana")
        if isinstance(fact, LedgerCharge):
            at = int(fact.bucket_start.timestamp()) + 3600
        elif workload == ARRAY or workload.startswith("n"):
            at = clocks[workload]
        else:
            at = tick(workload)
        envelope = new_event(fact, source="tests", time=datetime.fromtimestamp(at, UTC))
        if not isinstance(fact, LedgerCharge):
            latest[workload] = envelope
        told.append(envelope)
    return told


def deliveries(told: list[Envelope[Any]]) -> list[Delivery]:
    return [Delivery(envelope, Position("log", 0, i)) for i, envelope in enumerate(told)]


def project(engine: Engine, facts: list[Delivery], cuts: list[int]) -> None:
    """Apply ``facts`` in the order read, a transaction from each cut to the next."""
    projector = SqlProjector(engine)
    for lo, hi in zip([0, *cuts], [*cuts, len(facts)], strict=True):
        projector.apply(facts[lo:hi])


def tables(engine: Engine) -> dict[str, list[Any]]:
    """Every table's rows. A fact kept waiting and applied within one transaction never takes
    an ``early_facts.seq`` (PostgreSQL's sequence does not give numbers back), so the waiting
    facts are compared in the order of their seq, not by its value."""
    with engine.connect() as connection:
        found: dict[str, list[Any]] = {
            table.name: sorted((tuple(row) for row in connection.execute(select(table))), key=repr)
            for table in metadata.sorted_tables
            if table is not early_facts
        }
        waiting = connection.execute(select(early_facts).order_by(early_facts.c.seq))
        found[early_facts.name] = [tuple(row)[1:] for row in waiting]
    return found


def cuttings(rng: random.Random, length: int) -> Iterator[list[int]]:
    """One transaction per fact, one for all, and a random cut."""
    yield list(range(1, length))
    yield []
    yield sorted(rng.sample(range(1, length), rng.randrange(1, length))) if length > 1 else []


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 60))
def test_facts_applied_together_leave_the_tables_of_facts_applied_one_by_one(
    seed: int, length: int
) -> None:
    rng = random.Random(seed)
    facts = deliveries(story(rng, length))
    found = []
    for cuts in cuttings(rng, len(facts)):
        engine = create_engine("sqlite://")  # the declared schema (the migrations build it)
        metadata.create_all(engine)
        project(engine, facts, cuts)
        found.append(tables(engine))
        engine.dispose()
    one_by_one, together, cut = found
    assert together == one_by_one
    assert cut == one_by_one


@pytest.mark.database
@pytest.mark.parametrize("seed", [1, 2])
def test_on_each_backend_a_batch_leaves_the_tables_of_its_facts_one_by_one(
    database_url: str, seed: int
) -> None:
    rng = random.Random(seed)
    facts = deliveries(story(rng, 120))
    found = []
    for cuts in cuttings(rng, len(facts)):
        with fresh_database(database_url) as engine:
            project(engine, facts, cuts)
            found.append(tables(engine))
    one_by_one, together, cut = found
    assert any(one_by_one[name] for name in ("runs", "early_facts")), "the story ran work"
    assert together == one_by_one
    assert cut == one_by_one
