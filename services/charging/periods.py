"""Charging seals the ledger's closed periods (docs/design.md section 4.5).

**Who.** Only a fold of every workloads partition: plain charging, or a shard that holds them
all. A seal states every charge of a period and cuts the ledger at one set of offsets, which a
shard holding part of the partitions cannot do while others publish; a group of several shards
seals nothing until one of them holds every partition again (then it seals every period due,
in order).

**When** is the fold's (``projections.period_book``): just before the first fact at or after a
period's start, charging notes where it stands (its input positions, and the ledger's end once
every charge it published is acknowledged) and keeps a checkpoint of its fold there, named
``charging-period-<name>`` in the store of its checkpoints: the audit of that period restores
it and reads only the facts after it, whatever came before. Once the horizon passes the
period's end (no run that could still post for its hours is left in the fold), charging
flushes, cuts the ledger at its end, reads the charges between where the period opened and the
cut, and publishes the seal (``projections.periods``: which charges it holds, its balances,
its digest chained to the previous seal's), then checkpoints its fold at once.

**A rebuilt fold** (no checkpoint, or a restart before one was saved) reaches each period
again: a seal already on the ledger (read from its tail) is adopted, never published twice;
where it cannot say where the ledger ended when the period opened (the log then holds charges
it has not derived yet), it names where the previous period opened, which no charge of the
later period lies before either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime

from events import TopicKind, Topics, new_event
from events.envelope import derived_event_id
from events.models import LedgerCharge, PeriodClosed
from events.positions import Delivery, TopicPartition
from projections.charging_state import ChargingState
from projections.period_book import positions
from projections.periods import closed_event, held, period_end, period_name, seal
from services.bus.records import RawRecord, check
from services.charging.host import SOURCE, ChargingHost
from services.runtime.fold_checkpoints import StateCheckpoints

log = logging.getLogger(__name__)

LedgerItem = tuple[TopicPartition, int, LedgerCharge | PeriodClosed]
ReadLedger = Callable[
    [Mapping[TopicPartition, int], Mapping[TopicPartition, int]], Iterator[LedgerItem]
]


def checkpoint_name(period: str) -> str:
    """The name of the checkpoint of the fold where ``period`` opened."""
    return f"charging-period-{period}"


def ledger_items(records: Iterable[RawRecord], topics: Topics) -> Iterator[LedgerItem]:
    """The charges and seals among ledger ``records``, with their partition and offset. A
    record that fails the check every reader applies is none (its consumer dead-letters it)."""
    for record in records:
        checked = check(record, topics)
        if isinstance(checked, Delivery) and isinstance(
            checked.envelope.data, LedgerCharge | PeriodClosed
        ):
            yield (record.topic, record.partition), record.offset, checked.envelope.data


class Sealer:
    """Seals the periods of one host's fold (:class:`~services.charging.host.PeriodSealer`)."""

    def __init__(
        self,
        host: ChargingHost,
        ledger_topic: str,
        ledger_ends: Callable[[], dict[TopicPartition, int]],
        read_ledger: ReadLedger,
        ledger_unread: Callable[[], dict[TopicPartition, int]],
        open_checkpoints: Callable[[str], StateCheckpoints[ChargingState]] | None,
        checkpoint_fold: Callable[[], object],
    ) -> None:
        """``ledger_ends``: the end of every ledger partition now; ``read_ledger(first,
        stop)``: its charges and seals between; ``ledger_unread``: the first offset of each
        partition the fold has not read yet; ``checkpoint_fold``: save the fold's own
        checkpoint now (after a seal)."""
        self.host = host
        self.ledger_topic = ledger_topic
        self._ledger_ends = ledger_ends
        self._read_ledger = read_ledger
        self._ledger_unread = ledger_unread
        self._open_checkpoints = open_checkpoints
        self._checkpoint_fold = checkpoint_fold
        self.sealed = 0

    def open(self, start: int) -> None:
        state = self.host.state
        book = state.periods
        on_log = book.on_log.get(start)
        if on_log is not None:  # sealed before: it says where the ledger stood
            ledger = {
                k: o for k, o in positions(on_log.opened).items() if k[0] == self.ledger_topic
            }
        elif state.ledger.recorded:  # rebuilding: charges on the log are not derived yet
            ledger = book.ledger_floor(self.ledger_topic, start, self._ledger_unread())
        else:
            self.host.flush_charges(always=True)
            ledger = self._ledger_ends()
        where = {**self.host.positions, **ledger}
        book.open(start, where)
        if self._open_checkpoints is not None:
            name = checkpoint_name(period_name(start, book.length))
            self._open_checkpoints(name).save(state, where)

    def close(self, start: int) -> None:
        book = self.host.state.periods
        on_log = book.on_log.get(start)
        if on_log is not None:
            book.sealed(on_log)  # published before a restart: adopted, not published twice
            return
        self.host.flush_charges(always=True)
        cut = self._ledger_ends()
        opened = book.opened[start]
        end = period_end(start, book.length)
        first = {key: opened.get(key, 0) for key in cut}
        charges = [
            (key, offset, data)
            for key, offset, data in self._read_ledger(first, cut)
            if isinstance(data, LedgerCharge)
        ]
        previous = book.previous()
        name = period_name(start, book.length)
        sealed = seal(
            name,
            start,
            end,
            previous.closing if previous else {},
            held(charges, start, end, book.previous_cut(), cut),
            previous.digest if previous else "",
        )
        kept = checkpoint_name(name) if self._open_checkpoints is not None else ""
        closed = closed_event(sealed, cut, self.host.positions, opened, kept)
        at = datetime.fromtimestamp(self.host.state.latest_time, UTC)
        self.host.publisher.publish(
            new_event(closed, source=SOURCE, time=at, event_id=derived_event_id("period", name))
        )
        self.host.publisher.flush()
        book.sealed(closed)
        self.sealed += 1
        log.info(
            "period sealed",
            extra={"period": name, "charges": sealed.charges, "digest": sealed.digest},
        )
        self._checkpoint_fold()


def kafka_ledger(
    bootstrap: str, topics: Topics
) -> tuple[Callable[[], dict[TopicPartition, int]], ReadLedger]:
    """The ledger's ends and a reader of a range of it, over Kafka at ``bootstrap``."""
    from services.bus.export import end_offsets, read_range

    name = topics.name(TopicKind.LEDGER)

    def ends() -> dict[TopicPartition, int]:
        return end_offsets(bootstrap, [name])

    def read(
        first: Mapping[TopicPartition, int], stop: Mapping[TopicPartition, int]
    ) -> Iterator[LedgerItem]:
        ranges = {key: (first.get(key, 0), offset) for key, offset in stop.items()}
        return ledger_items(read_range(bootstrap, ranges), topics)

    return ends, read
