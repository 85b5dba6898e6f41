"""A job array in the read models: its elements' rows written in bulk, and the facts of a
workload read before the workload itself.

An array's fact expands (``events.models.arrays.elements``) into one ``workloads`` row per
element, with the demand each pending element opens (``projections.figures.wanted_gpus``, as
for any submission) and the charges read ahead of it moved to its submitter: written with a
statement per table, not per element, so a 10,000-element array costs the projector a few
statements, not tens of thousands.

An element's later facts lie on its own partition, the array's fact on the array's, and the
projector reads partitions in no order between them: a placement can come before the array.
Such a fact is not applied to nothing (every status change of the element would be lost); it
waits in ``early_facts`` and is applied, in the order it was read, once its workload is
projected, whichever way that was submitted (:mod:`services.projector.workload_fold` keeps and
releases it; :func:`services.projector.workload_tables.release` here).
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import Connection, select

from events.models import WorkloadArraySubmitted
from events.models.arrays import elements
from projections.figures import wanted_gpus
from services.projector import workload_tables
from services.projector.workload_tables import Insert
from services.read_models import usage_upkeep
from services.read_models.demand_upkeep import Change, apply_changes, registered_gpus
from services.read_models.tables import (
    demand_intervals,
    job_arrays,
    ledger_entries,
    workload_checkpoints,
    workloads,
)

#: Rows per statement where a list of ids is sent (below every dialect's bound on parameters).
CHUNK = 1000


def project_array(
    connection: Connection,
    e: WorkloadArraySubmitted,
    at: int,
    insert: Insert,
    checkpoint_every_s: int | None,
) -> None:
    """Each element a ``workloads`` row (an id already taken keeps its row, as the fold keeps
    its workload), with its demand, its checkpoints (how often its spec says it checkpoints)
    and the charges read ahead of it; and the array's fact, a ``job_arrays`` row (kept by the
    first array of that id, as the fold keeps it)."""
    connection.execute(
        insert(connection, job_arrays).on_conflict_do_nothing(index_elements=["array_id"]),
        [
            {
                "array_id": e.array_id,
                "budget": e.budget,
                "submitted_at": at,
                "data": e.model_dump(mode="json"),
            }
        ],
    )
    rows = [
        {
            "workload_id": element.workload_id,
            "budget": e.budget,
            "pools": list(e.pools),
            "gpus": e.gpus,
            "gang": e.gang,
            "min_runtime_s": e.min_runtime_s,
            "resumable": e.resumable,
            "priority": e.priority,
            "submitter": e.submitter,
            "status": "pending",
            "attempt": 1,
            "submitted_at": at,
            "preemptions": 0,
            "array_id": e.array_id,
            "array_index": index,
        }
        for index, element in elements(e)
    ]
    statement = (
        insert(connection, workloads)
        .on_conflict_do_nothing(index_elements=["workload_id"])
        .returning(workloads.c.workload_id)
    )
    created = sorted(connection.execute(statement, rows).scalars())
    if not created:
        return
    _open_demand(connection, e, at, created, insert)
    if checkpoint_every_s is not None:
        connection.execute(
            insert(connection, workload_checkpoints).on_conflict_do_nothing(
                index_elements=["workload_id"]
            ),
            [{"workload_id": w, "checkpoint_every_s": checkpoint_every_s} for w in created],
        )
    for workload_id in _charged_already(connection, created):
        usage_upkeep.submitted(connection, insert, workload_id, e.submitter)
    workload_tables.release(connection, insert, created)


def _open_demand(
    connection: Connection, e: WorkloadArraySubmitted, at: int, created: list[str], insert: Insert
) -> None:
    """What each new element wants while pending (the rule every submission follows), as
    intervals, and the leaf's demand histograms changed once per pool by their sum."""
    wants = wanted_gpus(
        allocated=e.min_runtime_s > 0,
        status="pending",
        gpus=e.gpus,
        pools=e.pools,
        pool=None,
        awaiting_requeue=False,
        registered=lambda pool: registered_gpus(connection, pool),
    )
    if not wants:
        return
    rows = [
        {
            "workload_id": workload_id,
            "seq": seq,
            "pool": pool,
            "budget": e.budget,
            "gpus": gpus,
            "start_at": at,
            "end_at": None,
        }
        for workload_id in created
        for seq, (pool, gpus) in enumerate(sorted(wants.items()), start=1)
    ]
    connection.execute(insert(connection, demand_intervals), rows)
    changes: list[Change] = [
        (pool, e.budget, gpus * len(created), at) for pool, gpus in sorted(wants.items())
    ]
    apply_changes(connection, changes, insert)


def _charged_already(connection: Connection, workload_ids: list[str]) -> list[str]:
    """Those of ``workload_ids`` with charges on the ledger already (read ahead of them)."""
    found: set[str] = set()
    for chunk in _chunks(workload_ids):
        query = select(ledger_entries.c.workload_id).where(ledger_entries.c.workload_id.in_(chunk))
        found.update(connection.execute(query.distinct()).scalars())
    return sorted(found)


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
