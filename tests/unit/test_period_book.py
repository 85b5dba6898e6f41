"""What charging's period book decides from the facts alone (issue 23): a fact enters every
period it passes (quiet ones too, so the chain has no gap), a period is due once the horizon
has passed its end, in order, and a seal already on the log is kept until the fold reaches it."""

from __future__ import annotations

from datetime import UTC, datetime

from events.times import HOUR
from projections.period_book import PeriodBook
from projections.periods import closed_event, seal

T = int(datetime(2026, 11, 5, 10, tzinfo=UTC).timestamp())
LEDGER = ("fairshare.ledger", 0)


def test_a_fact_enters_every_period_it_passes_and_periods_close_in_order() -> None:
    book = PeriodBook(length="hour")
    assert book.entering(T + 5) == [T]
    book.open(T, {LEDGER: 3})
    assert book.entering(T + 100) == []
    entered = book.entering(T + 3 * HOUR + 1)
    assert entered == [T + HOUR, T + 2 * HOUR, T + 3 * HOUR]
    for start in entered:
        book.open(start, {LEDGER: 9})
    assert book.due(None) is None
    assert book.due(T + HOUR - 1) is None
    assert book.due(T + HOUR) == T
    assert book.ledger_floor("fairshare.ledger") == {LEDGER: 9}


def test_a_seal_on_the_log_is_kept_until_reached_then_chains_the_next() -> None:
    book = PeriodBook(length="hour")
    book.open(T, {LEDGER: 0})
    sealed = seal("2026-11-05T10", T, T + HOUR, {}, [])
    closed = closed_event(sealed, {LEDGER: 5}, {}, {LEDGER: 0}, "")
    book.note_on_log(closed)
    assert book.on_log[T] == closed
    book.sealed(closed)
    assert book.on_log == {}
    assert book.opened == {}
    previous = book.previous()
    assert previous is not None
    assert previous.digest == sealed.digest
    assert book.previous_cut() == {LEDGER: 5}
    book.note_on_log(closed)  # read back after it was published: nothing to adopt
    assert book.on_log == {}
