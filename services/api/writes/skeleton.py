"""The path of one write, for every resource: ready, check, publish, wait until visible.

A resource writes by its check alone: under the view's read lock it raises a refusal, answers
:class:`Unchanged` (the state already is what was asked: nothing is published) or names the
event to :class:`Publish` and the answer once the view shows it. :func:`write` does the rest,
in the one order every write keeps (see :mod:`services.api.writes`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from events.envelope import Envelope
from events.models import EventData
from projections.live_state import LiveState
from services.api.application import Application, Outcome, Result
from services.api.auth import Principal

A = TypeVar("A")


@dataclass(frozen=True)
class Unchanged(Generic[A]):
    """Nothing to publish: the state already is what was asked, as ``answer`` says."""

    answer: A


@dataclass(frozen=True)
class Publish(Generic[A]):
    """The event a check decided to publish, and the answer once the view has folded it."""

    data: EventData
    done: Callable[[Envelope[Any]], A]


#: A resource's check of one request against the live state (it raises the refusals).
Check = Callable[[LiveState], Unchanged[A] | Publish[A]]


def write(
    app: Application,
    who: Principal,
    check: Check[A],
    accepted: Callable[[Envelope[Any]], A],
    *,
    lock: AbstractContextManager[Any] | None = None,
) -> Result[A]:
    """UNCHANGED with the check's answer; DONE with :attr:`Publish.done`'s once the view has
    folded the event; ACCEPTED with ``accepted``'s when it has not within the read-your-writes
    bound. ``lock`` is held from the check until the event is visible (or the bound is over):
    two writes one check must see in turn (two creates of one budget) do not both publish."""
    app.ready()
    with lock if lock is not None else nullcontext():
        with app.view.read() as state:
            decided = check(state)
        if isinstance(decided, Unchanged):
            return Result(Outcome.UNCHANGED, decided.answer)
        envelope = app.publish(decided.data, who)
        if not app.visible(envelope):
            return Result(Outcome.ACCEPTED, accepted(envelope))
        return Result(Outcome.DONE, decided.done(envelope))
