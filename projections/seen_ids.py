"""The ids of the facts a fold has applied, kept only as long as a redelivery can come.

A reader ignores a redelivered fact by its id. Keeping every id ever folded made a live reader's
memory grow with the whole history (a fleet's year is hundreds of millions of facts); but a
redelivery carries the same event time as the original, so ids are kept by the day of their
event time and a whole day is dropped once the fold's horizon has passed it
(:meth:`SeenIds.forget_before`). What arrives from before the horizon is not folded at all
(``LiveState.apply``), so a forgotten id can never be applied twice.
"""

from __future__ import annotations

from events.times import DAY


def _day(at: float) -> int:
    return int(at // DAY)


class SeenIds:
    def __init__(self) -> None:
        self._by_day: dict[int, set[str]] = {}

    def seen(self, event_id: str, at: float) -> bool:
        """Whether ``event_id``, stated at ``at`` (epoch seconds), was folded: one day's set."""
        ids = self._by_day.get(_day(at))
        return ids is not None and event_id in ids

    def add(self, event_id: str, at: float) -> None:
        self._by_day.setdefault(_day(at), set()).add(event_id)

    def __contains__(self, event_id: object) -> bool:
        """For readers that know an id but not its time (the API waiting to see its own
        write, an agent's in-flight facts): every kept day is asked."""
        return any(event_id in ids for ids in self._by_day.values())

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._by_day.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeenIds) and self._by_day == other._by_day

    __hash__ = None  # type: ignore[assignment]  # mutable

    def forget_before(self, at: float) -> int:
        """Drop the days that end before ``at``; how many ids went."""
        first = _day(at)
        old = [day for day in self._by_day if day < first]
        return sum(len(self._by_day.pop(day)) for day in old)
