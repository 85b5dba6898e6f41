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

from dataclasses import dataclass, field

from events.models import InputPosition, PeriodClosed
from projections.periods import Seal, close_due, period_end, period_start, seal_of

Key = tuple[str, int]


@dataclass
class PeriodBook:
    length: str = "month"
    #: The start of the latest period the fold has entered (None: no fact folded yet).
    entered: int | None = None
    #: Per period entered and not sealed (by start): the positions, inputs and ledger, where
    #: the fold stood just before its first fact.
    opened: dict[int, dict[Key, int]] = field(default_factory=dict)
    #: The latest seal: what the next one chains to, and its cut.
    last: PeriodClosed | None = None
    #: Seals read from the ledger for periods the fold has not sealed yet, by start.
    on_log: dict[int, PeriodClosed] = field(default_factory=dict)

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

    def open(self, start: int, positions: dict[Key, int]) -> None:
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

    def previous_cut(self) -> dict[Key, int]:
        """The last seal's cut (the first period has none: every offset is after it)."""
        return positions(self.last.as_of) if self.last is not None else {}

    def ledger_floor(self, ledger_topic: str) -> dict[Key, int]:
        """Ledger positions no charge of a period entered now can lie before, when the fold
        cannot say where the ledger ends for it (it is rebuilding: the log holds charges it
        has not derived yet): where the latest period entered (or sealed) opened."""
        if self.opened:
            latest = self.opened[max(self.opened)]
        elif self.last is not None:
            latest = positions(self.last.opened)
        else:
            return {}
        return {key: offset for key, offset in latest.items() if key[0] == ledger_topic}

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


def positions(of: tuple[InputPosition, ...]) -> dict[Key, int]:
    return {(p.topic, p.partition): p.offset for p in of}
