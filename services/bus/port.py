"""The bus as a port: what services need from an event log, independent of the client library.

Delivery is at-least-once by contract. A subscriber hands out events with their position; the
caller applies their effects and only then commits, so a crash in between redelivers rather than
loses. Effects must therefore be idempotent (event ids, derived charge ids, stored positions).
"""

from __future__ import annotations

from typing import Any, Protocol

from events.envelope import Envelope
from events.positions import Delivery


class PublishError(RuntimeError):
    """The log did not durably accept an event; the caller must not act as if it had."""


class EventPublisher(Protocol):
    def publish(self, envelope: Envelope[Any]) -> None:
        """Queue an event; delivery is confirmed (or fails) by :meth:`flush`."""

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued event is acknowledged; raise PublishError if any was not."""

    def close(self) -> None: ...


class EventSubscriber(Protocol):
    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        """Next valid events, in log order per partition. Invalid records were dead-lettered."""

    def commit(self) -> None:
        """Durably mark everything handed out so far as done."""

    def close(self) -> None: ...
