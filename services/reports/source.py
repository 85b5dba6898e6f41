"""What the reports read from the SQL read models, in one consistent snapshot.

Everything is read in one transaction (``REPEATABLE READ`` on PostgreSQL; SQLite's read
transaction is a snapshot too), so the figures, the horizon and the projector's position all
belong to the same moment of the log, even while the projector keeps writing.

The *horizon* is the latest event time the read models hold (ledger entries, workload and node
changes, budgets, decision records): "now" as far as the log is concerned. Reports use it, and
never the wall clock, wherever an open interval must end (pending work, a node still down), so
regenerating a report from the same log position gives the same bytes.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from events.models.ledger import parse_charge_id
from events.times import HOUR
from projections.figures import PoolHistory
from services.projector.sql_projector import PROJECTOR_NAME
from services.read_models.tables import (
    budget_weights,
    budgets,
    decision_records,
    ledger_entries,
    node_states,
    nodes,
    projector_positions,
    workloads,
)
from services.reports.history import pool_histories

DEFAULT_PROJECTOR = PROJECTOR_NAME
#: Workload statuses after which it wants no GPUs (until a requeue makes it pending again).
ENDED = ("succeeded", "failed", "cancelled", "preempted", "lost")


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry, signed as it adds to its budget (a reversal is negative)."""

    workload_id: str
    budget: str
    pool: str
    bucket_start: int
    allocated: bool
    correction: bool
    gpu_s: int


@dataclass(frozen=True, slots=True)
class Workload:
    workload_id: str
    budget: str
    pools: tuple[str, ...]
    gpus: int
    allocated: bool
    submitter: str
    status: str
    submitted_at: int
    ended_at: int | None
    #: The current attempt and when it started (None until it has).
    attempt: int = 1
    started_at: int | None = None


@dataclass(frozen=True, slots=True)
class Node:
    node: str
    pool: str
    gpus: int
    state: str
    changed_at: int


@dataclass(frozen=True, slots=True)
class NodeChange:
    node: str
    pool: str
    gpus: int
    #: "up", "cordoned", "drained" or "down", from ``effective_at`` on.
    state: str
    effective_at: int


@dataclass(frozen=True, slots=True)
class WeightChange:
    budget: str
    #: "" for the weight in every pool without an override.
    pool: str
    weight: float
    effective_at: int


@dataclass(frozen=True, slots=True)
class Budget:
    budget: str
    weight: float
    pool_weights: dict[str, float]
    created_at: int
    closed_at: int | None


@dataclass(frozen=True, slots=True)
class Preemption:
    workload_id: str
    attempt: int
    reason: str
    event_time: int


@dataclass
class Snapshot:
    positions: list[tuple[str, int, int]]
    horizon: int | None
    entries: list[Entry]
    workloads: dict[str, Workload]
    nodes: list[Node]
    budgets: list[Budget]
    preemptions: list[Preemption]
    #: Every weight each budget has had, in time order (empty before migration 0002's data).
    weights: list[WeightChange] = field(default_factory=list)
    #: Every state each node has been in, in time order.
    node_history: list[NodeChange] = field(default_factory=list)
    #: Pools each (workload, attempt) was charged in (from the charge ids).
    charged_pools: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    #: Pools each workload was charged in, any attempt.
    workload_pools: dict[str, set[str]] = field(default_factory=dict)
    #: The first instant the ledger entries were loaded for (None: from the first).
    start: int | None = None
    #: Each pool's history from ``start`` to the horizon (:mod:`projections.figures`).
    histories: dict[str, PoolHistory] = field(default_factory=dict)

    @property
    def log_position(self) -> str:
        """``topic/partition@next_offset`` of every partition the projector has read, sorted:
        the position the figures were computed at ("" before anything was projected)."""
        return ";".join(f"{t}/{p}@{o}" for t, p, o in self.positions)

    def pools(self) -> list[str]:
        found = {n.pool for n in self.nodes} | {e.pool for e in self.entries}
        return sorted(found)

    def capacity(self, pool: str) -> int:
        """GPUs of the pool's nodes now."""
        return sum(n.gpus for n in self.nodes if n.pool == pool)

    @cached_property
    def _history_by_node(self) -> dict[str, list[NodeChange]]:
        by_node: dict[str, list[NodeChange]] = {}
        for change in self.node_history:
            by_node.setdefault(change.node, []).append(change)
        return by_node

    @cached_property
    def _capacity_steps(self) -> dict[str, tuple[list[int], list[int]]]:
        """Per pool, the pool's GPUs after each node change, in time order (read once; reports
        ask for the capacity at every piece of every leaf)."""
        latest: dict[str, NodeChange] = {}
        total: dict[str, int] = {}
        steps: dict[str, tuple[list[int], list[int]]] = {}
        for change in self.node_history:
            before = latest.get(change.node)
            latest[change.node] = change
            touched = {change.pool} | ({before.pool} if before is not None else set())
            if before is not None:
                total[before.pool] -= before.gpus
            total[change.pool] = total.get(change.pool, 0) + change.gpus
            for pool in touched:
                times, gpus = steps.setdefault(pool, ([], []))
                times.append(change.effective_at)
                gpus.append(total[pool])
        return steps

    def node_segments(self, pool: str, lo: int, hi: int) -> list[tuple[int, int, int, str]]:
        """``(start, end, gpus, state)`` of every node of ``pool`` within ``[lo, hi)``: a node
        counts from its registration on, in the state it was in at each moment."""
        by_node = self._history_by_node
        segments = []
        for node in sorted(by_node):
            changes = by_node[node]
            for i, change in enumerate(changes):
                end = changes[i + 1].effective_at if i + 1 < len(changes) else hi
                a, b = max(lo, change.effective_at), min(hi, end)
                if change.pool == pool and a < b:
                    segments.append((a, b, change.gpus, change.state))
        return segments

    def capacity_at(self, pool: str, at: int) -> int:
        """GPUs of the pool's registered nodes at ``at`` (cordoned and down ones included: they
        are capacity out of service, reported as such)."""
        times, gpus = self._capacity_steps.get(pool, ([], []))
        i = bisect_right(times, at)
        return gpus[i - 1] if i else 0


def _max(connection: Connection, *columns: Any) -> int | None:
    found = [connection.execute(select(func.max(c))).scalar() for c in columns]
    values = [int(v) for v in found if v is not None]
    return max(values) if values else None


def window_start(horizon: int, window_s: int) -> int:
    """The first hour of the window of ``window_s`` ending at ``horizon``: charges are by
    hour, so a window starts on one."""
    return (horizon - window_s) // HOUR * HOUR


def load(
    engine: Engine,
    start: int | None = None,
    end: int | None = None,
    projector: str = DEFAULT_PROJECTOR,
    *,
    window_s: int | None = None,
) -> Snapshot:
    """Read the read models; ledger entries only of hour buckets in ``[start, end)``. With
    ``window_s`` (and no ``start``), from the first hour of that window up to the horizon, read
    in the same transaction."""
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            return _load(connection, start, end, projector, window_s)


def _load(
    connection: Connection,
    start: int | None,
    end: int | None,
    projector: str,
    window_s: int | None = None,
) -> Snapshot:
    where = positions(connection, projector)
    latest = horizon(connection)
    if start is None and window_s is not None and latest is not None:
        start = window_start(latest, window_s)
    entries = _entries(connection, start, end)
    charged_pools, workload_pools = _charged_pools(connection)
    found, weights = read_budgets(connection), read_weights(connection)
    histories: dict[str, PoolHistory] = {}
    if latest is not None:
        changes = _share_changes(found, weights)
        histories = pool_histories(
            connection, start or 0, latest, summed=True, share_changes=changes
        )
    return Snapshot(
        positions=where,
        horizon=latest,
        entries=entries,
        workloads=_workloads(connection),
        nodes=_nodes(connection),
        budgets=found,
        node_history=_node_history(connection),
        weights=weights,
        preemptions=_preemptions(connection),
        charged_pools=charged_pools,
        workload_pools=workload_pools,
        start=start,
        histories=histories,
    )


def _share_changes(found: list[Budget], weights: list[WeightChange]) -> list[float]:
    """Every instant a share may change (a budget created or closed, a weight set): the hours
    around them are read change by change (:mod:`services.reports.summed_hours`)."""
    instants = {b.created_at for b in found} | {w.effective_at for w in weights}
    instants |= {b.closed_at for b in found if b.closed_at is not None}
    return sorted(float(at) for at in instants)


def positions(
    connection: Connection, projector: str = DEFAULT_PROJECTOR
) -> list[tuple[str, int, int]]:
    return sorted(
        (str(t), int(p), int(o))
        for t, p, o in connection.execute(
            select(
                projector_positions.c.topic,
                projector_positions.c.partition,
                projector_positions.c.next_offset,
            ).where(projector_positions.c.projector == projector)
        )
    )


def horizon(connection: Connection) -> int | None:
    return _max(
        connection,
        ledger_entries.c.event_time,
        workloads.c.submitted_at,
        workloads.c.started_at,
        workloads.c.ended_at,
        nodes.c.changed_at,
        budgets.c.created_at,
        budgets.c.closed_at,
        budget_weights.c.effective_at,
        node_states.c.effective_at,
        decision_records.c.event_time,
    )


def _entries(connection: Connection, start: int | None, end: int | None) -> list[Entry]:
    query = select(
        ledger_entries.c.charge_id,
        ledger_entries.c.workload_id,
        ledger_entries.c.budget,
        ledger_entries.c.pool,
        ledger_entries.c.bucket_start,
        ledger_entries.c.kind,
        ledger_entries.c.debit_account,
        ledger_entries.c.gpu_seconds,
        ledger_entries.c.corrects,
    )
    if start is not None:
        query = query.where(ledger_entries.c.bucket_start >= start)
    if end is not None:
        query = query.where(ledger_entries.c.bucket_start < end)
    entries: list[Entry] = []
    for row in connection.execute(query.order_by(ledger_entries.c.charge_id)):
        seconds = int(row.gpu_seconds)
        if str(row.debit_account).startswith("capacity:"):
            seconds = -seconds  # a reversal: capacity debited, the budget credited
        entries.append(
            Entry(
                workload_id=row.workload_id,
                budget=row.budget,
                pool=row.pool,
                bucket_start=int(row.bucket_start),
                allocated=row.kind == "allocated",
                correction=row.corrects is not None,
                gpu_s=seconds,
            )
        )
    return entries


def _charged_pools(
    connection: Connection,
) -> tuple[dict[tuple[str, int], set[str]], dict[str, set[str]]]:
    """Pools charged per (workload, attempt) and per workload, from every ledger entry (not
    only those of the report's range: a workload's pools do not depend on the range)."""
    charged_pools: dict[tuple[str, int], set[str]] = {}
    workload_pools: dict[str, set[str]] = {}
    for charge, pool in connection.execute(
        select(ledger_entries.c.charge_id, ledger_entries.c.pool)
    ):
        workload_pools.setdefault(_workload_of(charge), set()).add(pool)
        parsed = parse_charge_id(charge)
        if parsed is not None:
            attempt = (parsed[0], parsed[1])
            charged_pools.setdefault(attempt, set()).add(pool)
    return charged_pools, workload_pools


def _workloads(connection: Connection) -> dict[str, Workload]:
    return {
        row.workload_id: Workload(
            workload_id=row.workload_id,
            budget=row.budget,
            pools=tuple(row.pools),
            gpus=int(row.gpus),
            allocated=int(row.min_runtime_s) > 0,
            submitter=row.submitter,
            status=row.status,
            submitted_at=int(row.submitted_at),
            ended_at=None if row.ended_at is None else int(row.ended_at),
            attempt=int(row.attempt),
            started_at=None if row.started_at is None else int(row.started_at),
        )
        for row in connection.execute(select(workloads).order_by(workloads.c.workload_id))
    }


def _nodes(connection: Connection) -> list[Node]:
    return [
        Node(row.node, row.pool, int(row.gpus), row.state, int(row.changed_at))
        for row in connection.execute(select(nodes).order_by(nodes.c.node))
    ]


def read_budgets(connection: Connection) -> list[Budget]:
    return [
        Budget(
            budget=row.budget,
            weight=float(row.weight),
            pool_weights={str(k): float(v) for k, v in sorted(dict(row.pool_weights).items())},
            created_at=int(row.created_at),
            closed_at=None if row.closed_at is None else int(row.closed_at),
        )
        for row in connection.execute(select(budgets).order_by(budgets.c.budget))
    ]


def _node_history(connection: Connection) -> list[NodeChange]:
    return [
        NodeChange(row.node, row.pool, int(row.gpus), row.state, int(row.effective_at))
        for row in connection.execute(
            select(node_states).order_by(
                node_states.c.effective_at, node_states.c.node, node_states.c.event_id
            )
        )
    ]


def read_weights(connection: Connection) -> list[WeightChange]:
    return [
        WeightChange(row.budget, row.pool, float(row.weight), int(row.effective_at))
        for row in connection.execute(
            select(budget_weights).order_by(
                budget_weights.c.effective_at,
                budget_weights.c.budget,
                budget_weights.c.pool,
                budget_weights.c.event_id,
            )
        )
    ]


def _preemptions(connection: Connection) -> list[Preemption]:
    return [
        Preemption(row.workload_id, int(row.attempt), row.reason, int(row.event_time))
        for row in connection.execute(
            select(
                decision_records.c.workload_id,
                decision_records.c.attempt,
                decision_records.c.reason,
                decision_records.c.event_time,
            )
            .where(decision_records.c.kind == "preempt")
            .order_by(decision_records.c.command_id)
        )
    ]


def _workload_of(charge: str) -> str:
    parsed = parse_charge_id(charge)
    return charge if parsed is None else parsed[0]
