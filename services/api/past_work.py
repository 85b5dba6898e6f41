"""Work that ended before the live view's horizon, as the read models keep it.

The API's view forgets work a window and a day after it ended
(``projections.live_state.FORGET_AFTER_S``): a view that kept every workload ever submitted
grew with the fleet's age. The projector's read models keep it, so ``GET /workloads/{id}`` and
``/history`` answer from them for what the view no longer holds, and a submission cannot take
the id of work the view forgot. What the read models do not keep (the spec, the placement, the
exit code) is in the log: ``fairshare audit explain <workload>``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Engine, bindparam, case, func, select
from sqlalchemy.exc import SQLAlchemyError

from events.models import WorkloadArraySubmitted
from services.api import models as m
from services.api.sentences import iso
from services.read_models.tables import demand_intervals, job_arrays, ledger_entries, workloads


def past_workload(engine: Engine | None, workload_id: str) -> m.WorkloadView | None:
    """``workload_id`` as the read models have it, or None (unknown there, or no read models)."""
    found = _views(engine, workloads.c.workload_id == workload_id, limit=1)
    return found[0] if found else None


def past_first_demand(engine: Engine | None, pool: str) -> float | None:
    """When work first asked for GPUs of ``pool``, as the read models have it (the start of
    the pool's data once the view has forgotten its oldest work); None without them."""
    if engine is None:
        return None
    query = select(func.min(demand_intervals.c.start_at)).where(demand_intervals.c.pool == pool)
    try:
        with engine.connect() as connection:
            first = connection.scalar(query)
    except SQLAlchemyError:  # no read models yet
        return None
    return None if first is None else float(first)


#: Built once: every submission asks it once the view has forgotten anything, and building
#: the statement each time took two thirds of its 200 us.
_ENDED = select(workloads.c.ended_at).where(
    workloads.c.workload_id == bindparam("workload_id"), workloads.c.ended_at.is_not(None)
)


def past_end(engine: Engine | None, workload_id: str) -> float | None:
    """When ``workload_id`` ended, if the read models hold it as ended (one indexed row: the
    check every submission makes once the view has forgotten anything)."""
    if engine is None:
        return None
    try:
        with engine.connect() as connection:
            ended = connection.scalar(_ENDED, {"workload_id": workload_id})
    except SQLAlchemyError:  # no read models yet
        return None
    return None if ended is None else float(ended)


def past_array(engine: Engine | None, array_id: str) -> bool:
    """Whether the read models hold an element of the array ``array_id`` (one indexed row)."""
    if engine is None:
        return False
    query = select(workloads.c.workload_id).where(workloads.c.array_id == array_id).limit(1)
    try:
        with engine.connect() as connection:
            return connection.execute(query).first() is not None
    except SQLAlchemyError:  # no read models yet
        return False


def past_array_fact(
    engine: Engine | None, array_id: str
) -> tuple[WorkloadArraySubmitted, float, Counter[str]] | None:
    """The array ``array_id`` as the read models keep it: its fact as the log states it, when it
    was submitted, and its elements per status; None when they do not hold it."""
    if engine is None:
        return None
    try:
        with engine.connect() as connection:
            row = connection.execute(
                select(job_arrays.c.submitted_at, job_arrays.c.data).where(
                    job_arrays.c.array_id == array_id
                )
            ).first()
            if row is None:
                return None
            counted = connection.execute(
                select(workloads.c.status, func.count())
                .where(workloads.c.array_id == array_id)
                .group_by(workloads.c.status)
            ).all()
    except SQLAlchemyError:  # no read models yet
        return None
    fact = WorkloadArraySubmitted.model_validate_json(orjson.dumps(row.data))
    return fact, float(row.submitted_at), Counter({str(s): int(n) for s, n in counted})


def past_taken(engine: Engine | None, ids: Sequence[str]) -> set[str]:
    """Those of ``ids`` the read models hold as workloads (a thousand ids per statement: an
    array's elements are checked in a few)."""
    if engine is None:
        return set()
    found: set[str] = set()
    try:
        with engine.connect() as connection:
            for start in range(0, len(ids), 1000):
                chunk = list(ids[start : start + 1000])
                query = select(workloads.c.workload_id).where(workloads.c.workload_id.in_(chunk))
                found.update(connection.execute(query).scalars())
    except SQLAlchemyError:  # no read models yet
        return set()
    return found


def past_history(
    engine: Engine | None,
    *,
    before: float,
    budget: str | None,
    submitter: str | None,
    pool: str | None,
    since: float | None,
    limit: int,
    array: str | None = None,
) -> tuple[int, list[m.WorkloadView]]:
    """Work that ended before ``before`` (what the view has forgotten), the latest end first,
    filtered as ``/history`` filters; how many match, and the first ``limit``."""
    conditions: list[Any] = [
        workloads.c.ended_at.is_not(None),
        workloads.c.ended_at < int(before),
        workloads.c.status.in_(("succeeded", "failed", "cancelled", "preempted", "lost")),
    ]
    if since is not None:
        conditions.append(workloads.c.ended_at >= int(since))
    if budget is not None:
        conditions.append(
            (workloads.c.budget == budget) | workloads.c.budget.startswith(budget + "/")
        )
    if submitter is not None:
        conditions.append(workloads.c.submitter == submitter)
    if pool is not None:
        conditions.append(workloads.c.pool == pool)
    if array is not None:
        conditions.append(workloads.c.array_id == array)
    if engine is None or before == float("-inf"):
        return 0, []
    try:
        with engine.connect() as connection:
            total = (
                connection.scalar(select(func.count()).select_from(workloads).where(*conditions))
                or 0
            )
    except SQLAlchemyError:
        return 0, []
    return int(total), _views(engine, *conditions, limit=limit)


def _views(engine: Engine | None, *conditions: Any, limit: int) -> list[m.WorkloadView]:
    if engine is None:
        return []
    query = (
        select(workloads)
        .where(*conditions)
        .order_by(workloads.c.ended_at.desc(), workloads.c.workload_id)
        .limit(limit)
    )
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
            charged = _charged(connection, [row["workload_id"] for row in rows])
    except SQLAlchemyError:  # no read models yet (a fresh database): nothing archived
        return []
    return [_view(row, charged.get(row["workload_id"], {})) for row in rows]


def _charged(connection: Any, ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """GPU-seconds charged per workload and kind, corrections included (a reversal debits
    capacity: it subtracts), as the view's totals count them."""
    if not ids:
        return {}
    signed = case(
        (ledger_entries.c.debit_account.startswith("capacity:"), -ledger_entries.c.gpu_seconds),
        else_=ledger_entries.c.gpu_seconds,
    )
    query = (
        select(ledger_entries.c.workload_id, ledger_entries.c.kind, func.sum(signed))
        .where(ledger_entries.c.workload_id.in_(ids))
        .group_by(ledger_entries.c.workload_id, ledger_entries.c.kind)
    )
    totals: dict[str, dict[str, int]] = {}
    for workload_id, kind, seconds in connection.execute(query):
        totals.setdefault(workload_id, {})[kind] = int(seconds or 0)
    return totals


def _view(row: Any, charged: dict[str, int]) -> m.WorkloadView:
    started, ended = row["started_at"], row["ended_at"]
    elapsed = None if started is None or ended is None else max(0, int(ended - started))
    return m.WorkloadView(
        workload_id=row["workload_id"],
        budget=row["budget"],
        submitter=row["submitter"],
        status=row["status"],
        pools=list(row["pools"]),
        gpus=row["gpus"],
        gang=row["gang"],
        min_runtime_s=row["min_runtime_s"],
        allocated=row["min_runtime_s"] > 0,
        resumable=row["resumable"],
        priority=row["priority"],
        spec={},
        attempt=row["attempt"],
        pool=row["pool"],
        placement=[],
        submitted_at=iso(float(row["submitted_at"])),
        placed_at=None,
        started_at=iso(None if started is None else float(started)),
        contract_ends_at=None,
        preempting=False,
        cancel_requested=bool(row["cancel_requested"]),
        preemptions=row["preemptions"],
        ended_at=iso(None if ended is None else float(ended)),
        archived=True,
        elapsed_s=elapsed,
        charged_gpu_s=charged.get("allocated", 0),
        burst_gpu_s=charged.get("unallocated", 0),
        array_id=row["array_id"],
        array_index=row["array_index"],
    )
