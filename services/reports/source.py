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

from sqlalchemy import Connection, Engine, and_, func, select

from events.times import HOUR
from projections.figures import PoolHistory
from projections.report_buckets import Bucket
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
from services.reports.charged import (
    Preemption,
    Usage,
    first_instant,
    read_preemptions,
    read_usage,
)
from services.reports.history import pool_histories

DEFAULT_PROJECTOR = PROJECTOR_NAME
#: Workload statuses after which it wants no GPUs (until a requeue makes it pending again).
ENDED = ("succeeded", "failed", "cancelled", "preempted", "lost")


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


@dataclass
class Snapshot:
    positions: list[tuple[str, int, int]]
    horizon: int | None
    #: What the ledger charged in each bucket of the range (of the report's bucket kind).
    usage: list[Usage]
    nodes: list[Node]
    budgets: list[Budget]
    #: The preemptions suffered in the range.
    preemptions: list[Preemption]
    #: Every weight each budget has had, in time order (empty before migration 0002's data).
    weights: list[WeightChange] = field(default_factory=list)
    #: Every state each node has been in during the range, in time order, after the state
    #: each was in as the range starts.
    node_history: list[NodeChange] = field(default_factory=list)
    #: The first ledger bucket or submission (the range's default start).
    first: int | None = None
    #: The first instant the range was loaded for (None: from the first).
    start: int | None = None
    #: Each pool's history from ``start`` to the horizon (:mod:`projections.figures`).
    histories: dict[str, PoolHistory] = field(default_factory=dict)

    @property
    def log_position(self) -> str:
        """``topic/partition@next_offset`` of every partition the projector has read, sorted:
        the position the figures were computed at ("" before anything was projected)."""
        return ";".join(f"{t}/{p}@{o}" for t, p, o in self.positions)

    def pools(self) -> list[str]:
        found = {n.pool for n in self.nodes} | {u.pool for u in self.usage}
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
    bucket: Bucket,
    start: int | None = None,
    end: int | None = None,
    projector: str = DEFAULT_PROJECTOR,
) -> Snapshot:
    """Read what a report of ``bucket``s over ``[start, end)`` (on bucket boundaries; None:
    from the first data, up to the horizon) needs, in one transaction."""
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            return load_on(connection, bucket, start, end, projector)


def load_on(
    connection: Connection,
    bucket: Bucket,
    start: int | None,
    end: int | None,
    projector: str = DEFAULT_PROJECTOR,
) -> Snapshot:
    """:func:`load` within a transaction the caller holds (to read more in the same one)."""
    where = positions(connection, projector)
    latest = horizon(connection)
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
        usage=read_usage(connection, bucket, start, end),
        nodes=_nodes(connection),
        budgets=found,
        node_history=_node_history(connection, start, end),
        weights=weights,
        preemptions=read_preemptions(connection, start, end),
        first=first_instant(connection, end) if start is None else None,
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


def _node_history(connection: Connection, start: int | None, end: int | None) -> list[NodeChange]:
    """Each node's state as ``[start, end)`` begins (its latest change at or before ``start``)
    and its changes during it, in time order: within the range, the same segments and the
    same capacity as the whole history gives."""
    states = node_states.c
    during = select(node_states)
    if end is not None:
        during = during.where(states.effective_at < end)
    rows: list[Any] = []
    if start is not None:
        latest = (
            select(states.node, func.max(states.effective_at).label("at"))
            .where(states.effective_at <= start)
            .group_by(states.node)
            .subquery()
        )
        before = select(node_states).join(
            latest, and_(states.node == latest.c.node, states.effective_at == latest.c.at)
        )
        rows.extend(connection.execute(before))
        during = during.where(states.effective_at > start)
    rows.extend(connection.execute(during))
    rows.sort(key=lambda r: (int(r.effective_at), str(r.node), str(r.event_id)))
    return [
        NodeChange(row.node, row.pool, int(row.gpus), row.state, int(row.effective_at))
        for row in rows
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
