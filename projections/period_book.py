"""What charging remembers of its closed periods, checkpointed with its fold
(``ChargingState.periods``): the last seal (its digest and closing balances are the next
period's opening), where the fold stood when it first entered each period not yet sealed, and
the seals already on the log that the fold has not reached again (after a restart they are
adopted, never published twice).

The book decides *when* (pure, from the facts folded): a period is entered when the first fact
at or after its start is about to be folded, and is due once the fold's horizon has passed its
end (``projections.periods.close_due``), in order. *How* (the positions of the ledger, the
seal's figures) is charging's (``services.charging.periods``), which tells the book.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from events.models import InputPosition, PeriodClosed
from events.positions import TopicPartition
from projections.periods import Seal, close_due, period_end, period_start, seal_of


@dataclass
class PeriodBook:
    length: str = "month"
    #: The start of the latest period the fold has entered (None: no fact folded yet).
    entered: int | None = None
    #: Per period entered and not sealed (by start): the positions, inputs and ledger, where
    #: the fold stood just before its first fact.
    opened: dict[int, dict[TopicPartition, int]] = field(default_factory=dict)
    #: The latest seal: what the next one chains to, and its cut.
    last: PeriodClosed | None = None
    #: Seals read from the ledger for periods the fold has not sealed yet, by start.
    on_log: dict[int, PeriodClosed] = field(default_factory=dict)
    #: Per period not sealed yet (by start), per ledger partition: the lowest offset of a
    #: charge for one of its hours read from the ledger (:meth:`note_charge`).
    charges_from: dict[int, dict[TopicPartition, int]] = field(default_factory=dict)

    def entering(self, at: float) -> list[int]:
        """The starts of the periods a fact at ``at`` enters (every one it passes: quiet
        periods are sealed too, so the chain has no gap); empty if it enters none."""
        start = period_start(at, self.length)
        if self.entered is None:
            return [start]
        entered: list[int] = []
        following = period_end(self.entered, self.length)
        while following <= start:
            entered.append(following)
            following = period_end(following, self.length)
        return entered

    def open(self, start: int, positions: dict[TopicPartition, int]) -> None:
        self.opened[start] = dict(positions)
        self.entered = start if self.entered is None else max(self.entered, start)

    def due(self, horizon: int | None) -> int | None:
        """The first open period whose end the horizon has passed (None: none is due)."""
        if not self.opened:
            return None
        first = min(self.opened)
        return first if close_due(period_end(first, self.length), horizon) else None

    def previous(self) -> Seal | None:
        return seal_of(self.last) if self.last is not None else None

    def previous_cut(self) -> dict[TopicPartition, int]:
        """The last seal's cut (the first period has none: every offset is after it)."""
        return positions(self.last.as_of) if self.last is not None else {}

    def note_charge(self, key: TopicPartition, offset: int, hour: int) -> None:
        """A charge for ``hour`` read at ``offset`` of ledger partition ``key``: the lowest
        such offset per period not sealed yet is where a rebuilt fold's audit starts reading
        (:meth:`ledger_floor`)."""
        start = period_start(hour, self.length)
        if self.last is not None and start < int(self.last.end.timestamp()):
            return  # a late charge for a sealed period: the open one holds it by its offset
        found = self.charges_from.setdefault(start, {})
        if offset < found.get(key, offset + 1):
            found[key] = offset

    def ledger_floor(
        self, ledger_topic: str, start: int, unread: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Ledger positions no charge of the period starting at ``start`` can lie before, when
        the fold cannot say where the ledger ends for it (it is rebuilding: the log holds
        charges it has not derived yet). The period holds the charges for its hours and the
        late ones after the previous seal's cut, so per partition the lowest of: the offset
        of the first charge read for an hour at or after ``start`` (:meth:`note_charge`), the
        previous cut (the last seal's: cuts only move on), and the first offset not read yet
        (``unread``). The first period holds every earlier hour: it reads from the start.

        Before this, a rebuild read every period from where the latest one opened, which over
        a ledger it did not write was the ledger's first offset: the audit of a day after four
        weeks read the whole ledger (47,732 records for 1,346 of its own)."""
        if self.last is None:
            return {}
        floor = {k: o for k, o in unread.items() if k[0] == ledger_topic}
        firsts = [self.previous_cut()] + [
            first for period, first in self.charges_from.items() if period >= start
        ]
        for first in firsts:
            for key, offset in first.items():
                if key[0] == ledger_topic:
                    floor[key] = min(floor.get(key, offset), offset)
        return floor

    def note_on_log(self, closed: PeriodClosed) -> None:
        """A seal read from the ledger: kept until the fold reaches that period again."""
        start = int(closed.start.timestamp())
        if self.last is None or closed.start >= self.last.end:
            self.on_log[start] = closed

    def sealed(self, closed: PeriodClosed) -> None:
        """``closed`` is on the log now (published, or adopted from the log)."""
        start = int(closed.start.timestamp())
        self.opened.pop(start, None)
        self.on_log.pop(start, None)
        self.last = closed
        end = int(closed.end.timestamp())
        for period in [p for p in self.charges_from if p < end]:
            del self.charges_from[period]


def positions(of: tuple[InputPosition, ...]) -> dict[TopicPartition, int]:
    return {(p.topic, p.partition): p.offset for p in of}
