"""What the reports read of the ledger and the decisions, by their range alone: the sums the
projector keeps per bucket (the table ``period_usage``, :mod:`projections.bucket_usage`) and the
preemptions of the range, each placed where the reports count it.

A month's daily charges report reads its 30 days x budgets x pools x submitters rows and its
preemptions, whatever ran in the month and before it; it never reads a ledger entry but those
of the few preempted workloads (which pool their run was charged in).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from events.models.ledger import parse_charge_id
from projections.report_buckets import Bucket
from services.read_models.tables import decision_records, ledger_entries, period_usage, workloads


@dataclass(frozen=True, slots=True)
class Usage:
    """What the ledger charged in one bucket, pool, leaf budget, submitter and line."""

    bucket_start: int
    pool: str
    budget: str
    submitter: str
    correction: bool
    allocated: int
    unallocated: int
    workloads: int


@dataclass(frozen=True, slots=True)
class Preemption:
    """A preemption suffered (not a cancellation), placed where the reports count it: the pool
    its run was charged in (else any the workload was charged in, else the first it asked
    for), the workload's budget and submitter."""

    pool: str
    budget: str
    submitter: str
    event_time: int


def read_usage(
    connection: Connection, bucket: Bucket, start: int | None, end: int | None
) -> list[Usage]:
    """The sums of the buckets starting in ``[start, end)`` (on ``bucket``'s boundaries)."""
    kept = period_usage.c
    query = select(period_usage).where(kept.kind == bucket)
    if start is not None:
        query = query.where(kept.period_start >= start)
    if end is not None:
        query = query.where(kept.period_start < end)
    order = (kept.period_start, kept.pool, kept.budget, kept.submitter, kept.correction)
    return [
        Usage(
            bucket_start=int(row.period_start),
            pool=str(row.pool),
            budget=str(row.budget),
            submitter=str(row.submitter),
            correction=bool(row.correction),
            allocated=int(row.allocated_gpu_s),
            unallocated=int(row.unallocated_gpu_s),
            workloads=int(row.workloads),
        )
        for row in connection.execute(query.order_by(*order))
    ]


def first_instant(connection: Connection, end: int | None) -> int | None:
    """The first ledger bucket (before ``end``) or submission: a report's default start."""
    bucket = select(func.min(ledger_entries.c.bucket_start))
    if end is not None:
        bucket = bucket.where(ledger_entries.c.bucket_start < end)
    found = [
        connection.execute(bucket).scalar(),
        connection.execute(select(func.min(workloads.c.submitted_at))).scalar(),
    ]
    values = [int(v) for v in found if v is not None]
    return min(values) if values else None


def read_preemptions(
    connection: Connection, start: int | None, end: int | None
) -> list[Preemption]:
    """Preemptions suffered in ``[start, end)`` (cancellations are the submitter's own doing
    and not counted), of workloads the read models know."""
    records = decision_records.c
    query = select(records.workload_id, records.attempt, records.event_time).where(
        records.kind == "preempt", records.reason != "cancel"
    )
    if start is not None:
        query = query.where(records.event_time >= start)
    if end is not None:
        query = query.where(records.event_time < end)
    found = connection.execute(query.order_by(records.command_id)).all()
    ids = sorted({str(row.workload_id) for row in found})
    known = {row.workload_id: row for row in _workloads(connection, ids)}
    charged, anywhere = _charged_pools(connection, ids)
    preemptions = []
    for workload_id, attempt, at in found:
        workload = known.get(workload_id)
        if workload is None:
            continue
        pools = charged.get((workload_id, int(attempt))) or anywhere.get(workload_id)
        pool = min(pools) if pools else (workload.pools[0] if workload.pools else None)
        if pool is not None:
            preemptions.append(Preemption(pool, workload.budget, workload.submitter, int(at)))
    return preemptions


def _workloads(connection: Connection, ids: list[str]) -> Iterable[Any]:
    columns = (
        workloads.c.workload_id,
        workloads.c.budget,
        workloads.c.submitter,
        workloads.c.pools,
    )
    for chunk in _chunks(ids):
        yield from connection.execute(select(*columns).where(workloads.c.workload_id.in_(chunk)))


def _charged_pools(
    connection: Connection, ids: list[str]
) -> tuple[dict[tuple[str, int], set[str]], dict[str, set[str]]]:
    """Pools each (workload, attempt) and each workload was charged in (from the charge ids),
    of these workloads."""
    per_attempt: dict[tuple[str, int], set[str]] = {}
    per_workload: dict[str, set[str]] = {}
    query = select(ledger_entries.c.charge_id, ledger_entries.c.pool)
    for chunk in _chunks(ids):
        for charge, pool in connection.execute(
            query.where(ledger_entries.c.workload_id.in_(chunk))
        ):
            parsed = parse_charge_id(charge)
            per_workload.setdefault(charge if parsed is None else parsed[0], set()).add(pool)
            if parsed is not None:
                per_attempt.setdefault((parsed[0], parsed[1]), set()).add(pool)
    return per_attempt, per_workload


def _chunks(values: list[str], size: int = 500) -> Iterable[list[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]
