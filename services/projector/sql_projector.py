"""Writes the read models from delivered events, exactly once per log position.

Each batch is one transaction holding both the rows and the projector's new positions
(topic, partition, next offset), so a crash anywhere either keeps the whole batch or none of
it. On redelivery, events before the stored position are skipped, and every write is
idempotent anyway (keys are event or charge ids), so neither a restart nor a duplicated event
can double-count: hourly usage is only added to when a ledger entry is newly inserted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from events.models import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    EventData,
    LedgerCharge,
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
    PeriodClosed,
    PlaceCommand,
    PreemptCommand,
    PriceSet,
    WorkloadArraySubmitted,
)
from events.models.ledger import parse_charge_id
from events.positions import Delivery
from events.times import HOUR
from services.projector import arrays, workload_tables
from services.projector.workload_fold import (
    FOLDED,
    STOPPED,
    Fact,
    WorkloadFold,
    checkpoint_every_s,
    wanted,
)
from services.read_models import usage_upkeep
from services.read_models.demand_upkeep import batched, forget_registered, registered_gpus
from services.read_models.tables import (
    budget_weights,
    budgets,
    closed_periods,
    decision_records,
    hourly_usage,
    ledger_entries,
    node_states,
    nodes,
    prices,
    projector_positions,
    runs,
    workloads,
)

Effect = Callable[[Connection, Any, int, str], None]


def _insert(connection: Connection, table: Any) -> Any:
    dialect = connection.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"read models support sqlite and postgresql, not {dialect}")


#: The projector's name in ``projector_positions`` (and its consumer group): readers of the
#: read models (the reports) name the log position their figures were computed at from it.
PROJECTOR_NAME = "fairshare-read-models"


class SqlProjector:
    def __init__(self, engine: Engine, name: str = PROJECTOR_NAME) -> None:
        self.engine = engine
        self.name = name

    def positions(self) -> dict[tuple[str, int], int]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(
                    projector_positions.c.topic,
                    projector_positions.c.partition,
                    projector_positions.c.next_offset,
                ).where(projector_positions.c.projector == self.name)
            )
            return {(topic, partition): offset for topic, partition, offset in rows}

    def apply(self, deliveries: Sequence[Delivery]) -> int:
        """Apply a batch in one transaction; returns how many events were new."""
        applied = 0
        with self.engine.begin() as connection:
            stored = {
                (t, p): o
                for t, p, o in connection.execute(
                    select(
                        projector_positions.c.topic,
                        projector_positions.c.partition,
                        projector_positions.c.next_offset,
                    ).where(projector_positions.c.projector == self.name)
                )
            }
            advanced: dict[tuple[str, int], int] = {}
            charges: list[tuple[LedgerCharge, int, str, int, int]] = []
            # Consecutive workload facts are applied together, to the rows they touch as read
            # once (workload_tables); any other fact with an effect applies after them, in
            # log order.
            run: list[Fact] = []
            with batched(connection, _insert), usage_upkeep.deferred(connection, _insert):
                for delivery in deliveries:
                    key = (delivery.position.topic, delivery.position.partition)
                    next_offset = advanced.get(key, stored.get(key, 0))
                    if delivery.position.offset < next_offset:
                        continue  # redelivered: already in the tables
                    envelope = delivery.envelope
                    at = int(envelope.time.timestamp())
                    data = envelope.data
                    if isinstance(data, LedgerCharge):
                        # Charges touch only the ledger tables: written together, in bulk.
                        where = delivery.position
                        charges.append((data, at, envelope.id, where.partition, where.offset))
                    elif isinstance(data, FOLDED):
                        run.append(Fact(data, at, envelope.id))
                    elif type(data) in _EFFECTS:
                        workload_tables.project(connection, _insert, run)
                        run = []
                        _EFFECTS[type(data)](connection, data, at, envelope.id)
                    advanced[key] = delivery.position.offset + 1
                    applied += 1
                workload_tables.project(connection, _insert, run)
            if charges:
                _charges(connection, charges)
            for (topic, partition), offset in advanced.items():
                statement = _insert(connection, projector_positions).values(
                    projector=self.name, topic=topic, partition=partition, next_offset=offset
                )
                connection.execute(
                    statement.on_conflict_do_update(
                        index_elements=["projector", "topic", "partition"],
                        set_={"next_offset": offset},
                    )
                )
        return applied


# -- effects, one per event type ---------------------------------------------------------------


def _charges(connection: Connection, batch: list[tuple[LedgerCharge, int, str, int, int]]) -> None:
    """Insert a batch of charges; add to hourly usage only those newly inserted (a duplicated
    charge id is already counted)."""
    rows: dict[str, dict[str, Any]] = {}
    by_id: dict[str, LedgerCharge] = {}
    for e, at, event_id, partition, offset in batch:
        if e.charge_id in by_id:
            continue
        by_id[e.charge_id] = e
        rows[e.charge_id] = {
            "charge_id": e.charge_id,
            "workload_id": e.workload_id,
            "budget": e.budget,
            "pool": e.pool,
            "bucket_start": int(e.bucket_start.timestamp()),
            "kind": e.kind,
            "debit_account": e.debit_account,
            "credit_account": e.credit_account,
            "gpu_seconds": e.gpu_seconds,
            "amount": e.amount,
            "corrects": e.corrects,
            "event_id": event_id,
            "event_time": at,
            "attempt": _attempt_of(e),
            **_ledger_position(partition, offset),
        }
    statement = (
        _insert(connection, ledger_entries)
        .on_conflict_do_nothing(index_elements=["charge_id"])
        .returning(ledger_entries.c.charge_id)
    )
    inserted = set(connection.execute(statement, list(rows.values())).scalars())
    _charged_until(connection, [by_id[c] for c in sorted(inserted)])
    entries = {c: usage_upkeep.entry_of_charge(by_id[c]) for c in inserted}
    usage_upkeep.add_entries(connection, _insert, entries)
    usage: dict[tuple[str, str, int], list[int]] = {}
    for charge_id in inserted:
        charge = by_id[charge_id]
        hour = int(charge.bucket_start.timestamp())
        totals = usage.setdefault((charge.pool, charge.budget, hour), [0, 0])
        totals[0 if charge.kind == "allocated" else 1] += charge.signed_gpu_seconds
    if not usage:
        return
    upsert = _insert(connection, hourly_usage)
    upsert = upsert.on_conflict_do_update(
        index_elements=["pool", "budget", "bucket_start"],
        set_={
            "allocated_gpu_s": hourly_usage.c.allocated_gpu_s + upsert.excluded.allocated_gpu_s,
            "unallocated_gpu_s": hourly_usage.c.unallocated_gpu_s
            + upsert.excluded.unallocated_gpu_s,
        },
    )
    connection.execute(
        upsert,
        [
            {
                "pool": pool,
                "budget": budget,
                "bucket_start": bucket,
                "allocated_gpu_s": allocated,
                "unallocated_gpu_s": unallocated,
            }
            for (pool, budget, bucket), (allocated, unallocated) in sorted(usage.items())
        ],
    )


def _attempt_of(charge: LedgerCharge) -> int | None:
    parsed = parse_charge_id(charge.charge_id)
    return None if parsed is None else parsed[1]


def _charged_until(connection: Connection, charges: list[LedgerCharge]) -> None:
    """Move each charged run's ``charged_until`` to the end of its latest hour charged, and
    settle the runs whose charges now reach their end (a run not started yet starts charged
    as far as its charges reach: ``workload_fold.Stored.charged``)."""
    reach: dict[tuple[str, int], int] = {}
    for charge in charges:
        if charge.corrects is None:
            key = (charge.workload_id, _attempt_of(charge) or 0)
            end = int(charge.bucket_start.timestamp()) + HOUR
            reach[key] = max(reach.get(key, end), end)
    if not reach:
        return
    charged = sorted(reach.items())
    connection.execute(
        _CHARGED_UNTIL,
        [{"key_workload": w, "key_attempt": a, "until": until} for (w, a), until in charged],
    )
    connection.execute(_SETTLE, [{"key_workload": w, "key_attempt": a} for (w, a), _ in charged])


_A_RUN = (
    runs.c.workload_id == bindparam("key_workload"),
    runs.c.attempt == bindparam("key_attempt"),
)
#: Built once, executed once per batch for every run charged.
_CHARGED_UNTIL = (
    update(runs)
    .where(
        *_A_RUN,
        or_(runs.c.charged_until.is_(None), runs.c.charged_until < bindparam("until")),
    )
    .values(charged_until=bindparam("until"))
)
#: A run whose charges reach its end (or that never ran) is settled (``workload_fold.settles``
#: is the same rule on a run in memory).
_SETTLE = (
    update(runs)
    .where(
        *_A_RUN,
        runs.c.ended_at.is_not(None),
        or_(runs.c.charged_until >= runs.c.ended_at, runs.c.ended_at <= runs.c.started_at),
    )
    .values(settled=True)
)


def _array_submitted(connection: Connection, e: WorkloadArraySubmitted, at: int, _id: str) -> None:
    arrays.project_array(connection, e, at, _insert, checkpoint_every_s(e.spec))


def _node_registered(connection: Connection, e: NodeRegistered, at: int, event_id: str) -> None:
    before = registered_gpus(connection, e.pool)
    _node_history(connection, event_id, e.node, e.pool, e.gpus, "up", at)
    connection.execute(
        _insert(connection, nodes)
        .values(
            node=e.node,
            cluster=e.cluster,
            pool=e.pool,
            gpus=e.gpus,
            gpu_type=e.gpu_type,
            state="up",
            changed_at=at,
        )
        .on_conflict_do_update(index_elements=["node"], set_={"state": "up", "changed_at": at})
    )
    forget_registered(e.pool)
    _now_holdable(connection, e.pool, before, registered_gpus(connection, e.pool), at)


def _now_holdable(connection: Connection, pool: str, before: int, after: int, at: int) -> None:
    """Waiting work whose demand in the pool this node changes: what the pool could not hold
    before and can now opens; what a pool first judged is too large for closes (the rule keeps
    work that could never start out of demand, and does not judge a pool with no node). From
    the later of the registration and the workload's waiting since, so a log read in another
    order gives the same intervals."""
    if after <= before:
        return
    waiting = select(workloads.c.workload_id, workloads.c.pools).where(
        workloads.c.status.in_(("pending", *STOPPED))
    )
    if before > 0:
        waiting = waiting.where(workloads.c.gpus > before, workloads.c.gpus <= after)
    ids = [str(w) for w, pools in connection.execute(waiting) if pool in tuple(pools)]
    if not ids:
        return

    def now(name: str) -> int:
        return registered_gpus(connection, name)

    def old(name: str) -> int:
        return before if name == pool else now(name)

    fold = WorkloadFold(workload_tables.load(connection, ids), now)
    for workload_id in ids:
        row = fold.workloads[workload_id]
        since = row.ended_at if row.status != "pending" and row.ended_at else row.submitted_at
        fold.restate(workload_id, wanted(row, old), wanted(row, now), max(at, int(since or 0)))
    workload_tables.store(connection, _insert, fold.writes())


def _node_state(state: str) -> Callable[[Connection, Any, int, str], None]:
    def effect(connection: Connection, e: Any, at: int, event_id: str) -> None:
        node = connection.execute(
            select(nodes.c.pool, nodes.c.gpus).where(nodes.c.node == e.node)
        ).first()
        if node is None:
            return
        _node_history(connection, event_id, e.node, node.pool, node.gpus, state, at)
        connection.execute(
            update(nodes).where(nodes.c.node == e.node).values(state=state, changed_at=at)
        )

    return effect


def _node_history(
    connection: Connection, event_id: str, node: str, pool: str, gpus: int, state: str, at: int
) -> None:
    connection.execute(
        _insert(connection, node_states)
        .values(event_id=event_id, node=node, pool=pool, gpus=gpus, state=state, effective_at=at)
        .on_conflict_do_nothing(index_elements=["event_id"])
    )


def _budget_created(connection: Connection, e: BudgetCreated, at: int, event_id: str) -> None:
    created = connection.execute(
        _insert(connection, budgets)
        .values(budget=e.budget, weight=e.weight, pool_weights=dict(e.pool_weights), created_at=at)
        .on_conflict_do_nothing(index_elements=["budget"])
        .returning(budgets.c.budget)
    ).first()
    if created is not None:  # a second creation of the same budget is not a weight change
        for pool, weight in {"": e.weight, **e.pool_weights}.items():
            _weight_history(connection, event_id, e.budget, pool, weight, at)


def _weight_history(
    connection: Connection, event_id: str, budget: str, pool: str, weight: float, at: int
) -> None:
    connection.execute(
        _insert(connection, budget_weights)
        .values(event_id=event_id, pool=pool, budget=budget, weight=weight, effective_at=at)
        .on_conflict_do_nothing(index_elements=["event_id", "pool"])
    )


def _weight_changed(connection: Connection, e: BudgetWeightChanged, at: int, event_id: str) -> None:
    known = connection.execute(select(budgets.c.budget).where(budgets.c.budget == e.budget))
    if known.first() is not None:
        _weight_history(connection, event_id, e.budget, e.pool or "", e.weight, at)
    if e.pool is None:
        connection.execute(
            update(budgets).where(budgets.c.budget == e.budget).values(weight=e.weight)
        )
        return
    row = connection.execute(
        select(budgets.c.pool_weights).where(budgets.c.budget == e.budget)
    ).first()
    if row is not None:
        connection.execute(
            update(budgets)
            .where(budgets.c.budget == e.budget)
            .values(pool_weights={**row[0], e.pool: e.weight})
        )


def _budget_closed(connection: Connection, e: BudgetClosed, at: int, _id: str) -> None:
    connection.execute(update(budgets).where(budgets.c.budget == e.budget).values(closed_at=at))


def _period_closed(connection: Connection, e: PeriodClosed, at: int, event_id: str) -> None:
    """A seal and its cut (the first seal of a period stays: charging never seals twice)."""
    connection.execute(
        _insert(connection, closed_periods)
        .values(
            period=e.period,
            start=int(e.start.timestamp()),
            end=int(e.end.timestamp()),
            as_of=[{"partition": p.partition, "offset": p.offset} for p in e.as_of],
            digest=e.digest,
            event_id=event_id,
            event_time=at,
        )
        .on_conflict_do_nothing(index_elements=["period"])
    )


def _ledger_position(partition: int, offset: int) -> dict[str, int]:
    """Where a charge lies on the ledger (billing places it in its sealed period by it)."""
    return {"ledger_partition": partition, "ledger_offset": offset}


def _price_set(connection: Connection, e: PriceSet, at: int, event_id: str) -> None:
    """A price, kept as the price book keeps it: the first one for a pool, subtree and instant
    stays (a redelivery, or a raced second price, changes nothing), and one in another currency
    than the prices already kept is skipped (one billing currency)."""
    kept = connection.execute(select(prices.c.currency).limit(1)).scalar()
    if kept is not None and kept != e.currency:
        return
    connection.execute(
        _insert(connection, prices)
        .values(
            pool=e.pool,
            budget=e.budget or "",
            effective_at=int(e.effective_at.timestamp()),
            currency=e.currency,
            per_gpu_hour=e.per_gpu_hour,
            set_by=e.set_by,
            reason=e.reason,
            event_id=event_id,
            event_time=at,
        )
        .on_conflict_do_nothing(index_elements=["pool", "budget", "effective_at"])
    )


def _decision(kind: str) -> Callable[[Connection, Any, int, str], None]:
    def effect(connection: Connection, e: Any, at: int, _id: str) -> None:
        connection.execute(
            _insert(connection, decision_records)
            .values(
                command_id=e.command_id,
                kind=kind,
                workload_id=e.workload_id,
                attempt=e.attempt,
                pass_id=e.decision.pass_id,
                reason=e.decision.reason,
                preemptor=e.decision.preemptor,
                record=e.decision.model_dump(mode="json"),
                event_time=at,
            )
            .on_conflict_do_nothing(index_elements=["command_id"])
        )

    return effect


#: The effect of each fact other than a charge or a workload fact (:data:`workload_fold.FOLDED`).
_EFFECTS: dict[type[EventData], Effect] = {
    WorkloadArraySubmitted: _array_submitted,
    NodeRegistered: _node_registered,
    NodeCordoned: _node_state("cordoned"),
    NodeUncordoned: _node_state("up"),
    NodeDrained: _node_state("drained"),
    NodeDown: _node_state("down"),
    NodeUp: _node_state("up"),
    BudgetCreated: _budget_created,
    BudgetWeightChanged: _weight_changed,
    BudgetClosed: _budget_closed,
    PriceSet: _price_set,
    PeriodClosed: _period_closed,
    PlaceCommand: _decision("place"),
    PreemptCommand: _decision("preempt"),
}
