"""The read models' rules for workload facts, applied in memory to the rows the facts touch.

Applied one at a time against the database, a workload fact cost a dozen statements (its row
read before and after, its run, the row itself, its demand intervals read, closed and opened),
each built and compiled by SQLAlchemy: a rebuild read the workloads topic at about 800
facts/s. Here a run of consecutive workload facts changes, in log order, the rows it touches
as read once (:class:`Stored`, read by :mod:`services.projector.workload_tables` in a few
queries), and what changed (:class:`Writes`) is written a table at a time. The rows after are
those the facts applied one per transaction leave (tests/integration/test_workload_batches.py).

The rules, as the tables keep them:

- a submission creates its workload's row (a second one changes nothing), notes how often it
  checkpoints, and applies the facts of that workload read before it, in the order read;
- a fact of a workload not projected yet waits for it (``early_facts``, once per event id);
- a status change applies only to the attempt it names and from the statuses it may follow, so
  a duplicated or late fact cannot move a workload back;
- a start opens its run, charged as far as the charges already read reach (a rebuild reads the
  ledger first); an end (finished, preempted, lost) closes it and settles it when its charges
  reach its end;
- after each fact, where what the workload wants changed (:func:`wanted`), its open demand
  intervals close and the new ones open at the fact's time, with the demand changes the
  leaf's histograms fold (:mod:`services.read_models.demand_upkeep`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from events.models import (
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
)
from projections.figures import wanted_gpus

if TYPE_CHECKING:
    from services.read_models.demand_upkeep import Change

#: A run: (workload id, attempt).
RunKey = tuple[str, int]
#: A demand interval: (workload id, seq).
IntervalKey = tuple[str, int]

#: Statuses of a workload holding GPUs (placed, or running).
ACTIVE = ("placed", "running")
#: Statuses of a workload stopped under it, awaiting its requeue.
STOPPED = ("preempted", "lost")

#: Facts about a workload that change its row: they need the row (and wait for it).
WORKLOAD_FACTS = (
    WorkloadPlaced,
    WorkloadStarted,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadLost,
    WorkloadRequeued,
    WorkloadCancelled,
)
#: Every fact this fold applies.
FOLDED = (WorkloadSubmitted, *WORKLOAD_FACTS)
WorkloadFact = (
    WorkloadSubmitted
    | WorkloadPlaced
    | WorkloadStarted
    | WorkloadFinished
    | WorkloadPreempted
    | WorkloadLost
    | WorkloadRequeued
    | WorkloadCancelled
)


class Fact(NamedTuple):
    """A fact as the projector applies it: its data, its time (epoch seconds), its event id."""

    data: WorkloadFact
    at: int
    event_id: str


@dataclass(frozen=True)
class Workload:
    """A ``workloads`` row: the columns a submission writes (an array's element is written
    by :mod:`services.projector.arrays`, with its array's id and index)."""

    workload_id: str
    budget: str
    pools: tuple[str, ...]
    gpus: int
    gang: str
    min_runtime_s: int
    resumable: bool
    priority: int
    submitter: str
    status: str
    attempt: int
    submitted_at: int
    started_at: int | None
    ended_at: int | None
    preemptions: int
    pool: str | None
    cancel_requested: bool


@dataclass(frozen=True)
class Run:
    """A ``runs`` row."""

    workload_id: str
    attempt: int
    pool: str
    budget: str
    allocated: bool
    gpus: int
    started_at: int
    ended_at: int | None
    charged_until: int | None
    settled: bool


@dataclass(frozen=True)
class Interval:
    """A ``demand_intervals`` row."""

    workload_id: str
    seq: int
    pool: str
    budget: str
    gpus: int
    start_at: int
    end_at: int | None


@dataclass(frozen=True)
class Stored:
    """What the tables hold of the workloads a run of facts names, read before it."""

    workloads: Mapping[str, Workload]
    runs: Mapping[RunKey, Run]
    #: Each workload's demand intervals, open or closed (their last seq is the next one's base).
    intervals: Sequence[Interval]
    #: The facts waiting for those of them not projected yet, in the order read.
    early_facts: Sequence[Fact] = ()
    #: Event ids among the run's facts already waiting in ``early_facts``.
    kept: frozenset[str] = frozenset()
    #: How far the charges already on the ledger reach for each run (the end of its latest
    #: hour charged, corrections apart): a rebuild reads the ledger before the workloads, and
    #: a run started after its charges were read starts charged as far as they reach.
    charged: Mapping[RunKey, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Writes:
    """What a run of facts changed, a table at a time."""

    created: list[Workload]
    changed: list[Workload]
    started: list[Run]
    ended: list[Run]
    opened: list[Interval]
    #: Stored intervals closed: (workload id, seq) -> end.
    closed: dict[IntervalKey, int]
    demand: list[Change]
    #: Workloads first submitted here, and their submitters (their charges move to them).
    submitted: dict[str, str]
    #: How often each workload submitted here checkpoints (the first submission's word stays).
    checkpoints: dict[str, int]
    #: Facts now waiting for their workload, in the order read.
    held: list[Fact]
    #: Workloads whose stored early facts were applied (and are deleted).
    released: set[str]


def wanted(row: Workload | None, registered: Callable[[str], int]) -> dict[str, int]:
    """The demand rule (:func:`projections.figures.wanted_gpus`) on a workloads row, each
    pool's registered GPUs from ``registered``."""
    if row is None:
        return {}
    return wanted_gpus(
        allocated=row.min_runtime_s > 0,
        status=row.status,
        gpus=row.gpus,
        pools=row.pools,
        pool=row.pool,
        awaiting_requeue=row.status in STOPPED and row.resumable and not row.cancel_requested,
        registered=registered,
    )


def checkpoint_every_s(spec: Mapping[str, Any]) -> int | None:
    """The spec's ``checkpoint_every_s`` when it is a positive whole number of seconds."""
    every = spec.get("checkpoint_every_s")
    if isinstance(every, bool) or not isinstance(every, int | float) or every < 1:
        return None
    return min(int(every), 2**31 - 1)


@dataclass
class WorkloadFold:
    """The rows of :class:`Stored` as the facts applied so far leave them."""

    stored: Stored
    #: GPUs of every node ever registered in a pool (the demand rule's bound).
    registered: Callable[[str], int]
    workloads: dict[str, Workload] = field(init=False)
    runs: dict[RunKey, Run] = field(init=False)
    intervals: dict[IntervalKey, Interval] = field(init=False)
    _open: dict[str, list[IntervalKey]] = field(init=False, default_factory=dict)
    _last_seq: dict[str, int] = field(init=False, default_factory=dict)
    _early: dict[str, list[Fact]] = field(init=False, default_factory=dict)
    _stored_early: set[str] = field(init=False, default_factory=set)
    _kept: set[str] = field(init=False)
    _held: list[Fact] = field(init=False, default_factory=list)
    _released: set[str] = field(init=False, default_factory=set)
    _demand: list[Change] = field(init=False, default_factory=list)
    _submitted: dict[str, str] = field(init=False, default_factory=dict)
    _checkpoints: dict[str, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.workloads = dict(self.stored.workloads)
        self.runs = dict(self.stored.runs)
        self.intervals = {}
        for interval in sorted(self.stored.intervals, key=lambda i: (i.workload_id, i.seq)):
            key = (interval.workload_id, interval.seq)
            self.intervals[key] = interval
            self._last_seq[interval.workload_id] = interval.seq
            if interval.end_at is None:
                self._open.setdefault(interval.workload_id, []).append(key)
        for fact in self.stored.early_facts:
            self._early.setdefault(workload_of(fact), []).append(fact)
            self._stored_early.add(workload_of(fact))
        self._kept = set(self.stored.kept)

    def apply(self, fact: Fact) -> None:
        """One fact's effect on the rows (a fact of a workload not projected yet waits)."""
        if not isinstance(fact.data, WorkloadSubmitted) and workload_of(fact) not in self.workloads:
            self._hold(fact)
            return
        workload_id = workload_of(fact)
        before = wanted(self.workloads.get(workload_id), self.registered)
        self._change(fact)
        self.restate(
            workload_id, before, wanted(self.workloads[workload_id], self.registered), fact.at
        )
        if isinstance(fact.data, WorkloadSubmitted):
            for early in self._release(workload_id):
                self.apply(early)

    def restate(
        self, workload_id: str, before: Mapping[str, int], after: Mapping[str, int], at: int
    ) -> None:
        """Where what the workload wants changed from ``before`` to ``after``: its open demand
        intervals closed and ``after``'s opened at ``at``, with the demand changes."""
        if before == after:
            return
        for key in self._open.pop(workload_id, []):
            closing = self.intervals[key]
            self.intervals[key] = replace(closing, end_at=at)
            self._demand.append((closing.pool, closing.budget, -closing.gpus, at))
        budget = self.workloads[workload_id].budget
        seq = self._last_seq.get(workload_id, 0)
        opened: list[IntervalKey] = []
        for pool, gpus in sorted(after.items()):
            seq += 1
            self.intervals[(workload_id, seq)] = Interval(
                workload_id, seq, pool, budget, gpus, start_at=at, end_at=None
            )
            opened.append((workload_id, seq))
            self._demand.append((pool, budget, gpus, at))
        self._last_seq[workload_id] = seq
        self._open[workload_id] = opened

    def writes(self) -> Writes:
        """What changed since :class:`Stored`: only rows that differ are written back."""
        stored = self.stored
        stored_intervals = {(i.workload_id, i.seq): i for i in stored.intervals}
        return Writes(
            created=[w for k, w in self.workloads.items() if k not in stored.workloads],
            changed=[
                w
                for k, w in self.workloads.items()
                if k in stored.workloads and w != stored.workloads[k]
            ],
            started=[r for k, r in self.runs.items() if k not in stored.runs],
            ended=[r for k, r in self.runs.items() if k in stored.runs and r != stored.runs[k]],
            opened=[i for k, i in self.intervals.items() if k not in stored_intervals],
            closed={
                k: i.end_at
                for k, i in self.intervals.items()
                if k in stored_intervals and i != stored_intervals[k] and i.end_at is not None
            },
            demand=list(self._demand),
            submitted=dict(self._submitted),
            checkpoints=dict(self._checkpoints),
            held=list(self._held),
            released=set(self._released),
        )

    # -- the facts ---------------------------------------------------------------------------

    def _change(self, fact: Fact) -> None:
        e, at = fact.data, fact.at
        if isinstance(e, WorkloadSubmitted):
            self._submitted_fact(e, at)
        elif isinstance(e, WorkloadPlaced):
            self._transition(e, ("pending",), status="placed", pool=e.pool)
        elif isinstance(e, WorkloadStarted):
            self._start_run(e, at)
            self._transition(
                e,
                ("pending", "placed"),
                status="running",
                started_at=at,
                pool=e.pool,
            )
        elif isinstance(e, WorkloadFinished):
            self._end_run(e.workload_id, e.attempt, at)
            self._transition(e, ACTIVE, status=e.outcome, ended_at=at)
        elif isinstance(e, WorkloadPreempted):
            self._end_run(e.workload_id, e.attempt, at)
            row = self.workloads[e.workload_id]
            self._transition(
                e,
                ACTIVE,
                status="preempted",
                ended_at=at,
                preemptions=row.preemptions + 1,
            )
        elif isinstance(e, WorkloadLost):
            end = int(e.last_heartbeat.timestamp())
            self._end_run(e.workload_id, e.attempt, end)
            self._transition(e, ACTIVE, status="lost", ended_at=end)
        elif isinstance(e, WorkloadRequeued):
            self._transition(
                e,
                STOPPED,
                status="pending",
                attempt=e.attempt + 1,
                started_at=None,
                ended_at=None,
                pool=None,
            )
        elif isinstance(e, WorkloadCancelled):
            self._cancelled(e.workload_id, at)

    def _submitted_fact(self, e: WorkloadSubmitted, at: int) -> None:
        if e.workload_id not in self.workloads:
            self.workloads[e.workload_id] = Workload(
                workload_id=e.workload_id,
                budget=e.budget,
                pools=tuple(e.pools),
                gpus=e.gpus,
                gang=e.gang,
                min_runtime_s=e.min_runtime_s,
                resumable=e.resumable,
                priority=e.priority,
                submitter=e.submitter,
                status="pending",
                attempt=1,
                submitted_at=at,
                started_at=None,
                ended_at=None,
                preemptions=0,
                pool=None,
                cancel_requested=False,
            )
            self._submitted[e.workload_id] = e.submitter  # charges read ahead of it move
        every = checkpoint_every_s(e.spec)
        if every is not None:
            self._checkpoints.setdefault(e.workload_id, every)

    def _transition(
        self,
        e: WorkloadPlaced
        | WorkloadStarted
        | WorkloadFinished
        | WorkloadPreempted
        | WorkloadLost
        | WorkloadRequeued,
        allowed_from: Iterable[str],
        **values: Any,
    ) -> None:
        """A change of the attempt the fact names, taken only from ``allowed_from``: a
        duplicated or late fact (a start read again after the end) cannot move it back."""
        row = self.workloads[e.workload_id]
        if row.attempt == e.attempt and row.status in allowed_from:
            self.workloads[e.workload_id] = replace(row, **values)

    def _cancelled(self, workload_id: str, at: int) -> None:
        """Waiting work ends here (it will not be requeued); running work ends when its
        preemption is reported."""
        row = self.workloads[workload_id]
        if row.status in ("pending", *STOPPED):
            ended_at = at if row.ended_at is None else row.ended_at
            self.workloads[workload_id] = replace(row, status="cancelled", ended_at=ended_at)
        elif row.status in ACTIVE:
            self.workloads[workload_id] = replace(row, cancel_requested=True)

    def _start_run(self, e: WorkloadStarted, at: int) -> None:
        row = self.workloads[e.workload_id]
        key = (e.workload_id, e.attempt)
        if row.attempt != e.attempt or key in self.runs:
            return
        self.runs[key] = Run(
            workload_id=e.workload_id,
            attempt=e.attempt,
            pool=e.pool,
            budget=row.budget,
            allocated=e.allocated,
            gpus=row.gpus,
            started_at=at,
            ended_at=None,
            charged_until=self.stored.charged.get(key),
            settled=False,
        )

    def _end_run(self, workload_id: str, attempt: int, end: int) -> None:
        run = self.runs.get((workload_id, attempt))
        if run is None:
            return
        if run.ended_at is None:
            run = replace(run, ended_at=end)
        self.runs[(workload_id, attempt)] = replace(run, settled=run.settled or settles(run))

    # -- facts read before their workload ---------------------------------------------------

    def _hold(self, fact: Fact) -> None:
        if fact.event_id in self._kept:
            return
        self._kept.add(fact.event_id)
        self._held.append(fact)
        self._early.setdefault(workload_of(fact), []).append(fact)

    def _release(self, workload_id: str) -> list[Fact]:
        """The facts waiting for ``workload_id``, in the order read, no longer waiting."""
        waiting = self._early.pop(workload_id, [])
        if workload_id in self._stored_early:
            self._stored_early.discard(workload_id)
            self._released.add(workload_id)
        self._held = [f for f in self._held if workload_of(f) != workload_id]
        self._kept.difference_update(f.event_id for f in waiting)
        return waiting


def settles(run: Run) -> bool:
    """Whether an ended run is settled: its charges reach its end (or it never ran)."""
    if run.ended_at is None:
        return False
    charged_to_end = run.charged_until is not None and run.charged_until >= run.ended_at
    return charged_to_end or run.ended_at <= run.started_at


def workload_of(fact: Fact) -> str:
    """The workload a fact names."""
    return fact.data.workload_id
