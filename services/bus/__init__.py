"""The event bus: a port (``port``) and its adapters (``kafka``, ``memory``)."""

from services.bus.port import EventPublisher, EventSubscriber, PublishError

__all__ = ["EventPublisher", "EventSubscriber", "PublishError"]
