"""Time units and conversions shared by every layer.

Every figure of Fairshare is in whole seconds since the epoch, UTC; the usage window is seven
days. Defined once here, at the bottom of the layers, so that a fold, the scheduler, a report
and the simulator cannot disagree on what an hour or the window is."""

from __future__ import annotations

import math
from datetime import UTC, datetime

HOUR = 3600
DAY = 24 * HOUR
WEEK = 7 * DAY
DEFAULT_WINDOW_S = WEEK
"""The fair-share window: usage older than this no longer counts against a budget."""


def utc_from_epoch(seconds: float) -> datetime:
    """An aware UTC datetime for epoch seconds (the inverse of ``types.utc_epoch_seconds``)."""
    return datetime.fromtimestamp(seconds, UTC)


def as_logged(seconds: float) -> float:
    """``seconds`` as an event's time states it (to the microsecond): the instant a reader of
    the log gets back. Whoever decides at an instant it will write into the log decides at this
    one, so that replaying the log reproduces the very figures it decided on."""
    return utc_from_epoch(seconds).timestamp()


def fold_instant(seconds: float) -> float:
    """The whole second every fold dates a fact at (``Envelope.epoch_seconds``): a pass folds
    its own decisions at this time too, so its state is the log's fold of them."""
    return float(math.floor(seconds))


def utc_iso(seconds: float) -> str:
    """Epoch seconds as ISO 8601 in UTC with a ``Z`` (``2026-12-01T10:00:00Z``): how answers
    and refusals spell an instant."""
    return utc_from_epoch(seconds).isoformat().replace("+00:00", "Z")
