"""Recompute every charge from the facts in a log and compare with the charges it records.

The facts (submissions, starts, heartbeats, ends) go through the same ledger fold the live
projector uses, in the canonical order of the specification (``events.fact_order``: event time,
topic, event id), whatever order the log holds them in: an export interleaves partitions as
its consumer fetched them, and two auditors reading one log in two orders must derive the same
entries with the same ids. The recorded charges are taken as they are. The audit passes only
when both lists are identical entry for entry; otherwise every difference is listed, with totals
per budget and hour so that a reader sees what the differences amount to.

Only what may be believed is replayed or compared (``services.audit.trust``): a start signed
by another cluster's agent is no start, a charge charging did not sign is no charge. Each
record not believed is a difference of its own, so a log with one forged fact never audits as
identical, even where the forgery would have changed no figure.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from events.envelope import Envelope
from events.fact_order import in_fact_order
from events.models import LedgerCharge
from events.ndjson import BadLine
from projections.ledger import LEDGER_INPUTS, Ledger, charge_totals
from projections.trust import Refusal
from services.audit.trust import AuditTrust, describe
from services.runtime.gc_pause import gc_paused


@dataclass
class ReplayResult:
    events: int = 0
    #: Charges recorded in the log (or stored in the read models) that were compared.
    recorded_count: int = 0
    recomputed_count: int = 0
    #: Every recomputed charge, when the replay was asked to keep them (to compare with SQL).
    recomputed: list[LedgerCharge] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    #: Records not believed (neither replayed nor compared), each named in ``differences``.
    not_believed: int = 0

    @property
    def identical(self) -> bool:
        return not self.differences and not self.bad_lines


def replay(
    log: Iterable[Envelope[Any] | BadLine],
    keep_recomputed: bool = False,
    trust: AuditTrust | None = None,
    log_order: bool = False,
) -> ReplayResult:
    """Reads the log once. The facts are held and folded once read, in the canonical order
    (``log_order``: as read, which is the canonical order only for a log sorted into it);
    recorded charges are matched as they come, and only what is still unmatched is held. The
    cyclic GC is paused: the log creates no cycles, and scanning the growing fold state on
    every allocation burst would dominate the replay. ``trust``: with the log's keys read
    first (default: learned as they come, right for a log in event-time order)."""
    with gc_paused():
        return _replay(log, keep_recomputed, trust or AuditTrust.of_log(log), log_order)


def _replay(
    log: Iterable[Envelope[Any] | BadLine],
    keep_recomputed: bool,
    trust: AuditTrust,
    log_order: bool,
) -> ReplayResult:
    return report(fold_log(log, keep_recomputed, trust, log_order), trust.refusals)


@dataclass
class Folded:
    """What one pass over a log (or over one process's share of it, ``services.audit.parallel``)
    leaves for the report: kept apart from the report so that the shares of a log can be
    merged first and then reported on as the whole log is."""

    events: int
    bad_lines: list[BadLine]
    matcher: ChargeMatcher
    recomputed: list[LedgerCharge]


def fold_log(
    log: Iterable[Envelope[Any] | BadLine],
    keep_recomputed: bool,
    trust: AuditTrust,
    log_order: bool,
) -> Folded:
    """The one pass of :func:`replay` (which see), the cyclic GC left as the caller has it."""
    events = 0
    bad_lines: list[BadLine] = []
    ledger = Ledger(keep_entries=keep_recomputed)
    matcher = ChargeMatcher()
    offer_recorded, offer_recomputed = matcher.offer_recorded, matcher.offer_recomputed
    believes = trust.believes
    facts: list[Envelope[Any]] = []
    for item in log:
        if isinstance(item, BadLine):
            bad_lines.append(item)
            continue
        events += 1
        if not believes(item):
            continue
        data = item.data
        if isinstance(data, LedgerCharge):
            offer_recorded(data)
        elif log_order:
            for charge in ledger.apply(data, item.epoch_seconds):
                offer_recomputed(charge)
        elif isinstance(data, LEDGER_INPUTS):
            facts.append(item)
    for fact in in_fact_order(facts):
        for charge in ledger.apply(fact.data, fact.epoch_seconds):
            offer_recomputed(charge)
    return Folded(events, bad_lines, matcher, ledger.entries)


def report(folded: Folded, refusals: list[Refusal]) -> ReplayResult:
    """The audit's result: the records not believed (in the order judged) come first among
    the differences, then the charges' (:meth:`ChargeMatcher.differences`)."""
    matcher = folded.matcher
    return ReplayResult(
        events=folded.events,
        recorded_count=matcher.recorded,
        recomputed_count=matcher.recomputed,
        recomputed=folded.recomputed,
        bad_lines=folded.bad_lines,
        differences=[describe(r) for r in refusals] + matcher.differences(),
        not_believed=len(refusals),
    )


def shuffled(log: Iterable[Envelope[Any] | BadLine], seed: int) -> list[Envelope[Any] | BadLine]:
    """``log`` in an order shuffled with ``seed``, as another reader interleaving partitions
    otherwise might read it; each workload's recorded charges stay in their order, as the one
    ledger partition that holds them keeps it (the matcher checks that order)."""
    read = list(log)
    items = list(read)
    random.Random(seed).shuffle(items)
    charges: dict[str, list[Envelope[Any]]] = {}
    for item in read:
        if isinstance(item, Envelope) and isinstance(item.data, LedgerCharge):
            charges.setdefault(item.data.workload_id, []).append(item)
    taken = {workload: iter(kept) for workload, kept in charges.items()}
    return [
        next(taken[item.data.workload_id])
        if isinstance(item, Envelope) and isinstance(item.data, LedgerCharge)
        else item
        for item in items
    ]


def compare(
    recorded: Iterable[LedgerCharge], recomputed: Iterable[LedgerCharge], check_order: bool = True
) -> list[str]:
    """Differences between two complete lists of charges (empty when identical)."""
    matcher = ChargeMatcher(check_order=check_order)
    for charge in recomputed:
        matcher.offer_recomputed(charge)
    for charge in recorded:
        matcher.offer_recorded(charge)
    return matcher.differences()


def _run_hour(charge: LedgerCharge) -> tuple[Any, ...]:
    """A run's hour as charged: the charges of its revisions add up per this key."""
    run = charge.charge_id.rsplit(":", 1)[0]  # charge:<workload>:<attempt>:<hour>
    return (run, charge.budget, charge.pool, charge.kind)


class ChargeMatcher:
    """Pairs recorded charges with recomputed ones by id as either side arrives, in one pass.

    A pair is compared when it completes and then forgotten; only unpaired charges and pairs
    that differ are held. Order within a workload is checked on the fly: if the two sides
    agree on the order, a workload's pairs complete in increasing order on both sides (a pair
    completes no later than any pair that comes after it on both sides), so each pair must
    come after the workload's previous pair on both sides; any disagreement breaks that for
    some consecutive pair.
    """

    def __init__(self, check_order: bool = True, net_revisions: bool = False) -> None:
        """``net_revisions``: unpaired charges whose revisions of one run's hour add up to
        the same on both sides are no difference (:meth:`_net_equal`)."""
        self._check_order = check_order
        self._net_revisions = net_revisions
        #: Unpaired charges reconciled by their net (``net_revisions``).
        self.reconciled = 0
        self.recorded = 0
        self.recomputed = 0
        #: Unpaired charges, with their sequence number on their own side.
        self._waiting_recorded: dict[str, tuple[int, LedgerCharge]] = {}
        self._waiting_recomputed: dict[str, tuple[int, LedgerCharge]] = {}
        #: Ids already paired (a recorded id seen again is a duplicate).
        self._paired: set[str] = set()
        self._duplicates: list[LedgerCharge] = []
        self._different: list[tuple[LedgerCharge, LedgerCharge]] = []
        #: workload -> (recorded seq, recomputed seq) of its last pair.
        self._last_pair: dict[str, tuple[int, int]] = {}
        self._out_of_order: set[str] = set()

    def offer_recorded(self, charge: LedgerCharge) -> None:
        self.recorded += 1
        charge_id = charge.charge_id
        twin = self._waiting_recomputed.pop(charge_id, None)
        if twin is not None:
            self._pair(charge, self.recorded, twin[1], twin[0])
        elif charge_id in self._paired or charge_id in self._waiting_recorded:
            self._duplicates.append(charge)
        else:
            self._waiting_recorded[charge_id] = (self.recorded, charge)

    def offer_recomputed(self, charge: LedgerCharge) -> None:
        self.recomputed += 1
        twin = self._waiting_recorded.pop(charge.charge_id, None)
        if twin is not None:
            self._pair(twin[1], twin[0], charge, self.recomputed)
        else:
            self._waiting_recomputed[charge.charge_id] = (self.recomputed, charge)

    def _pair(self, recorded: LedgerCharge, at: int, recomputed: LedgerCharge, seq: int) -> None:
        self._paired.add(recorded.charge_id)
        if not _equal(recorded, recomputed):
            self._different.append((recorded, recomputed))
        if self._check_order:
            workload = recorded.workload_id
            last = self._last_pair.get(workload)
            if last is not None and (at < last[0] or seq < last[1]):
                self._out_of_order.add(workload)
            self._last_pair[workload] = (at, seq)

    def forget_pairs(self) -> None:
        """After the last offer: drop what only pairing needs (the id of every pair, each
        workload's last pair), most of a clean audit's matcher; its differences stay the same.
        A process that audited a share of a log hands back only the rest (:meth:`merged`)."""
        self._paired = set()
        self._last_pair = {}

    @classmethod
    def merged(cls, parts: list[ChargeMatcher]) -> ChargeMatcher:
        """One matcher whose differences are those of a single matcher offered every charge
        the ``parts`` were offered, for parts that each met every charge of their own
        workloads (the shares of ``services.audit.parallel``). A charge id names its workload
        (``events.models.ledger.charge_id``) and each share checks that its recorded charges'
        ids name its own workloads, so no id is held by two parts; the order of a workload's
        pairs was checked by the one part that met them. Offer nothing to the result."""
        first = parts[0]
        merged = cls(check_order=first._check_order, net_revisions=first._net_revisions)
        for part in parts:
            merged.recorded += part.recorded
            merged.recomputed += part.recomputed
            merged.reconciled += part.reconciled
            merged._waiting_recorded.update(part._waiting_recorded)
            merged._waiting_recomputed.update(part._waiting_recomputed)
            merged._duplicates += part._duplicates
            merged._different += part._different
            merged._out_of_order |= part._out_of_order
        return merged

    def _net_equal(self) -> None:
        """Drop the unpaired charges of each run's hour whose signed GPU-seconds add up to the
        same on both sides. Revisions follow the order in which a fold read a run's facts
        across partitions (heartbeats on one, its end on another): a run's hour confirmed by
        heartbeats and then cut short by a late loss is posted and reversed (revisions 0
        and 1) by a reader that met them in that order, and never posted by one that met the
        loss first. Both leave the hour at the same GPU-seconds, which is what is charged; the
        seal covers the very revisions posted."""

        def nets(waiting: dict[str, tuple[int, LedgerCharge]]) -> dict[tuple[Any, ...], int]:
            out: dict[tuple[Any, ...], int] = {}
            for _, charge in waiting.values():
                key = _run_hour(charge)
                out[key] = out.get(key, 0) + charge.signed_gpu_seconds
            return out

        log, facts = nets(self._waiting_recorded), nets(self._waiting_recomputed)
        same = {key for key in log.keys() | facts.keys() if log.get(key, 0) == facts.get(key, 0)}
        for waiting in (self._waiting_recorded, self._waiting_recomputed):
            for charge_id in [i for i, (_, c) in waiting.items() if _run_hour(c) in same]:
                del waiting[charge_id]
                self.reconciled += 1

    def differences(self) -> list[str]:
        if self._net_revisions:
            self._net_equal()
        differences: list[str] = []
        if self._duplicates:
            differences.append("recorded: duplicate charge ids")
        missing = self._waiting_recomputed
        for charge_id in sorted(missing):
            gpu_seconds = missing[charge_id][1].gpu_seconds
            differences.append(f"missing in the log: {charge_id} ({gpu_seconds} GPU-s)")
        unsupported = self._waiting_recorded
        for charge_id in sorted(unsupported):
            gpu_seconds = unsupported[charge_id][1].gpu_seconds
            differences.append(f"not supported by the facts: {charge_id} ({gpu_seconds} GPU-s)")
        for a, b in sorted(self._different, key=lambda pair: pair[0].charge_id):
            fields = [
                f"{name}: log {getattr(a, name)!r} != facts {getattr(b, name)!r}"
                for name in type(a).model_fields
                if getattr(a, name) != getattr(b, name)
            ]
            differences.append(f"differs: {a.charge_id}: " + "; ".join(fields))
        if not differences:
            differences += [
                f"charges of {workload} are in another order"
                for workload in sorted(self._out_of_order)
            ]
        if differences:
            differences += self._total_differences()
        return differences

    def _total_differences(self) -> list[str]:
        """What the differences amount to per budget, pool and hour. Paired equal charges add
        the same to both sides, so the net difference of each total comes from the unpaired,
        duplicated and differing charges alone (which are all that the matcher holds)."""
        log = [
            *(c for _, c in self._waiting_recorded.values()),
            *self._duplicates,
            *(a for a, _ in self._different),
        ]
        facts = [
            *(c for _, c in self._waiting_recomputed.values()),
            *(b for _, b in self._different),
        ]
        totals_log, totals_facts = charge_totals(log), charge_totals(facts)
        differences = []
        for key in sorted(totals_log.keys() | totals_facts.keys()):
            net = totals_log.get(key, 0) - totals_facts.get(key, 0)
            if net:
                budget, pool, hour = key
                when = datetime.fromtimestamp(hour, UTC).isoformat()
                differences.append(
                    f"total {budget} in {pool}, hour {when}: the log charges {net:+d} GPU-s "
                    "against the facts"
                )
        return differences


def _equal(a: LedgerCharge, b: LedgerCharge) -> bool:
    """Field-for-field equality (what pydantic's ``==`` checks for these frozen models with no
    private or extra fields), without its per-call overhead: an audit compares every charge."""
    return type(a) is type(b) and a.__dict__ == b.__dict__
