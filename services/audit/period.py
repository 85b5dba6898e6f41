"""``fairshare audit replay --period NAME``: one closed period re-derived from where it opened
and its own facts, its charges compared entry by entry with those its seal holds, and the seal
checked (its digest, its balances, its chain to the previous seal).

What it reads is the period's part of the log, not the history before it
(docs/design.md section 4.5):

* the checkpoint charging kept of its fold when the fold first passed the period's start
  (``charging-period-<name>``): the runs open then, the workloads known, where each input stood;
* the ledger from where the period opened up to its seal (the seal of the period and the one
  before it lie there: the previous period is sealed only once the horizon has passed this
  one's start);
* the facts from the checkpoint's positions up to the period's cut: first those before the
  previous cut (their charges for this period's hours are its own; those for earlier hours are
  the previous period's), then the rest (a charge for an earlier hour derived there is a late
  one: a correction this period holds).

The fold is the audit's (no pruning): a fact that charging ignored because its run had left
the fold shows as a difference. When the checkpoint is missing, or written by other code (its
fold may differ), the facts are read from the first offset instead: the same result, at the
cost of the history; the report says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from events import TopicKind, Topics
from events.models import LedgerCharge, PeriodClosed
from events.positions import Delivery, TopicPartition
from projections.charging_state import ChargingState
from projections.ledger import Ledger
from projections.period_book import positions
from projections.periods import (
    check_chain,
    check_seal,
    held,
    parse_period,
    period_name,
    period_start,
    seal_of,
)
from services.audit.replay import ChargeMatcher
from services.bus.checkpoints import KafkaCheckpoints
from services.bus.export import read_range
from services.bus.partitioning import partition_for_key
from services.bus.records import RawRecord, check
from services.charging.periods import checkpoint_name, kafka_ledger
from services.runtime.fold_checkpoints import StateCheckpoints
from services.runtime.gc_pause import gc_paused


@dataclass
class PeriodAudit:
    period: str
    seal: PeriodClosed | None = None
    previous: PeriodClosed | None = None
    #: Whether the facts were read from the checkpoint kept where the period opened.
    from_checkpoint: bool = False
    facts: int = 0
    ledger_records: int = 0
    recorded: int = 0
    recomputed: int = 0
    #: Charges the period holds for hours before its start (late facts' corrections).
    late: int = 0
    seconds: float = 0.0
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.seal is not None and not self.differences


def audit_period(bootstrap: str, topics: Topics, name: str) -> PeriodAudit:
    """Audit the closed period ``name`` (``2026-11``, ``2026-11-05``, ``2026-11-05T13``)."""
    started = time.monotonic()
    with gc_paused():
        result = _audit(bootstrap, topics, name)
    result.seconds = time.monotonic() - started
    return result


def _audit(bootstrap: str, topics: Topics, name: str) -> PeriodAudit:
    start, end, length = parse_period(name)
    result = PeriodAudit(name)
    ledger_topic = topics.name(TopicKind.LEDGER)
    store = KafkaCheckpoints(bootstrap, topics, checkpoint_name(name))
    restored = StateCheckpoints(store, name=name, expect=ChargingState).restore()
    opened = restored.positions if restored is not None else {}
    result.from_checkpoint = restored is not None
    ledger_from = {k: o for k, o in opened.items() if k[0] == ledger_topic}
    previous_name = period_name(period_start(start - 1, length), length)
    result.seal = sealed = _find_seal(bootstrap, topics, ledger_from, name)
    if sealed is None:
        result.differences.append(f"{name}: no seal on the ledger (not closed yet?)")
        return result
    cut, inputs = positions(sealed.as_of), positions(sealed.inputs)
    if restored is None:  # the seal says where the ledger stood when the period opened
        ledger_from = {k: o for k, o in positions(sealed.opened).items() if k[0] == ledger_topic}
    items = list(kafka_ledger(bootstrap, topics)[1](ledger_from, cut))
    result.ledger_records = len(items)
    # The previous seal was published before this period's cut (once the horizon had passed
    # this period's start), so after it opened: among the records just read.
    result.previous = previous = next(
        (c for _, _, c in items if isinstance(c, PeriodClosed) and c.period == previous_name),
        None,
    )
    previous_cut = positions(previous.as_of) if previous else {}
    previous_inputs = positions(previous.inputs) if previous else {}
    charges = [(k, o, c) for k, o, c in items if isinstance(c, LedgerCharge)]
    recorded = held(charges, start, end, previous_cut, cut)
    ledger = restored.state.ledger if restored is not None else Ledger(keep_entries=False)
    ledger.recorded, ledger.owns = set(), None  # the audit derives every charge itself
    inputs_from = {k: o for k, o in opened.items() if k[0] != ledger_topic}
    matcher = ChargeMatcher(check_order=False, net_revisions=True)
    for charge in recorded:
        matcher.offer_recorded(charge)
    # Facts before the previous cut: their charges for this period's hours are its own.
    before = {k: (inputs_from.get(k, 0), previous_inputs.get(k, 0)) for k in inputs}
    after = {
        k: (max(inputs_from.get(k, 0), previous_inputs.get(k, 0)), o) for k, o in inputs.items()
    }
    for phase, ranges in ((0, before), (1, after)):
        for charge in _fold(ledger, read_range(bootstrap, ranges), topics, result):
            hour = int(charge.bucket_start.timestamp())
            if hour < end and (phase or hour >= start):
                matcher.offer_recomputed(charge)
    result.recorded, result.recomputed = matcher.recorded, matcher.recomputed
    result.late = sum(1 for c in recorded if c.bucket_start.timestamp() < start)
    result.differences += matcher.differences()
    result.differences += _seal_problems(sealed, previous, recorded)
    return result


def _seal_problems(
    sealed: PeriodClosed, previous: PeriodClosed | None, recorded: list[LedgerCharge]
) -> list[str]:
    """The seal against the charges it holds, and its chain to the previous seal."""
    mine = seal_of(sealed)
    before = seal_of(previous) if previous is not None else None
    problems = check_seal(mine, recorded, before)
    if before is not None:
        problems += [p for p in check_chain([before, mine]) if p not in problems]
    elif mine.previous or mine.opening:
        problems.append(f"{mine.period}: chains to a seal that is not on the ledger")
    return problems


def _fold(
    ledger: Ledger, records: Iterable[RawRecord], topics: Topics, result: PeriodAudit
) -> Iterator[LedgerCharge]:
    for record in records:
        checked = check(record, topics)
        if isinstance(checked, Delivery):  # others were dead-lettered: no facts
            result.facts += 1
            yield from ledger.apply(checked.envelope.data, checked.envelope.epoch_seconds)


def _find_seal(
    bootstrap: str, topics: Topics, ledger_from: Mapping[TopicPartition, int], name: str
) -> PeriodClosed | None:
    """The seal of ``name``, read from where the period opened on the partition its key
    hashes to (it lies a horizon after the period's end, past the period's own charges)."""
    topic = topics.name(TopicKind.LEDGER)
    ledger_ends, read_ledger = kafka_ledger(bootstrap, topics)
    ends = ledger_ends()
    key = (topic, partition_for_key(name.encode(), len(ends)))
    for _, _, data in read_ledger(ledger_from, {key: ends[key]}):
        if isinstance(data, PeriodClosed) and data.period == name:
            return data
    return None
