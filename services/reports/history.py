"""One pool's history over a range, from the read models, read by the range alone: charges of
its hours, the demand intervals and node states that overlap it, and the runs whose charges do
not reach their end yet. So a read does not grow with the history before the range.

A reader whose bins are cut on hours (``/budgets``, the reports, the timeline's hourly and
longer bins) asks for ``summed`` hours: then every whole hour in which no share and no
capacity changes comes summed from what the projector keeps (:mod:`services.reports.
summed_hours`), and only the others (the partial hour at the end, an hour with a weight change
or a node going down) are read charge by charge and interval by interval. The read then costs
the range's hours, not what a fleet ran in them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import Connection, and_, case, func, literal, select

from events.models.ledger import signed_seconds
from events.times import HOUR
from projections.figures import Charge, OpenRun, OpenSum, PoolHistory, in_capacity
from projections.steps import Steps
from services.read_models.tables import demand_intervals, ledger_entries, node_states, runs
from services.reports.summed_hours import exact_hours, partial_hour, summed_spans


def pool_histories(
    connection: Connection,
    lo: float,
    at: float,
    *,
    summed: bool = False,
    share_changes: Sequence[float] = (),
    bounds: Sequence[float] | None = None,
) -> dict[str, PoolHistory]:
    """Every pool's history over ``[lo, at)``. ``summed`` (``lo`` on an hour, and bins cut on
    hours): whole hours summed where no share (``share_changes``: when any changes) and no
    capacity changes, over each bin (``bounds``; None: hour by hour)."""
    if summed and int(lo) == lo and int(lo) % HOUR == 0:
        return _summed(connection, int(lo), at, share_changes, bounds)
    histories: dict[str, PoolHistory] = {}

    def of(pool: str) -> PoolHistory:
        found = histories.get(pool)
        if found is None:
            found = histories[pool] = PoolHistory(pool)
        return found

    for pool, steps in _capacity(connection, lo, at).items():
        of(pool).capacity = steps
    for (pool, budget), steps in _demand(connection, lo, at).items():
        of(pool).demand[budget] = steps
    for pool, charge in _charges(connection, lo, at):
        of(pool).charges.append(charge)
    for pool, run in _open_runs(connection, at):
        of(pool).open_runs.append(run)
    return histories


def _capacity(connection: Connection, lo: float, at: float) -> dict[str, Steps]:
    """GPUs in capacity (:func:`projections.figures.in_capacity`) per pool: each node's state
    at ``lo`` (its latest change before), then its changes up to ``at``."""
    latest = (
        select(node_states.c.node, func.max(node_states.c.effective_at).label("at"))
        .where(node_states.c.effective_at <= lo)
        .group_by(node_states.c.node)
        .subquery()
    )
    before = select(node_states).join(
        latest,
        and_(node_states.c.node == latest.c.node, node_states.c.effective_at == latest.c.at),
    )
    during = select(node_states).where(
        node_states.c.effective_at > lo, node_states.c.effective_at < at
    )
    rows = [*connection.execute(before), *connection.execute(during)]
    rows.sort(key=lambda r: (int(r.effective_at), str(r.node), str(r.event_id)))
    where: dict[str, tuple[str, int]] = {}
    steps: dict[str, Steps] = defaultdict(Steps)
    for row in rows:
        moment = float(max(int(row.effective_at), int(lo)))
        old = where.get(row.node)
        if old is not None:
            steps[old[0]].change(moment, -old[1])
        gpus = int(row.gpus) if in_capacity(str(row.state)) else 0
        where[row.node] = (str(row.pool), gpus)
        steps[str(row.pool)].change(moment, gpus)
    return dict(steps)


def _demand(
    connection: Connection, lo: float, at: float, *, clip: bool = False
) -> dict[tuple[str, str], Steps]:
    """Each leaf's demand per pool from ``lo`` on; ``clip``: and back to nothing at ``at``
    (a range read apart from the summed hours around it)."""
    # Two queries, each on an index: an OR with IS NULL would read every interval ever.
    still = select(demand_intervals).where(
        demand_intervals.c.end_at.is_(None), demand_intervals.c.start_at < at
    )
    ended = select(demand_intervals).where(
        demand_intervals.c.end_at > lo, demand_intervals.c.start_at < at
    )
    rows = [*connection.execute(still), *connection.execute(ended)]
    changes: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        key = (str(row.pool), str(row.budget))
        start = float(max(int(row.start_at), int(lo)))
        changes[key].append((start, float(row.gpus)))
        if row.end_at is not None and row.end_at < at:
            changes[key].append((float(row.end_at), -float(row.gpus)))
        elif clip:
            changes[key].append((float(at), -float(row.gpus)))
    return {key: Steps.of_changes(found) for key, found in changes.items()}


def _charges(connection: Connection, lo: float, at: float) -> list[tuple[str, Charge]]:
    """Charges of the hours that overlap ``[lo, at)``, each placed where its run was."""
    query = (
        select(
            ledger_entries.c.pool,
            ledger_entries.c.budget,
            ledger_entries.c.kind,
            ledger_entries.c.bucket_start,
            ledger_entries.c.debit_account,
            ledger_entries.c.gpu_seconds,
            runs.c.started_at,
            runs.c.ended_at,
        )
        .select_from(
            ledger_entries.outerjoin(
                runs,
                and_(
                    runs.c.workload_id == ledger_entries.c.workload_id,
                    runs.c.attempt == ledger_entries.c.attempt,
                ),
            )
        )
        .where(
            ledger_entries.c.bucket_start >= int(lo) // HOUR * HOUR,
            ledger_entries.c.bucket_start < at,
        )
        .order_by(ledger_entries.c.charge_id)
    )
    found = []
    for row in connection.execute(query):
        seconds = signed_seconds(int(row.gpu_seconds), str(row.debit_account))
        charge = Charge(
            leaf=str(row.budget),
            allocated=row.kind == "allocated",
            bucket_start=int(row.bucket_start),
            gpu_s=float(seconds),
            ran_from=None if row.started_at is None else float(row.started_at),
            ran_to=None if row.ended_at is None else float(row.ended_at),
        )
        found.append((str(row.pool), charge))
    return found


def _open_runs(connection: Connection, at: float) -> list[tuple[str, OpenRun]]:
    """Runs whose charges do not reach their end (or that still run)."""
    query = (
        select(runs)
        .where(runs.c.settled.is_(False), runs.c.started_at < at)
        .order_by(runs.c.workload_id, runs.c.attempt)
    )
    found = []
    for row in connection.execute(query):
        run = OpenRun(
            leaf=str(row.budget),
            allocated=bool(row.allocated),
            gpus=int(row.gpus),
            started_at=float(row.started_at),
            charged_until=float(row.started_at if row.charged_until is None else row.charged_until),
            ended_at=None if row.ended_at is None else float(row.ended_at),
        )
        found.append((str(row.pool), run))
    return found


def _summed(
    connection: Connection,
    lo: int,
    at: float,
    share_changes: Sequence[float],
    bounds: Sequence[float] | None,
) -> dict[str, PoolHistory]:
    capacity = _capacity(connection, lo, at)

    def changes_of(pool: str) -> list[float]:
        """When a share or the pool's capacity changes in the range."""
        return [*share_changes, *capacity.get(pool, Steps()).cuts(lo, at)]

    one_bin = bounds is not None and len(bounds) == 2
    hour = int(at) // HOUR * HOUR
    partial = None
    if one_bin and lo <= hour < at:
        # A read of one bin (/budgets) sums the hour in progress too, where nothing changes
        # inside it: otherwise it is read change by change, as every hour with a change is.
        def steady(pool: str) -> bool:
            return not any(hour < c < at for c in changes_of(pool))

        partial = partial_hour(connection, hour, at, steady)
    summed_now = set() if partial is None else {hour}
    exact: dict[str, set[int]] = {}

    def exact_of(pool: str) -> set[int]:
        found = exact.get(pool)
        if found is None:
            found = exact[pool] = exact_hours(lo, at, changes_of(pool)) - summed_now
        return found

    histories: dict[str, PoolHistory] = {}

    def of(pool: str) -> PoolHistory:
        found = histories.get(pool)
        if found is None:
            found = histories[pool] = PoolHistory(pool, capacity=capacity.get(pool, Steps()))
        return found

    for pool in capacity:
        of(pool)
    for pool, spans in (partial or {}).items():
        of(pool).settled.extend(spans)
    # Every pool's partial hour (unless it came summed) and share-change hours, whatever it
    # holds; and its own.
    every = (exact_hours(lo, at, share_changes) - summed_now).union(
        *(exact_of(p) for p in histories)
    )
    cuts = None
    if bounds is not None:
        changes = [c for steps in capacity.values() for c in steps.cuts(lo, at)]
        cuts = [*bounds, *share_changes, *changes, *every, *(h + HOUR for h in every)]
    for pool, spans in summed_spans(connection, lo, at, exact_of, cuts).items():
        of(pool).settled.extend(spans)
    ranges = _ranges(every, at)
    for a, b in ranges:
        for (pool, budget), steps in _demand(connection, a, b, clip=True).items():
            if a // HOUR * HOUR in exact_of(pool):
                _add_steps(of(pool).demand.setdefault(budget, Steps()), steps)
        for pool, charge in _charges(connection, a, b):
            if charge.bucket_start in exact_of(pool):
                of(pool).charges.append(charge)
    if one_bin:
        for pool, summed in _open_run_sums(connection, lo, at):
            of(pool).open_sums.append(summed)
    else:
        for pool, run in _open_runs(connection, at):
            of(pool).open_runs.append(run)
    return histories


def _open_run_sums(connection: Connection, lo: float, at: float) -> list[tuple[str, OpenSum]]:
    """What :func:`_open_runs` gives, summed by the database per pool, leaf and kind over the
    one bin ``[lo, at)``: each run's GPUs times the seconds from where its charges stop (or
    ``lo``) to its end (or ``at``), as :func:`projections.figures.pool_figures` counts an
    open run in one bin. A fleet's thousands of running workloads are then a few rows."""
    run = runs.c
    charged = func.coalesce(run.charged_until, run.started_at)
    uncharged_from = case((charged > run.started_at, charged), else_=run.started_at)
    since = case((uncharged_from > lo, uncharged_from), else_=literal(lo))
    ends_first = and_(run.ended_at.is_not(None), run.ended_at < at)
    until = case((ends_first, run.ended_at), else_=literal(at))
    seconds = case((until > since, until - since), else_=literal(0.0))
    query = (
        select(run.pool, run.budget, run.allocated, func.sum(run.gpus * seconds))
        .where(run.settled.is_(False), run.started_at < at)
        .group_by(run.pool, run.budget, run.allocated)
        .order_by(run.pool, run.budget, run.allocated)
    )
    return [
        (str(pool), OpenSum(str(budget), bool(allocated), float(gpu_s or 0.0)))
        for pool, budget, allocated, gpu_s in connection.execute(query)
    ]


def _ranges(hours: set[int], at: float) -> list[tuple[float, float]]:
    """The hours, one range each (up to ``at``)."""
    return [(float(h), min(float(h + HOUR), at)) for h in sorted(hours)]


def _add_steps(into: Steps, more: Steps) -> None:
    level = 0.0
    for moment, after in more.points:
        into.change(moment, after - level)
        level = after
