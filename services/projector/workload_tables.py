"""The rows a run of workload facts touches, read in a few queries, and what the facts changed
(:mod:`services.projector.workload_fold`) written a table at a time.

Whatever the run's length, a handful of statements: each table read with one query per 500
workloads (SQLite's older builds bound a statement's parameters to 999), each written with one
executemany. The statements are built once: SQLAlchemy's construction and cache-key generation
of a statement cost more than SQLite's execution of it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import fields
from typing import Any

import orjson
from sqlalchemy import BindParameter, Connection, and_, bindparam, delete, func, select, update

from events.models import WorkloadSubmitted
from events.registry import default_registry
from events.times import HOUR
from services.projector.workload_fold import (
    WORKLOAD_FACTS,
    Fact,
    Interval,
    Run,
    Stored,
    Workload,
    WorkloadFold,
    Writes,
    workload_of,
)
from services.read_models import usage_upkeep
from services.read_models.demand_upkeep import apply_changes, registered_gpus
from services.read_models.tables import (
    demand_intervals,
    early_facts,
    ledger_entries,
    runs,
    workload_checkpoints,
    workloads,
)

#: Makes the dialect's INSERT (with ON CONFLICT) for a table.
Insert = Callable[[Connection, Any], Any]

#: Workload ids (or event ids) per ``IN (...)``.
CHUNK = 500

_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_WORKLOADS_OF = select(*(workloads.c[f.name] for f in fields(Workload))).where(
    workloads.c.workload_id.in_(_IDS)
)
_RUNS_OF = select(runs).where(runs.c.workload_id.in_(_IDS))
_INTERVALS_OF = select(demand_intervals).where(demand_intervals.c.workload_id.in_(_IDS))
_EARLY_FACTS_OF = (
    select(early_facts).where(early_facts.c.workload_id.in_(_IDS)).order_by(early_facts.c.seq)
)
_KEPT_AMONG = select(early_facts.c.event_id).where(early_facts.c.event_id.in_(_IDS))
#: The run a charge is for, as the projector keys it (``_charged_until``: no attempt is 0).
_CHARGED_RUN = (ledger_entries.c.workload_id, func.coalesce(ledger_entries.c.attempt, 0))
_CHARGED_OF = (
    select(*_CHARGED_RUN, func.max(ledger_entries.c.bucket_start))
    .where(ledger_entries.c.workload_id.in_(_IDS), ledger_entries.c.corrects.is_(None))
    .group_by(*_CHARGED_RUN)
)

_UPDATE_WORKLOAD = update(workloads).where(workloads.c.workload_id == bindparam("key_workload"))
_UPDATE_RUN = update(runs).where(
    runs.c.workload_id == bindparam("key_workload"), runs.c.attempt == bindparam("key_attempt")
)
_CLOSE_INTERVAL = (
    update(demand_intervals)
    .where(
        and_(
            demand_intervals.c.workload_id == bindparam("key_workload"),
            demand_intervals.c.seq == bindparam("key_seq"),
        )
    )
    .values(end_at=bindparam("end_at"))
)
_FORGET_EARLY_FACTS = delete(early_facts).where(early_facts.c.workload_id.in_(_IDS))


def project(connection: Connection, insert: Insert, facts: Sequence[Fact]) -> None:
    """Apply a run of workload facts (in the order read) to the tables."""
    if not facts:
        return
    named = {workload_of(fact) for fact in facts}
    fold = WorkloadFold(load(connection, named, facts), _registered(connection))
    for fact in facts:
        fold.apply(fact)
    store(connection, insert, fold.writes())


def release(connection: Connection, insert: Insert, workload_ids: Sequence[str]) -> None:
    """Apply, in the order they were read, the facts kept for ``workload_ids`` (projected
    now, other than by a submission: a job array's elements)."""
    waiting: list[Fact] = []
    for chunk in _chunks(workload_ids):
        rows = connection.execute(_EARLY_FACTS_OF, {"ids": chunk}).all()
        if rows:
            connection.execute(_FORGET_EARLY_FACTS, {"ids": chunk})
            waiting.extend(_early_fact(row) for row in rows)
    project(connection, insert, waiting)


def load(
    connection: Connection, workload_ids: Collection[str], facts: Sequence[Fact] = ()
) -> Stored:
    """What the tables hold of ``workload_ids``, and the early facts ``facts`` may release or
    repeat (those of the workloads they submit; those of their event ids already kept)."""
    ids = sorted(workload_ids)
    found: dict[str, Workload] = {}
    stored_runs: dict[tuple[str, int], Run] = {}
    intervals: list[Interval] = []
    charged: dict[tuple[str, int], int] = {}
    for chunk in _chunks(ids):
        for row in connection.execute(_WORKLOADS_OF, {"ids": chunk}):
            found[row.workload_id] = Workload(**{**row._asdict(), "pools": tuple(row.pools)})
        for row in connection.execute(_RUNS_OF, {"ids": chunk}):
            stored_runs[(row.workload_id, row.attempt)] = Run(**row._asdict())
        intervals.extend(
            Interval(**row._asdict()) for row in connection.execute(_INTERVALS_OF, {"ids": chunk})
        )
        for workload_id, attempt, hour in connection.execute(_CHARGED_OF, {"ids": chunk}):
            charged[(str(workload_id), int(attempt))] = int(hour) + HOUR
    waiting, kept = read_early_facts(connection, facts, found)
    return Stored(found, stored_runs, intervals, waiting, kept, charged)


def read_early_facts(
    connection: Connection, facts: Sequence[Fact], stored: Collection[str]
) -> tuple[list[Fact], frozenset[str]]:
    """The facts waiting for the workloads ``facts`` submit (in the order read), and which of
    the event ids of ``facts`` that may wait (their workload neither ``stored`` nor submitted
    before them) already do (migration 0009)."""
    submitted = sorted({workload_of(f) for f in facts if isinstance(f.data, WorkloadSubmitted)})
    waiting: list[Fact] = []
    for chunk in _chunks(submitted):
        rows = connection.execute(_EARLY_FACTS_OF, {"ids": chunk})
        waiting.extend(_early_fact(row) for row in rows)
    kept: set[str] = set()
    for chunk in _chunks(_maybe_held(facts, stored)):
        kept.update(connection.execute(_KEPT_AMONG, {"ids": chunk}).scalars())
    return waiting, frozenset(kept)


def store(connection: Connection, insert: Insert, writes: Writes) -> None:
    """Write what a run of facts changed, a statement per table."""
    if writes.created:
        connection.execute(workloads.insert(), [_workload_values(w) for w in writes.created])
    if writes.changed:
        connection.execute(
            _UPDATE_WORKLOAD,
            [
                {"key_workload": w.workload_id, **_workload_values(w, without=("workload_id",))}
                for w in writes.changed
            ],
        )
    if writes.started:
        connection.execute(runs.insert(), [_values(r) for r in writes.started])
    if writes.ended:
        connection.execute(
            _UPDATE_RUN,
            [
                {
                    "key_workload": r.workload_id,
                    "key_attempt": r.attempt,
                    **_values(r, without=("workload_id", "attempt")),
                }
                for r in writes.ended
            ],
        )
    if writes.closed:
        connection.execute(
            _CLOSE_INTERVAL,
            [
                {"key_workload": workload_id, "key_seq": seq, "end_at": end}
                for (workload_id, seq), end in sorted(writes.closed.items())
            ],
        )
    if writes.opened:
        connection.execute(demand_intervals.insert(), [_values(i) for i in writes.opened])
    # the histograms fold the changes from the intervals: those are written first
    apply_changes(connection, writes.demand, insert)
    for workload_id, submitter in writes.submitted.items():
        usage_upkeep.submitted(connection, insert, workload_id, submitter)
    note_checkpoints(connection, insert, writes.checkpoints)
    keep_early_facts(connection, writes.held, writes.released)


def note_checkpoints(connection: Connection, insert: Insert, every_s: dict[str, int]) -> None:
    """How often each workload says it checkpoints, where its spec says (migration 0008); a
    workload's first word stays."""
    if not every_s:
        return
    statement = insert(connection, workload_checkpoints).on_conflict_do_nothing(
        index_elements=["workload_id"]
    )
    connection.execute(
        statement,
        [{"workload_id": w, "checkpoint_every_s": every} for w, every in sorted(every_s.items())],
    )


def keep_early_facts(
    connection: Connection, held: Sequence[Fact], released: Collection[str]
) -> None:
    """The facts now waiting for their workload kept, in the order read (migration 0009), and
    those applied forgotten."""
    for chunk in _chunks(sorted(released)):
        connection.execute(_FORGET_EARLY_FACTS, {"ids": chunk})
    if held:
        connection.execute(
            early_facts.insert(),
            [
                {
                    "workload_id": workload_of(fact),
                    "event_id": fact.event_id,
                    "event_type": fact.data.event_type,
                    "data": fact.data.model_dump(mode="json"),
                    "event_time": fact.at,
                }
                for fact in held
            ],
        )


def _maybe_held(facts: Sequence[Fact], found: Collection[str]) -> list[str]:
    """Event ids of the facts that name a workload neither stored nor submitted before them:
    those wait, once per event id."""
    submitted: set[str] = set()
    candidates: set[str] = set()
    for fact in facts:
        workload_id = workload_of(fact)
        if isinstance(fact.data, WorkloadSubmitted):
            submitted.add(workload_id)
        elif (
            isinstance(fact.data, WORKLOAD_FACTS)
            and workload_id not in found
            and workload_id not in submitted
        ):
            candidates.add(fact.event_id)
    return sorted(candidates)


def _early_fact(row: Any) -> Fact:
    model = default_registry().model_for(row.event_type)
    data = model.model_validate_json(orjson.dumps(row.data))  # as the log states it
    if not isinstance(data, WORKLOAD_FACTS):
        raise TypeError(f"early_facts holds a {row.event_type}, not a workload's fact")
    return Fact(data, int(row.event_time), str(row.event_id))


def _workload_values(workload: Workload, without: tuple[str, ...] = ()) -> dict[str, Any]:
    return {**_values(workload, without), "pools": list(workload.pools)}


def _values(row: Workload | Run | Interval, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """A row's columns (``without`` those that name it, for an UPDATE's SET)."""
    return {name: value for name, value in vars(row).items() if name not in without}


def _registered(connection: Connection) -> Callable[[str], int]:
    return lambda pool: registered_gpus(connection, pool)


def _chunks(values: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]
