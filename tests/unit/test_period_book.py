"""What charging's period book decides from the facts alone (issue 23): a fact enters every
period it passes (quiet ones too, so the chain has no gap), a period is due once the horizon
has passed its end, in order, and a seal already on the log is kept until the fold reaches it."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

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
    # no seal yet: the first period holds every earlier hour, so it reads from the start
    assert book.ledger_floor("fairshare.ledger", T, {LEDGER: 40}) == {}


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


def _sealed_through(book: PeriodBook, start: int, cut: int) -> None:
    sealed = seal("2026-11-05T10", start, start + HOUR, {}, [])
    book.sealed(closed_event(sealed, {LEDGER: cut}, {}, {LEDGER: 0}, ""))


def test_a_rebuild_reads_a_period_from_its_first_charge_not_from_the_ledger_start() -> None:
    """Over a ledger it did not write, the floor is where the period's own charges begin (or
    the previous cut, or what is not read yet, whichever is lower), not offset 0."""
    book = PeriodBook(length="hour")
    _sealed_through(book, T - HOUR, cut=100)
    for offset, hour in [(120, T), (130, T + HOUR), (125, T), (140, T + 2 * HOUR)]:
        book.note_charge(LEDGER, offset, hour)
    book.note_charge(LEDGER, 5, T - HOUR)  # a late charge for the sealed hour: not indexed
    assert book.ledger_floor("fairshare.ledger", T + HOUR, {LEDGER: 500}) == {LEDGER: 100}
    _sealed_through(book, T, cut=200)
    assert book.ledger_floor("fairshare.ledger", T + HOUR, {LEDGER: 500}) == {LEDGER: 130}
    assert book.ledger_floor("fairshare.ledger", T + 2 * HOUR, {LEDGER: 500}) == {LEDGER: 140}
    assert book.ledger_floor("fairshare.ledger", T + 3 * HOUR, {LEDGER: 150}) == {LEDGER: 150}
    assert T not in book.charges_from  # sealed periods leave the index


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1)), min_size=1, max_size=60),
    st.integers(1, 5),
    st.integers(0, 60),
)
def test_no_charge_a_period_holds_lies_before_its_floor(
    ledger: list[tuple[int, int]], sealed_hours: int, read: int
) -> None:
    """Whatever the order charges were posted in (late ones included) and however far the
    fold has read, a period's floor is at or before every charge it holds (``held_by``)."""
    book = PeriodBook(length="hour")
    previous_cut = 0
    read = min(read, len(ledger))
    for hour in range(sealed_hours):
        # the seal of hour ``hour - 1`` cuts the ledger somewhere in what was read
        previous_cut = min(read, previous_cut + len(ledger) // sealed_hours)
        for offset, (h, _) in enumerate(ledger[:read]):
            book.note_charge(LEDGER, offset, T + h * HOUR)
        if hour < sealed_hours - 1:
            _sealed_through(book, T + hour * HOUR, previous_cut)
    start = T + (sealed_hours - 1) * HOUR
    floor = book.ledger_floor("fairshare.ledger", start, {LEDGER: read})
    first = floor.get(LEDGER, 0)
    cut = book.previous_cut().get(LEDGER, 0)
    for offset, (h, _) in enumerate(ledger):
        hour = T + h * HOUR
        holds = hour == start or (hour < start and (book.last is None or offset >= cut))
        if holds:
            assert offset >= first, (offset, first, floor)
