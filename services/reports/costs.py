"""What a billing period cost, from the SQL read models: the inputs of
:func:`projections.costs.cost_lines` read in one consistent snapshot, and the lines.

- **Which charges a period bills**: those its ledger period holds (``projections.periods.
  hour_held``, the rule charging seals by): the charges for its hours before its seal's cut
  (all of them while it is open), and the late charges for hours of closed periods that lie
  between the previous seal's cut and its own, as corrections. Charges projected before the
  read models kept ledger offsets count as lying before every cut.
- **Capacity and entitlements per hour**: :func:`projections.figures.pool_figures`, the
  computation every figure of the reports and the dashboard comes from.
- **Work lost to preemption**: each preempted run (not a cancellation) with what it ran, its
  GPUs, whether it resumes and its spec's ``checkpoint_every_s`` (:func:`projections.costs.
  lost_gpu_s`).
- **Prices**: the ``prices`` table as a price book.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from sqlalchemy import Connection, Engine, and_, or_, select

from events.models.ledger import signed_seconds
from events.times import HOUR
from projections.costs import (
    Capacity,
    Charged,
    CostLine,
    IdleMethod,
    cost_lines,
    lost_gpu_s,
)
from projections.figures import Bins, PoolHistory, pool_figures
from projections.periods import hour_held
from projections.price_book import PriceBook
from projections.statements import Forecast, Statement, forecast, in_subtree, statement
from services.read_models.tables import (
    closed_periods,
    decision_records,
    ledger_entries,
    nodes,
    runs,
    workload_checkpoints,
    workloads,
)
from services.reports.prices import read_price_book
from services.reports.source import Snapshot, load_on
from services.reports.tree import build_tree


@dataclass
class Costs:
    """A billing period's cost lines and what the surfaces show beside them."""

    start: int
    end: int
    #: The latest event time the read models hold; nothing after it is billed yet.
    horizon: int | None
    log_position: str
    lines: list[CostLine]
    book: PriceBook
    #: workload -> who submitted it.
    submitters: dict[str, str] = field(default_factory=dict)
    #: pool -> the cluster it runs on.
    clusters: dict[str, str] = field(default_factory=dict)
    #: Whether the period is sealed (its lines can no longer change).
    sealed: bool = False
    #: (pool, hour) -> capacity and entitlements, as idle was allocated by.
    entitled: dict[tuple[str, int], Capacity] = field(default_factory=dict)


def period_costs(engine: Engine, start: int, end: int, idle_method: IdleMethod = "share") -> Costs:
    """The cost lines of the billing period ``[start, end)`` (on the hour)."""
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            snapshot = load_on(connection, "hour", start, end)
            cuts = _cuts(connection, start, end)
            charged = _charged(connection, start, end, *cuts)
            book = read_price_book(connection)
            lost = _lost(connection, start, end)
            capacity = _capacity(snapshot, start, end)
            lines = cost_lines(charged, book, lost=lost, capacity=capacity, idle_method=idle_method)
            ids = sorted({line.workload_id for line in lines if line.workload_id})
            return Costs(
                start=start,
                end=end,
                horizon=snapshot.horizon,
                log_position=snapshot.log_position,
                lines=lines,
                book=book,
                submitters=_submitters(connection, ids),
                clusters=_clusters(connection),
                sealed=cuts[1] is not None,
                entitled=capacity,
            )


Cut = dict[int, int]


def _cuts(connection: Connection, start: int, end: int) -> tuple[Cut | None, Cut | None]:
    """(the previous seal's cut, this period's cut): the seals ending at ``start`` and at
    ``end``, per ledger partition; None where no seal ends there."""
    found: dict[int, Cut] = {}
    query = select(closed_periods.c.end, closed_periods.c.as_of).where(
        closed_periods.c.end.in_([start, end])
    )
    for at, as_of in connection.execute(query):
        found[int(at)] = {int(p["partition"]): int(p["offset"]) for p in as_of}
    return found.get(start), found.get(end)


def _charged(
    connection: Connection, start: int, end: int, previous: Cut | None, cut: Cut | None
) -> list[Charged]:
    entries = ledger_entries.c
    late = (
        and_(entries.bucket_start < start, entries.ledger_offset.is_not(None))
        if previous is not None
        else None
    )
    own = and_(entries.bucket_start >= start, entries.bucket_start < end)
    query = select(
        entries.workload_id,
        entries.attempt,
        entries.budget,
        entries.pool,
        entries.bucket_start,
        entries.kind,
        entries.debit_account,
        entries.gpu_seconds,
        entries.ledger_partition,
        entries.ledger_offset,
        entries.charge_id,
    ).where(own if late is None else or_(own, late))
    charged = []
    for row in connection.execute(query.order_by(entries.charge_id)):
        hour = int(row.bucket_start)
        partition, offset = row.ledger_partition, row.ledger_offset
        before_cut = cut is None or offset is None or offset < cut.get(int(partition), 0)
        after_previous = (
            previous is not None
            and offset is not None
            and offset >= previous.get(int(partition), 0)
        )
        if not hour_held(hour, start, end, before_cut, after_previous):
            continue
        charged.append(
            Charged(
                workload_id=str(row.workload_id),
                attempt=int(row.attempt or 0),
                budget=str(row.budget),
                pool=str(row.pool),
                hour=hour,
                allocated=row.kind == "allocated",
                gpu_s=signed_seconds(int(row.gpu_seconds), str(row.debit_account)),
                correction=hour < start,
            )
        )
    return charged


def _lost(connection: Connection, start: int, end: int) -> dict[tuple[str, int], int]:
    """GPU-seconds each run preempted in the period lost (cancellations are not losses)."""
    records = decision_records.c
    preempted = select(records.workload_id, records.attempt).where(
        records.kind == "preempt",
        records.reason != "cancel",
        records.event_time >= start,
        records.event_time < end,
    )
    found = {(str(w), int(a)) for w, a in connection.execute(preempted)}
    ids = sorted({w for w, _ in found})
    kinds: dict[str, tuple[bool, int | None]] = {}
    charged: dict[tuple[str, int], int] = {}
    ran: dict[tuple[str, int], tuple[int, int]] = {}
    for chunk in _chunks(ids):
        how = (
            select(
                workloads.c.workload_id,
                workloads.c.resumable,
                workload_checkpoints.c.checkpoint_every_s,
            )
            .select_from(
                workloads.outerjoin(
                    workload_checkpoints,
                    workload_checkpoints.c.workload_id == workloads.c.workload_id,
                )
            )
            .where(workloads.c.workload_id.in_(chunk))
        )
        for row in connection.execute(how):
            every = row.checkpoint_every_s
            kinds[str(row.workload_id)] = (
                bool(row.resumable),
                None if every is None else int(every),
            )
        entries = ledger_entries.c
        paid = select(
            entries.workload_id, entries.attempt, entries.gpu_seconds, entries.debit_account
        ).where(entries.workload_id.in_(chunk))
        for entry in connection.execute(paid):
            key = (str(entry.workload_id), int(entry.attempt or 0))
            seconds = signed_seconds(int(entry.gpu_seconds), str(entry.debit_account))
            charged[key] = charged.get(key, 0) + seconds
        ended = select(
            runs.c.workload_id, runs.c.attempt, runs.c.gpus, runs.c.started_at, runs.c.ended_at
        ).where(runs.c.workload_id.in_(chunk), runs.c.ended_at.is_not(None))
        for run in connection.execute(ended):
            span = max(0, int(run.ended_at) - int(run.started_at))
            ran[(str(run.workload_id), int(run.attempt))] = (int(run.gpus), span)
    lost: dict[tuple[str, int], int] = {}
    for key in sorted(found & set(ran)):
        gpus, seconds = ran[key]
        resumable, every = kinds.get(key[0], (True, None))
        lost[key] = lost_gpu_s(charged.get(key, 0), gpus, seconds, resumable, every)
    return lost


def _chunks(values: list[str], size: int = 500) -> Iterator[list[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def _capacity(snapshot: Snapshot, start: int, end: int) -> dict[tuple[str, int], Capacity]:
    """Each pool's GPU-seconds and each leaf's entitlement, hour by hour, up to the horizon."""
    stop = min(end, snapshot.horizon if snapshot.horizon is not None else start)
    if stop <= start:
        return {}
    hours = list(range(start, stop, HOUR))
    bins = Bins((*(float(h) for h in hours), float(min(stop, hours[-1] + HOUR))), float(stop))
    tree = build_tree(snapshot.budgets, snapshot.weights)
    leaves = tree.leaves()
    capacity: dict[tuple[str, int], Capacity] = {}
    for pool in snapshot.pools():
        figures = pool_figures(snapshot.histories.get(pool, PoolHistory(pool)), tree, bins, leaves)
        for i, hour in enumerate(hours):
            gpu_s = round(figures.capacity[i])
            if gpu_s <= 0:
                continue
            entitled = {
                leaf: series.entitled[i]
                for leaf, series in figures.budgets.items()
                if leaf in tree.nodes and tree.nodes[leaf].is_leaf and series.entitled[i] > 0
            }
            capacity[(pool, hour)] = Capacity(gpu_s, entitled)
    return capacity


def _submitters(connection: Connection, ids: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for chunk in _chunks(ids):
        query = select(workloads.c.workload_id, workloads.c.submitter).where(
            workloads.c.workload_id.in_(chunk)
        )
        found.update({str(w): str(s) for w, s in connection.execute(query)})
    return found


def _clusters(connection: Connection) -> dict[str, str]:
    found: dict[str, set[str]] = {}
    for pool, cluster in connection.execute(select(nodes.c.pool, nodes.c.cluster)):
        found.setdefault(str(pool), set()).add(str(cluster))
    return {pool: ",".join(sorted(names)) for pool, names in found.items()}


@dataclass
class BudgetMoney:
    """What a surface shows of a budget's money in a month: its statement (period to date)
    and its forecast to the month's end, one computation for the dashboard, the API, the
    CLI and the reports."""

    statement: Statement
    forecast: Forecast
    sealed: bool
    log_position: str


def budget_money(
    engine: Engine, budget: str, start: int, end: int, idle_method: IdleMethod = "share"
) -> BudgetMoney:
    """``budget``'s subtree ("" for everything) in the billing month ``[start, end)``."""
    return budgets_money(engine, [budget], start, end, idle_method)[budget]


def budgets_money(
    engine: Engine, budgets: list[str], start: int, end: int, idle_method: IdleMethod = "share"
) -> dict[str, BudgetMoney]:
    """:func:`budget_money` of each of ``budgets``, the month read once for all of them."""
    costs = period_costs(engine, start, end, idle_method)
    currency = costs.book.currency or ""
    as_of = min(end, costs.horizon if costs.horizon is not None else start)
    return {
        budget: BudgetMoney(
            statement=statement(costs.lines, budget, start, end, currency),
            forecast=forecast(
                costs.lines, budget, as_of, end, _entitled_cost_per_hour(costs, budget), currency
            ),
            sealed=costs.sealed,
            log_position=costs.log_position,
        )
        for budget in budgets
    }


def _entitled_cost_per_hour(costs: Costs, budget: str) -> Fraction:
    """What ``budget``'s entitlement in its last hour costs at its effective rates: the rate
    its share of the capacity would bill for each hour left."""
    last = max((hour for _, hour in costs.entitled), default=None)
    if last is None:
        return Fraction(0)
    total = Fraction(0)
    for (pool, hour), capacity in costs.entitled.items():
        if hour != last:
            continue
        for leaf, gpu_s in capacity.entitled.items():
            if not in_subtree(leaf, budget):
                continue
            price = costs.book.effective_price(pool, leaf, hour)
            if price is not None:
                total += Fraction(gpu_s) * Fraction(price.per_gpu_hour) / HOUR
    return total
