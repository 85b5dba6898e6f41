"""The event bus: a port (``port``) and its adapters (``kafka``, ``memory``)."""

from services.bus.port import Delivery, EventPublisher, EventSubscriber, Position, PublishError

__all__ = ["Delivery", "EventPublisher", "EventSubscriber", "Position", "PublishError"]
