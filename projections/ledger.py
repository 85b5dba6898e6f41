"""The double-entry ledger as a fold: integer GPU-seconds per workload run per hour bucket.

Charges follow confirmed occupancy. A run is opened by its start; heartbeats that name it as a
GPU's occupant confirm it ran up to their time; its end (finished or preempted) confirms it up
to the end; a lost run is confirmed only up to its last heartbeat. An hour bucket is posted
once occupancy is confirmed at or after the bucket's end (or the run ended inside it). Every
charge's id is derived from (workload, attempt, bucket, revision): a redelivered or duplicated
event can only re-derive an id already posted, which the fold ignores. If a later fact changes
a posted bucket (a lost run whose last heartbeat is earlier than a heartbeat that confirmed the
hour), the difference is appended as a correction (next revision), never by editing the old
entry. So what each run-hour nets depends only on the facts, but how it is split into
revisions depends on the order they are read in: the specification fixes one
(``events.fact_order``, docs/spec/log-v1.md 8.9), which the audit sorts into and live charging
merges its partitions by.

Times are whole seconds (event times are floored), so a run's charges add up exactly to
``gpus x (end - start)``.

**What the fold remembers, and for how long.** A run it holds knows every charge it derived
(its revisions per bucket), so it never derives an id twice; the ids it must be told are only
those of charges already on the ledger topic that it has not derived itself (``recorded``: read
back after a restart, or another shard's), and each leaves that set once derived. A run that
has ended leaves the fold when its service calls :meth:`Ledger.prune` with a horizon past its
end (charging: the usage window behind every workloads partition's progress, see
``projections.charging_state``); the workload keeps only the last attempt that left
(``settled``). Any later fact about such a run is a no-op, exactly as for a run still held: a
duplicate start (its attempt is settled), a heartbeat (never past an end), an end no earlier
than the recorded one. The one fact that would still have changed it, an end *earlier* than the
recorded one (a correction), is ignored once the run has left: a run's charges are final a
horizon after its end. The audit replays without pruning, so such a fact, arriving a whole
window late in its own partition, would show as a difference, never silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache

from events.envelope import derived_event_id
from events.models import (
    EventData,
    GpuHeartbeat,
    LedgerCharge,
    WorkloadArraySubmitted,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.arrays import elements
from events.models.ledger import (
    budget_account,
    capacity_account,
    charge_id,
    free_account,
    parse_charge_id,
)
from events.prevalidated import prevalidated
from events.times import HOUR

RunKey = tuple[str, int]  # (workload, attempt)
#: Every fact the fold reads (:meth:`Ledger.apply` ignores the rest): what an audit must sort
#: into the canonical order (``events.fact_order``) before folding.
LEDGER_INPUTS = (
    WorkloadSubmitted,
    WorkloadArraySubmitted,
    WorkloadStarted,
    GpuHeartbeat,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadLost,
)
#: Facts about one run of a workload (held while its submission is unread).
RunFact = WorkloadStarted | WorkloadFinished | WorkloadPreempted | WorkloadLost
_RUN_FACTS = (WorkloadStarted, WorkloadFinished, WorkloadPreempted, WorkloadLost)


@lru_cache(maxsize=4096)
def _hour_start(bucket: int) -> datetime:
    return datetime.fromtimestamp(bucket * HOUR, UTC)


@dataclass(slots=True)
class Run:
    workload_id: str
    attempt: int
    budget: str
    pool: str
    gpus: int
    allocated: bool
    start: int
    confirmed: int
    end: int | None = None
    #: First bucket not yet considered for posting (buckets before it are settled).
    next_bucket: int = 0
    #: bucket -> GPU-seconds posted so far (all revisions), and the last revision number.
    posted: dict[int, int] = field(default_factory=dict)
    revisions: dict[int, int] = field(default_factory=dict)
    #: The accounts a positive charge moves GPU-seconds between (reversed for a negative one).
    debit: str = ""
    credit: str = ""
    kind: str = "allocated"

    def __post_init__(self) -> None:
        self.debit = budget_account(self.budget) if self.allocated else free_account(self.pool)
        self.credit = capacity_account(self.pool)
        self.kind = "allocated" if self.allocated else "unallocated"

    def amount_in(self, bucket: int, until: int) -> int:
        lo = max(self.start, bucket * HOUR)
        hi = min(until, (bucket + 1) * HOUR)
        return max(0, hi - lo) * self.gpus


class Ledger:
    """Folds workload and heartbeat events into ``entries`` (append-only LedgerCharge list)."""

    def __init__(
        self, keep_entries: bool = True, owns: Callable[[str], bool] | None = None
    ) -> None:
        """``owns``: whether a workload is this fold's to charge (default: every one). A
        charging shard reads only its own workloads' facts but every node's heartbeats; a
        heartbeat confirms only the runs of the workloads it owns, so the others' runs are
        not kept waiting for a start this shard will never read."""
        #: Whether ``entries`` keeps every posted charge (an audit that streams them to a
        #: matcher does not need a second copy of the ledger in memory).
        self.keep_entries = keep_entries
        self.owns = owns
        self.budgets: dict[str, str] = {}
        self.runs: dict[RunKey, Run] = {}
        #: Confirmations seen before the run's start (heartbeats and starts travel on
        #: different topics, so a projector may read them in either order).
        self.early: dict[RunKey, int] = {}
        #: Run facts of workloads whose submission (which names the budget) is not read yet,
        #: in order: possible only after a broker lost the submission's write. Held, they are
        #: charged to the right budget once it arrives, never to an empty one.
        self.held: dict[str, list[tuple[EventData, float]]] = {}
        self.entries: list[LedgerCharge] = []
        #: Ids of charges read from the log (:meth:`record`) that this fold has not derived
        #: itself: each is skipped, not posted, when derived, and then forgotten.
        self.recorded: set[str] = set()
        #: Per workload, the highest attempt whose run left the fold (:meth:`prune`).
        self.settled: dict[str, int] = {}
        #: Charges this fold derived and posted (not those it found recorded).
        self.posted = 0

    def __getstate__(self) -> dict[str, object]:
        """Checkpointed without ``owns`` (a function of the shard's partitions, not state):
        whoever restores the fold sets it again."""
        return {**self.__dict__, "owns": None}

    def apply(self, data: EventData, at: float) -> list[LedgerCharge]:
        """Fold one event in at ``at`` (epoch seconds, like every fold; charges are in whole
        seconds, so it is floored); returns the charges it posted (usually none)."""
        if isinstance(data, _RUN_FACTS) and self._waits_for_submission(data):
            self.held.setdefault(data.workload_id, []).append((data, at))
            return []
        now = int(at)
        if isinstance(data, WorkloadSubmitted):
            return self._submitted(data)
        if isinstance(data, WorkloadArraySubmitted):
            released: list[LedgerCharge] = []
            for _index, element in elements(data):
                if self.owns is None or self.owns(element.workload_id):
                    released += self._submitted(element)
            return released
        if isinstance(data, WorkloadStarted):
            return self._start(data, now)
        if isinstance(data, GpuHeartbeat):
            # One confirmation per run, however many of the node's GPUs it holds.
            runs = {
                (gpu.occupant, gpu.attempt)
                for gpu in data.gpus
                if gpu.occupant is not None and gpu.attempt is not None
            }
            if self.owns is not None:
                runs = {run for run in runs if self.owns(run[0])}
            if len(runs) == 1:  # the usual case: the whole node is one run
                return self._confirm(runs.pop(), now)
            posted: list[LedgerCharge] = []
            for run in sorted(runs):
                posted += self._confirm(run, now)
            return posted
        if isinstance(data, WorkloadFinished | WorkloadPreempted):
            return self._end((data.workload_id, data.attempt), now)
        if isinstance(data, WorkloadLost):
            return self._end((data.workload_id, data.attempt), int(data.last_heartbeat.timestamp()))
        return []

    def _submitted(self, data: WorkloadSubmitted) -> list[LedgerCharge]:
        """The budget a workload's runs are charged to; the facts held for it fold now."""
        self.budgets.setdefault(data.workload_id, data.budget)
        released: list[LedgerCharge] = []
        for early, early_at in self.held.pop(data.workload_id, []):
            released += self.apply(early, early_at)
        return released

    def _waits_for_submission(self, data: RunFact) -> bool:
        """A run fact waits while its workload's budget is unknown (its submission unread,
        and a start that does not name it); once one waits, the later facts of that workload
        wait behind it, to be folded in order."""
        return data.workload_id in self.held or (
            isinstance(data, WorkloadStarted)
            and data.workload_id not in self.budgets
            and data.budget is None
        )

    def _start(self, e: WorkloadStarted, now: int) -> list[LedgerCharge]:
        key = (e.workload_id, e.attempt)
        if key in self.runs or e.attempt <= self.settled.get(e.workload_id, 0):
            return []  # duplicate (of a run held, or of one that left the fold)
        budget = self.budgets.get(e.workload_id) or e.budget
        if budget is None:  # cannot be: _waits_for_submission held it
            raise ValueError(f"budget: no budget known for {e.workload_id}")
        run = Run(
            workload_id=e.workload_id,
            attempt=e.attempt,
            budget=budget,
            pool=e.pool,
            gpus=e.placement.gpu_count,
            allocated=e.allocated,
            start=now,
            confirmed=now,
        )
        self.runs[key] = run
        early = self.early.pop(key, None)
        return self._confirm(key, early) if early is not None else []

    def _confirm(self, key: RunKey, until: int) -> list[LedgerCharge]:
        run = self.runs.get(key)
        if run is None:
            if key[1] > self.settled.get(key[0], 0):  # not a run that left the fold
                self.early[key] = max(self.early.get(key, until), until)
            return []
        if run.end is not None:
            until = min(until, run.end)  # no charge after the end
        if until <= run.confirmed:
            return []
        run.confirmed = until
        # Post the buckets that are now closed: they end at or before the confirmation.
        return self._post(run, closed_before=until // HOUR)

    def _end(self, key: RunKey, end: int) -> list[LedgerCharge]:
        run = self.runs.get(key)
        if run is None:
            return []
        end = max(end, run.start)
        if run.end is not None and end >= run.end:
            return []  # a duplicate, or a later end of a run already ended
        run.end = end
        run.confirmed = end
        return self._post(run, closed_before=end // HOUR + 1, final=True)

    def _post(self, run: Run, closed_before: int, final: bool = False) -> list[LedgerCharge]:
        """Post the buckets that changed: the newly closed ones and, at the end, the last one
        and any posted later than the end (they are corrected)."""
        first = max(run.start // HOUR, run.next_bucket)
        buckets: Iterable[int] = range(first, closed_before)
        if final:
            end_bucket = closed_before - 1
            later = {b for b in run.posted if b >= end_bucket and not first <= b < closed_before}
            if later:
                buckets = sorted({*buckets, *later})
        run.next_bucket = max(run.next_bucket, closed_before)
        until = run.end if run.end is not None else run.confirmed
        posted: list[LedgerCharge] = []
        for bucket in buckets:
            amount = run.amount_in(bucket, until)
            already = run.posted.get(bucket)
            if (already is None and amount == 0) or already == amount:
                continue
            entry = self._entry(run, bucket, amount - (already or 0))
            if entry is not None:
                posted.append(entry)
        return posted

    def _entry(self, run: Run, bucket: int, delta: int) -> LedgerCharge | None:
        """The next revision of ``bucket``; None if that charge was already recorded (read back
        from the log after a restart): the state advances, nothing is posted twice."""
        revision = run.revisions.get(bucket, -1) + 1
        run.revisions[bucket] = revision
        run.posted[bucket] = run.posted.get(bucket, 0) + delta
        posting = charge_id(run.workload_id, run.attempt, bucket, revision)
        if posting in self.recorded:
            self.recorded.discard(posting)  # derived now: the revisions remember it
            return None
        debit, credit = (run.debit, run.credit) if delta > 0 else (run.credit, run.debit)
        seconds = abs(delta)
        # Built without re-validation from validated facts (events.prevalidated); the tests decode
        # every posted charge through the strict serde.
        entry = prevalidated(
            LedgerCharge,
            charge_id=posting,
            workload_id=run.workload_id,
            budget=run.budget,
            pool=run.pool,
            bucket_start=_hour_start(bucket),
            kind=run.kind,
            debit_account=debit,
            credit_account=credit,
            gpu_seconds=seconds,
            amount=seconds if run.allocated else 0,
            corrects=charge_id(run.workload_id, run.attempt, bucket, 0) if revision else None,
        )
        if self.keep_entries:
            self.entries.append(entry)
        self.posted += 1
        return entry

    def record(self, entry: LedgerCharge) -> bool:
        """Take a charge read back from the log (a restart, or another shard's); False if it
        was already known."""
        if self.knows(entry.charge_id):
            return False
        if self.keep_entries:
            self.entries.append(entry)
        self.recorded.add(entry.charge_id)
        return True

    def knows(self, posting: str) -> bool:
        """Whether the charge ``posting`` was derived here or recorded already."""
        parsed = parse_charge_id(posting)
        if parsed is not None:
            workload, attempt, hour_start, revision = parsed
            run = self.runs.get((workload, attempt))
            if run is not None and run.revisions.get(hour_start // HOUR, -1) >= revision:
                return True
            if run is None and attempt <= self.settled.get(workload, 0):
                return True
        return posting in self.recorded

    def prune(self, before: int, forget: Callable[[str], bool] | None = None) -> int:
        """Let runs that ended before ``before`` (epoch s) leave the fold (see the module
        docstring for why no later fact can then double-post); ``forget``: recorded ids no
        longer needed (another shard's charges of an hour the caller no longer counts).
        Returns how many runs left."""
        gone = [key for key, run in self.runs.items() if run.end is not None and run.end < before]
        for workload, attempt in gone:
            del self.runs[(workload, attempt)]
            if attempt > self.settled.get(workload, 0):
                self.settled[workload] = attempt
        if forget is not None:
            self.recorded -= {posting for posting in self.recorded if forget(posting)}
        return len(gone)

    # -- reading -------------------------------------------------------------------------
    def totals(self) -> dict[tuple[str, str, int], int]:
        return charge_totals(self.entries)

    def __iter__(self) -> Iterator[LedgerCharge]:
        return iter(self.entries)


def charge_totals(charges: Iterable[LedgerCharge]) -> dict[tuple[str, str, int], int]:
    """Signed GPU-seconds per (budget, pool, hour start epoch), corrections included."""
    totals: dict[tuple[str, str, int], int] = {}
    for entry in charges:
        key = (entry.budget, entry.pool, int(entry.bucket_start.timestamp()))
        totals[key] = totals.get(key, 0) + entry.signed_gpu_seconds
    return totals


def charge_event_id(entry: LedgerCharge) -> str:
    """The envelope id of a charge event: derived, so a re-posted charge has the same id."""
    return derived_event_id("ledger", entry.charge_id)
