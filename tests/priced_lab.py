"""The small lab's morning (:func:`services.devtools.demo_data.small_lab`) with prices, as
the money tests read it: a list price of 2.35 per GPU-hour from an hour before it, 3.10 from two
hours in, and a negotiated 1.999999 for ``lab/vision``; and an API over it whose clock stands
20 minutes after its last event."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fastapi import FastAPI
from sqlalchemy import Engine

from events import new_event
from events.envelope import Envelope, derived_event_id
from events.models import PriceSet
from services.api import create_app, default_tokens
from services.api.view import VIEW_KINDS, LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.devtools.demo_data import POOL, T0, small_lab

MONTH = "2026-11"
#: The API's clock: 20 minutes after the lab's last event (T0 + 6 h).
NOW = (T0 + timedelta(hours=6, minutes=20)).timestamp()
#: Every budget of the lab, in path order.
BUDGETS = ["lab", "lab/robotics", "lab/vision", "ops"]


def _price(amount: str, at: datetime, budget: str | None = None) -> Envelope[Any]:
    data = PriceSet(
        pool=POOL,
        currency="EUR",
        per_gpu_hour=amount,
        effective_at=at,
        budget=budget,
        set_by="admin",
    )
    return new_event(
        data,
        source="tests",
        time=T0 - timedelta(hours=2),
        event_id=derived_event_id("price", f"{amount}:{at}:{budget}"),
    )


def priced_lab() -> list[Envelope[Any]]:
    prices = [
        _price("2.35", T0 - timedelta(hours=1)),
        _price("3.10", T0 + timedelta(hours=2)),
        _price("1.999999", T0 - timedelta(hours=1), budget="lab/vision"),
    ]
    return prices + small_lab()


def priced_app(events: list[Envelope[Any]], engine: Engine | None) -> FastAPI:
    """The API over ``events`` (its live view fed with them) and the read models ``engine``."""
    broker = InMemoryBroker()
    view = LiveView(InMemorySubscriber(broker, "money-view", VIEW_KINDS))
    view.feed(*events)
    return create_app(
        view, InMemoryPublisher(broker), default_tokens(), clock=lambda: NOW, engine=engine
    )
