"""The reports as pure functions of a read-model :class:`~services.reports.source.Snapshot`.

* :func:`charges`: per budget x pool x bucket, charged (allocated) and free (unallocated)
  GPU-seconds, entitlement, demand, owed, delivered/owed, workloads and preemptions, with
  subtotals up the tree; corrections on their own rows.
* :func:`utilisation`: per pool x bucket, like Slurm's ``sreport cluster utilization``.
* :func:`users`: per budget x submitter x pool x bucket.

Everything underneath is integer GPU-seconds (or exact fractions); subtotals are sums of the
rows beneath them, so they add up exactly. Rows come in a fixed order and carry the horizon and
the log position, never the wall clock, so the same log position yields the same report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from events.times import HOUR
from projections.budget_tree import ROOT, BudgetTree, parent_of
from projections.figures import Bins, PoolHistory, pool_figures
from services.reports import buckets, times
from services.reports.buckets import Bucket
from services.reports.charged import Usage
from services.reports.model import Column, Report, Value
from services.reports.source import Snapshot
from services.reports.tree import build_tree as tree_of
from services.reports.tree import open_during

REPORTS = ("charges", "utilisation", "users")

#: The bucket a row covers. The columns keep their names from when a bucket was called a
#: period: the readers of the reports know them by those.
_BUCKET_COLUMNS = (
    Column("period", "str", "the bucket: hour, day, week (from Monday) or month"),
    Column("period_start", "str", "the bucket's start, UTC, inclusive"),
    Column("period_end", "str", "the bucket's end, UTC, exclusive"),
)
_POSITION_COLUMNS = (
    Column("as_of", "str", "the latest event time in the read models (the report's 'now')"),
    Column("log_position", "str", "topic/partition@next_offset the projector had read to"),
)

CHARGES_COLUMNS = (
    *_BUCKET_COLUMNS,
    Column("pool", "str"),
    Column("budget", "str", "the budget's path; '*' for the pool's total"),
    Column("parent", "str"),
    Column("ancestors", "str", "from the top-level budget down, '|'-separated"),
    Column("depth", "int", "0 for top-level budgets, -1 for the total"),
    Column("leaf", "bool"),
    Column("line", "str", "charges | correction (leaves), subtotal (inner budgets), total"),
    Column("share", "ratio", "share of the pool at the bucket's start (or at creation)"),
    Column("allocated", "gpu_s", "charged to the budget (corrections included in subtotals)"),
    Column("unallocated", "gpu_s", "free burst occupancy, not charged"),
    Column("entitlement", "gpu_s", "share x capacity x the bucket (up to as_of)"),
    Column("demand", "gpu_s", "GPU-seconds of pending and running allocated work"),
    Column("owed", "gpu_s", "entitlement capped at demand, moment by moment"),
    Column(
        "delivered",
        "gpu_s",
        "allocated (with corrections) plus running work's use not charged yet, up to as_of",
    ),
    Column("delivered_over_owed", "ratio", "delivered / owed"),
    Column("workloads", "int", "workloads with entries on this line"),
    Column("preemptions", "int", "preemptions suffered (not counting cancellations)"),
    *_POSITION_COLUMNS,
)

UTILISATION_COLUMNS = (
    *_BUCKET_COLUMNS,
    Column("pool", "str", "'*' for the whole cluster"),
    Column("gpus", "int", "GPUs of the pool's registered nodes"),
    Column("capacity", "gpu_s", "gpus x the bucket (up to as_of)"),
    Column("allocated", "gpu_s"),
    Column("unallocated", "gpu_s"),
    Column("down", "gpu_s", "GPUs of down nodes"),
    Column("cordoned", "gpu_s", "GPUs of cordoned or drained nodes, not in use"),
    Column(
        "idle", "gpu_s", "the rest: capacity = allocated + unallocated + down + cordoned + idle"
    ),
    Column("occupancy", "ratio", "(allocated + unallocated) / capacity"),
    *_POSITION_COLUMNS,
)

USERS_COLUMNS = (
    *_BUCKET_COLUMNS,
    Column("pool", "str"),
    Column("budget", "str"),
    Column("submitter", "str", "'*' on the budget's subtotal"),
    Column("line", "str", "charges | correction | subtotal"),
    Column("allocated", "gpu_s"),
    Column("unallocated", "gpu_s"),
    Column("workloads", "int"),
    Column("preemptions", "int"),
    *_POSITION_COLUMNS,
)

TOTAL = "*"


# -- shared pieces ------------------------------------------------------------------------------
def report_range(
    snap: Snapshot, bucket: Bucket, start: int | None, end: int | None
) -> tuple[int, int] | None:
    """``[start, end)`` on bucket boundaries; by default from the first ledger bucket or
    submission to the horizon. None when the read models are empty."""
    if start is None:
        if snap.first is None:
            return None
        start = snap.first
    if end is None:
        if snap.horizon is None:
            return None
        end = max(snap.horizon, start + 1)
    buckets.check_span(start, end, bucket)
    lo = buckets.floor(start, bucket)
    hi = buckets.ceil(end, bucket)
    return (lo, hi) if lo < hi else None


def _covered(snap: Snapshot, start: int, end: int) -> tuple[int, int]:
    """The part of ``[start, end)`` the log has reached (up to the horizon)."""
    limit = snap.horizon if snap.horizon is not None else start
    return start, max(start, min(end, limit))


def _bucket_values(bucket: Bucket, start: int, end: int) -> dict[str, Value]:
    return {"period": bucket, "period_start": times.iso(start), "period_end": times.iso(end)}


def _position_values(snap: Snapshot) -> dict[str, Value]:
    return {
        "as_of": None if snap.horizon is None else times.iso(snap.horizon),
        "log_position": snap.log_position,
    }


def _ratio(numerator: int, denominator: int) -> Fraction | None:
    return None if denominator <= 0 else Fraction(numerator, denominator)


def _in_subtree(budget: str, root: str | None) -> bool:
    return root is None or budget == root or budget.startswith(root + "/")


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def build_tree(snap: Snapshot) -> BudgetTree:
    """The budget tree of the read models (:func:`services.reports.tree.build_tree`)."""
    return tree_of(snap.budgets, snap.weights)


def _preemptions(snap: Snapshot, key: BucketKey) -> dict[tuple[int, str, str, str], int]:
    """(bucket start, pool, budget, submitter) -> preemptions suffered."""
    counts: dict[tuple[int, str, str, str], int] = defaultdict(int)
    for p in snap.preemptions:
        counts[(key(p.event_time), p.pool, p.budget, p.submitter)] += 1
    return counts


@dataclass
class _Line:
    """Charged and free GPU-seconds and the workloads with entries (each workload has one
    submitter, so the counts of a line's submitters add up to its own)."""

    allocated: int = 0
    unallocated: int = 0
    workloads: int = 0

    def add(self, usage: Usage) -> None:
        self.allocated += usage.allocated
        self.unallocated += usage.unallocated
        self.workloads += usage.workloads


# -- charges ------------------------------------------------------------------------------------
@dataclass
class _Figures:
    """One leaf budget in one pool and bucket."""

    charges: _Line = field(default_factory=_Line)
    corrections: _Line = field(default_factory=_Line)
    entitlement: int = 0
    demand: int = 0
    owed: int = 0
    #: Running work's use not charged yet (up to as_of): delivered = allocated + this.
    uncharged: int = 0
    preemptions: int = 0

    def sums(self) -> dict[str, int]:
        """What the leaf adds to its ancestors' subtotals (corrections included)."""
        return {
            "allocated": self.charges.allocated + self.corrections.allocated,
            "unallocated": self.charges.unallocated + self.corrections.unallocated,
            "entitlement": self.entitlement,
            "demand": self.demand,
            "owed": self.owed,
            "uncharged": self.uncharged,
            "workloads": self.charges.workloads,
            "preemptions": self.preemptions,
        }


#: (bucket start, pool, leaf budget) -> its figures (created on first use).
_FigureMap = defaultdict[tuple[int, str, str], _Figures]


def charges(
    snap: Snapshot,
    bucket: Bucket,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
    budget: str | None = None,
) -> Report:
    """The charges report (see the module's docstring and docs/reports.md)."""
    report = Report("charges", bucket, None, None, snap.horizon, snap.log_position, CHARGES_COLUMNS)
    bounds = report_range(snap, bucket, start, end)
    if bounds is None:
        return report
    report.start, report.end = bounds
    tree = build_tree(snap)
    pools = [p for p in snap.pools() if pool is None or p == pool]
    key = _bucket_key(bucket)
    figures = _charged(snap, key)
    _entitled_and_owed(figures, snap, tree, pools, key, *_covered(snap, *bounds))
    position = _position_values(snap)
    for bucket_start, bucket_end in buckets.tiles(*bounds, bucket):
        head = _bucket_values(bucket, bucket_start, bucket_end)
        for pool_ in pools:
            block = _Block.of(figures, tree, pool_, budget, bucket_start, bucket_end)
            report.rows.extend({**head, **row, **position} for row in block.rows())
    return report


#: The start of the bucket an instant falls in (reports: :func:`buckets.floor`; one range:
#: its start).
BucketKey = Callable[[int], int]


def _bucket_key(bucket: Bucket) -> BucketKey:
    return lambda at: buckets.floor(at, bucket)


def _charged(snap: Snapshot, key: BucketKey) -> _FigureMap:
    """The ledger's charges and corrections, and the preemptions, per leaf and bucket."""
    figures: _FigureMap = defaultdict(_Figures)
    for usage in snap.usage:
        at = (key(usage.bucket_start), usage.pool, usage.budget)
        (figures[at].corrections if usage.correction else figures[at].charges).add(usage)
    for (at_, pool, leaf, _user), count in _preemptions(snap, key).items():
        figures[(at_, pool, leaf)].preemptions += count
    return figures


def _entitled_and_owed(
    figures: _FigureMap,
    snap: Snapshot,
    tree: BudgetTree,
    pools: list[str],
    key: BucketKey,
    lo: int,
    hi: int,
) -> None:
    """Entitlement, demand, owed and what is not charged yet of every leaf in every pool over
    ``[lo, hi)``, per bucket (:func:`projections.figures.pool_figures`, the one computation
    every surface asks), rounded once per leaf-bucket."""
    if hi <= lo:
        return
    starts = sorted({key(h) for h in range(lo // HOUR * HOUR, hi, HOUR)} | {key(lo)})
    bounds = (*(float(max(lo, a)) for a in starts), float(hi))
    bins = Bins(bounds, float(hi))
    leaves = tree.leaves()
    for pool in pools:
        history = snap.histories.get(pool, PoolHistory(pool))
        pool_ = pool_figures(history, tree, bins, leaves)
        for leaf, series in pool_.budgets.items():
            if leaf in tree.nodes and not tree.nodes[leaf].is_leaf:
                continue  # an inner budget: the report sums its leaves itself
            for i, at in enumerate(starts):
                if not (series.entitled[i] or series.demand[i] or series.uncharged[i]):
                    continue
                f = figures[(at, pool, leaf)]
                f.entitlement = round(series.entitled[i])
                f.demand = round(series.demand[i])
                f.owed = min(round(series.owed[i]), f.entitlement, f.demand)
                f.uncharged = round(series.uncharged[i])


@dataclass
class _Block:
    """The rows of one pool in one bucket: the tree depth first, each inner budget's subtotal
    before its children, each leaf's charges then its corrections, the pool's total last."""

    figures: _FigureMap
    tree: BudgetTree
    pool: str
    at: int
    #: Inner budget (and ROOT) -> its children that lead to a leaf shown.
    children: dict[str, set[str]]

    @classmethod
    def of(
        cls,
        figures: _FigureMap,
        tree: BudgetTree,
        pool: str,
        root: str | None,
        start: int,
        end: int,
    ) -> _Block:
        """The leaves with figures in the bucket or open during it, within ``root``'s
        subtree."""
        leaves = {b for (a, p, b) in figures if a == start and p == pool}
        for path, node in tree.nodes.items():
            if path != ROOT and node.is_leaf and open_during(tree, path, start, end):
                leaves.add(path)
        children: dict[str, set[str]] = defaultdict(set)
        for leaf in leaves:
            if _in_subtree(leaf, root):
                chain = _ancestors(leaf)
                for parent, child in zip([ROOT, *chain], chain, strict=False):
                    children[parent].add(child)
        return cls(figures, tree, pool, start, children)

    def rows(self) -> list[dict[str, Value]]:
        if not self.children:
            return []
        rows: list[dict[str, Value]] = []
        for top in sorted(self.children[ROOT]):
            self._walk(top, rows)
        rows.append(self._summary(TOTAL, "total"))
        return rows

    def _walk(self, path: str, rows: list[dict[str, Value]]) -> None:
        if path in self.children:
            rows.append(self._summary(path, "subtotal"))
            for child in sorted(self.children[path]):
                self._walk(child, rows)
        else:
            rows.extend(self._leaf(path))

    def _figures(self, path: str) -> _Figures:
        found = self.figures.get((self.at, self.pool, path))
        return found if found is not None else _Figures()

    def _totals(self, path: str) -> dict[str, int]:
        if path not in self.children:
            return self._figures(path).sums()
        sums: dict[str, int] = defaultdict(int)
        for child in self.children[path]:
            for k, v in self._totals(child).items():
                sums[k] += v
        return sums

    def _share(self, path: str) -> float | None:
        """The share at the bucket's start, or at the budget's creation if that is later."""
        if path in (TOTAL, ROOT):
            return 1.0
        node = self.tree.nodes.get(path)
        if node is None or not node.weights:
            return None
        return self.tree.shares(self.pool, max(float(self.at), node.weights[0][0])).get(path)

    def _base(self, path: str, line: str, leaf: bool) -> dict[str, Value]:
        chain = _ancestors(path) if path != TOTAL else []
        share = self._share(path)
        return {
            "pool": self.pool,
            "budget": path,
            "parent": None if path == TOTAL else parent_of(path) or None,
            "ancestors": "|".join(chain[:-1]),
            "depth": -1 if path == TOTAL else path.count("/"),
            "leaf": leaf,
            "line": line,
            "share": None if share is None else Fraction(share),
        }

    def _summary(self, path: str, line: str) -> dict[str, Value]:
        t = self._totals(ROOT if path == TOTAL else path)
        return {
            **self._base(path, line, False),
            **{k: t[k] for k in ("allocated", "unallocated", "entitlement", "demand", "owed")},
            "delivered": t["allocated"] + t["uncharged"],
            "delivered_over_owed": _ratio(t["allocated"] + t["uncharged"], t["owed"]),
            "workloads": t["workloads"],
            "preemptions": t["preemptions"],
        }

    def _leaf(self, path: str) -> list[dict[str, Value]]:
        f = self._figures(path)
        rows: list[dict[str, Value]] = [
            {
                **self._base(path, "charges", True),
                "allocated": f.charges.allocated,
                "unallocated": f.charges.unallocated,
                "entitlement": f.entitlement,
                "demand": f.demand,
                "owed": f.owed,
                "delivered": f.charges.allocated + f.corrections.allocated + f.uncharged,
                "delivered_over_owed": _ratio(
                    f.charges.allocated + f.corrections.allocated + f.uncharged, f.owed
                ),
                "workloads": f.charges.workloads,
                "preemptions": f.preemptions,
            }
        ]
        if f.corrections.workloads:
            rows.append(
                {
                    **self._base(path, "correction", True),
                    "allocated": f.corrections.allocated,
                    "unallocated": f.corrections.unallocated,
                    "entitlement": None,
                    "demand": None,
                    "owed": None,
                    "delivered": None,
                    "delivered_over_owed": None,
                    "workloads": f.corrections.workloads,
                    "preemptions": None,
                }
            )
        return rows


# -- utilisation --------------------------------------------------------------------------------
def utilisation(
    snap: Snapshot,
    bucket: Bucket,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
) -> Report:
    """Per pool and bucket: capacity split into allocated, unallocated, down, cordoned
    (or drained) and idle GPU-seconds that add up to the capacity exactly."""
    report = Report(
        "utilisation", bucket, None, None, snap.horizon, snap.log_position, UTILISATION_COLUMNS
    )
    bounds = report_range(snap, bucket, start, end)
    if bounds is None:
        return report
    report.start, report.end = bounds
    pools = [p for p in snap.pools() if pool is None or p == pool]
    used: dict[tuple[int, str], _Line] = defaultdict(_Line)
    for usage in snap.usage:
        used[(usage.bucket_start, usage.pool)].add(usage)
    position = _position_values(snap)
    for bucket_start, bucket_end in buckets.tiles(*bounds, bucket):
        lo, hi = _covered(snap, bucket_start, bucket_end)
        cluster: dict[str, int] = defaultdict(int)
        for pool_ in pools:
            gpus = snap.capacity_at(pool_, max(lo, hi - 1))
            capacity = down = cordoned = 0
            for a, b, node_gpus, state in snap.node_segments(pool_, lo, hi):
                capacity += node_gpus * (b - a)
                if state == "down":
                    down += node_gpus * (b - a)
                elif state in ("cordoned", "drained"):
                    cordoned += node_gpus * (b - a)
            line = used.get((bucket_start, pool_), _Line())
            busy = line.allocated + line.unallocated
            down = max(0, min(down, capacity - busy))
            cordoned = max(0, min(cordoned, capacity - busy - down))
            figures = {
                "gpus": gpus,
                "capacity": capacity,
                "allocated": line.allocated,
                "unallocated": line.unallocated,
                "down": down,
                "cordoned": cordoned,
                "idle": max(0, capacity - busy - down - cordoned),
            }
            for k, v in figures.items():
                cluster[k] += v
            report.rows.append(
                _utilisation_row(bucket, bucket_start, bucket_end, pool_, figures, position)
            )
        if len(pools) > 1:
            report.rows.append(
                _utilisation_row(bucket, bucket_start, bucket_end, TOTAL, cluster, position)
            )
    return report


def _utilisation_row(
    bucket: Bucket,
    start: int,
    end: int,
    pool: str,
    figures: dict[str, int],
    position: dict[str, Value],
) -> dict[str, Value]:
    return {
        **_bucket_values(bucket, start, end),
        "pool": pool,
        **figures,
        "occupancy": _ratio(figures["allocated"] + figures["unallocated"], figures["capacity"]),
        **position,
    }


# -- users --------------------------------------------------------------------------------------
def users(
    snap: Snapshot,
    bucket: Bucket,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
    budget: str | None = None,
) -> Report:
    """Per leaf budget (within ``budget``'s subtree), submitter, pool and bucket: charged and
    free GPU-seconds, corrections on their own rows, and a subtotal per budget."""
    report = Report("users", bucket, None, None, snap.horizon, snap.log_position, USERS_COLUMNS)
    bounds = report_range(snap, bucket, start, end)
    if bounds is None:
        return report
    report.start, report.end = bounds
    lines: dict[tuple[int, str, str, str], tuple[_Line, _Line]] = {}
    for usage in snap.usage:
        if (pool is not None and usage.pool != pool) or not _in_subtree(usage.budget, budget):
            continue
        key = (usage.bucket_start, usage.pool, usage.budget, usage.submitter)
        pair = lines.setdefault(key, (_Line(), _Line()))
        pair[1 if usage.correction else 0].add(usage)
    preempted = {
        k: v
        for k, v in _preemptions(snap, _bucket_key(bucket)).items()
        if (pool is None or k[1] == pool) and _in_subtree(k[2], budget)
    }
    for key in preempted:
        lines.setdefault(key, (_Line(), _Line()))
    position = _position_values(snap)
    by_block: dict[tuple[int, str, str], list[str]] = defaultdict(list)
    for at, pool_, leaf, user in lines:
        by_block[(at, pool_, leaf)].append(user)
    for bucket_start, bucket_end in buckets.tiles(*bounds, bucket):
        head = _bucket_values(bucket, bucket_start, bucket_end)
        for at, pool_, leaf in sorted(k for k in by_block if k[0] == bucket_start):
            subtotal = {"allocated": 0, "unallocated": 0, "workloads": 0, "preemptions": 0}
            rows: list[dict[str, Value]] = []
            for user in sorted(by_block[(at, pool_, leaf)]):
                charged, corrected = lines[(at, pool_, leaf, user)]
                count = preempted.get((at, pool_, leaf, user), 0)
                values = {
                    "allocated": charged.allocated,
                    "unallocated": charged.unallocated,
                    "workloads": charged.workloads,
                    "preemptions": count,
                }
                rows.append({"submitter": user, "line": "charges", **values})
                if corrected.workloads:
                    rows.append(
                        {
                            "submitter": user,
                            "line": "correction",
                            "allocated": corrected.allocated,
                            "unallocated": corrected.unallocated,
                            "workloads": corrected.workloads,
                            "preemptions": None,
                        }
                    )
                    values["allocated"] += corrected.allocated
                    values["unallocated"] += corrected.unallocated
                for k in subtotal:
                    subtotal[k] += values[k]
            rows.append({"submitter": TOTAL, "line": "subtotal", **subtotal})
            for row in rows:
                report.rows.append({**head, "pool": pool_, "budget": leaf, **row, **position})
    return report
