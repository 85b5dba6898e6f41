"""The projector's upkeep of ``period_usage``: what the ledger charged per report bucket, pool,
leaf budget, submitter and line (:mod:`projections.bucket_usage`), kept in the transaction that
inserts the entries.

New entries add their GPU-seconds, and count their workload in each bucket where it had no
entry yet, which the workload's earlier entries tell (read by ``ledger_entries``'s workload
index: a few dozen rows). Entries of a workload whose submission is not projected yet (the
ledger read ahead of the workloads topic, as a rebuild may) are filed under
:data:`~projections.bucket_usage.UNKNOWN_SUBMITTER`, as the reports name it, and moved to the
submitter when the submission is projected. So the sums are a function of ``ledger_entries``
and ``workloads``: a redelivered charge adds nothing (the projector inserts only new charge
ids), a crash rolls both back together, and :func:`rebuild` (migration 0006) writes the same
rows from the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, bindparam, delete, select

from events.models import LedgerCharge
from events.models.ledger import signed_seconds
from projections.bucket_usage import UNKNOWN_SUBMITTER, Entry, Sums, UsageKey, added
from services.read_models.tables import ledger_entries, period_usage, workloads

#: Workload ids per ``IN (...)`` (SQLite's older builds allow 999 parameters).
_CHUNK = 500
_KEY_COLUMNS = ["kind", "period_start", "pool", "budget", "submitter", "correction"]


def entry_of(row: Any) -> Entry:
    """An entry from a ``ledger_entries`` row."""
    return _entry(row, int(row.bucket_start))


def entry_of_charge(charge: LedgerCharge) -> Entry:
    """The entry a charge inserts (the projector files it without reading it back)."""
    return _entry(charge, int(charge.bucket_start.timestamp()))


def _entry(source: Any, bucket_start: int) -> Entry:
    return Entry(
        workload_id=str(source.workload_id),
        pool=str(source.pool),
        budget=str(source.budget),
        bucket_start=bucket_start,
        allocated=source.kind == "allocated",
        correction=source.corrects is not None,
        gpu_s=signed_seconds(int(source.gpu_seconds), str(source.debit_account)),
    )


_ENTRY_COLUMNS = (
    ledger_entries.c.charge_id,
    ledger_entries.c.workload_id,
    ledger_entries.c.pool,
    ledger_entries.c.budget,
    ledger_entries.c.bucket_start,
    ledger_entries.c.kind,
    ledger_entries.c.corrects,
    ledger_entries.c.gpu_seconds,
    ledger_entries.c.debit_account,
)


def add_entries(connection: Connection, insert: Any, inserted: Mapping[str, Entry]) -> None:
    """File the entries just inserted (by charge id); ``insert`` makes the dialect's INSERT
    (with ON CONFLICT) for a table."""
    if not inserted:
        return
    new = [inserted[charge_id] for charge_id in sorted(inserted)]
    owners = sorted({e.workload_id for e in new})
    earlier: list[Entry] = []
    submitters: dict[str, str] = {}
    for chunk in _chunks(owners):
        query = select(*_ENTRY_COLUMNS).where(ledger_entries.c.workload_id.in_(chunk))
        earlier.extend(
            entry_of(row) for row in connection.execute(query) if row.charge_id not in inserted
        )
        who = select(workloads.c.workload_id, workloads.c.submitter)
        submitters.update(connection.execute(who.where(workloads.c.workload_id.in_(chunk))).all())
    sums = added(new, earlier, lambda w: str(submitters.get(w, UNKNOWN_SUBMITTER)))
    _upsert(connection, insert, sums)


#: Submissions of the transaction in progress whose entries move at its end (:func:`deferred`);
#: None: each moves as it is projected.
_PENDING: ContextVar[dict[str, str] | None] = ContextVar("submitted", default=None)


def submitted(connection: Connection, insert: Any, workload_id: str, submitter: str) -> None:
    """A submission newly projected: its entries filed under the unknown submitter (if the
    ledger was read ahead of it) move to ``submitter`` (at the end of the batch, inside
    :func:`deferred`)."""
    pending = _PENDING.get()
    if pending is not None:
        pending[workload_id] = submitter
        return
    _move(connection, insert, {workload_id: submitter})


@contextmanager
def deferred(connection: Connection, insert: Any) -> Iterator[None]:
    """The submissions projected inside move their entries once, together, at the end: read
    in one query per 500 workloads, summed, upserted twice and the emptied rows deleted in one
    statement. A rebuild that read the ledger ahead of the workloads topic moved each
    submission's entries with a dozen statements of its own. The caller inserts no entry
    inside (the projector writes a batch's charges after its other facts), so the entries
    moved are those a submission would have moved as it came."""
    pending: dict[str, str] = {}
    token = _PENDING.set(pending)
    try:
        yield
        _move(connection, insert, pending)
    finally:
        _PENDING.reset(token)


def _move(connection: Connection, insert: Any, submitters: dict[str, str]) -> None:
    known = sorted(w for w, who in submitters.items() if who != UNKNOWN_SUBMITTER)
    entries: list[Entry] = []
    for chunk in _chunks(known):
        query = select(*_ENTRY_COLUMNS).where(ledger_entries.c.workload_id.in_(chunk))
        entries.extend(entry_of(row) for row in connection.execute(query))
    if not entries:
        return
    by_submitter: dict[str, list[Entry]] = {}
    for entry in entries:
        by_submitter.setdefault(submitters[entry.workload_id], []).append(entry)
    # Filed by submitter, then the same sums under the unknown one: a workload has one
    # submitter, so its count in a bucket is counted under exactly one of them.
    filed: dict[UsageKey, Sums] = {}
    moved: dict[UsageKey, Sums] = {}
    for submitter, theirs in sorted(by_submitter.items()):
        for key, sums in added(theirs, [], _everyone_is(submitter)).items():
            filed[key] = sums
            kind, start, pool, budget, _who, correction = key
            unknown = (kind, start, pool, budget, UNKNOWN_SUBMITTER, correction)
            moved.setdefault(unknown, Sums()).add(sums)
    _upsert(connection, insert, moved, sign=-1)
    _upsert(connection, insert, filed)
    emptied = delete(period_usage).where(
        period_usage.c.kind == bindparam("k"),
        period_usage.c.period_start == bindparam("s"),
        period_usage.c.pool == bindparam("p"),
        period_usage.c.budget == bindparam("b"),
        period_usage.c.submitter == UNKNOWN_SUBMITTER,
        period_usage.c.correction == bindparam("c"),
        period_usage.c.workloads == 0,
    )
    keys = [
        {"k": kind, "s": start, "p": pool, "b": budget, "c": correction}
        for kind, start, pool, budget, _who, correction in sorted(moved)
    ]
    connection.execute(emptied, keys)


def _everyone_is(submitter: str) -> Callable[[str], str]:
    return lambda _workload: submitter


def rebuild(connection: Connection, insert: Any) -> int:
    """Every row again from ``ledger_entries`` and ``workloads`` (migration 0006, and the
    tests' check that the upkeep equals it); how many rows."""
    connection.execute(delete(period_usage))
    who = dict(connection.execute(select(workloads.c.workload_id, workloads.c.submitter)).all())
    query = select(*_ENTRY_COLUMNS).order_by(ledger_entries.c.charge_id)
    entries = [entry_of(row) for row in connection.execute(query)]
    sums = added(entries, [], lambda w: str(who.get(w, UNKNOWN_SUBMITTER)))
    rows = _rows(sums)
    if rows:
        connection.execute(insert(connection, period_usage), rows)
    return len(rows)


def _rows(sums: dict[UsageKey, Sums], sign: int = 1) -> list[dict[str, Any]]:
    return [
        {
            **dict(zip(_KEY_COLUMNS, key, strict=True)),
            "allocated_gpu_s": sign * s.allocated,
            "unallocated_gpu_s": sign * s.unallocated,
            "workloads": sign * s.workloads,
        }
        for key, s in sorted(sums.items())
    ]


def _upsert(connection: Connection, insert: Any, sums: dict[UsageKey, Sums], sign: int = 1) -> None:
    rows = _rows(sums, sign)
    if not rows:
        return
    statement = insert(connection, period_usage)
    statement = statement.on_conflict_do_update(
        index_elements=_KEY_COLUMNS,
        set_={
            name: period_usage.c[name] + statement.excluded[name]
            for name in ("allocated_gpu_s", "unallocated_gpu_s", "workloads")
        },
    )
    connection.execute(statement, rows)


def _chunks(values: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i : i + _CHUNK]
