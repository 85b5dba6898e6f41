"""Writes of ``/prices``: set the price of a GPU-hour in a pool (admins); and how a price is
shown, by this write's answer and by ``GET /prices`` alike."""

from __future__ import annotations

from decimal import Decimal

from events.models import PriceSet
from events.times import HOUR, utc_from_epoch, utc_iso
from projections.live_state import LiveState
from projections.price_book import Price, PriceBook, hour_of, price_of
from services.api import models as m
from services.api import queries
from services.api.application import Application, Result
from services.api.auth import Principal
from services.api.errors import Conflict, Forbidden, Invalid
from services.api.writes.skeleton import Publish, Unchanged, write


def set_price(app: Application, who: Principal, body: m.PriceRequest) -> Result[m.PriceAnswer]:
    """Set the price of a GPU-hour in a pool (admins): from ``body.effective_at`` on (default:
    the start of the current hour), on the hour, never in a closed month. UNCHANGED if this
    very price is already set (a retried request); another price for the same instant:
    :class:`Conflict`."""

    def check(state: LiveState) -> Unchanged[m.PriceAnswer] | Publish[m.PriceAnswer]:
        if not who.admin:
            raise Forbidden(f"{who.user} is not an admin: only admins set prices", user=who.user)
        effective_at = _price_instant(body, app.clock(), who)
        _check_price_references(state, body, who)
        book = state.tree.prices
        existing = _same_instant(book, body.pool, body.budget, effective_at)
        if existing is not None and _same_price(existing, body):
            return Unchanged(_price_answer(existing, False, None))
        data = PriceSet(
            pool=body.pool,
            currency=body.currency,
            per_gpu_hour=body.per_gpu_hour,
            effective_at=utc_from_epoch(effective_at),
            budget=body.budget,
            set_by=who.user,
            reason=body.reason,
        )
        price = price_of(data)
        _check_price_refusal(book, price, who)
        return Publish(data, lambda envelope: _price_answer(price, True, envelope.id))

    return write(
        app,
        who,
        check,
        lambda envelope: m.PriceAccepted(event_id=envelope.id, pool=body.pool),
        lock=app.price_lock,
    )


def _price_instant(body: m.PriceRequest, now: float, who: Principal) -> int:
    """When the price takes effect, in epoch seconds: on the hour, in the current month or
    later (a closed month is never repriced: its charges are final)."""
    if body.effective_at is None:
        return hour_of(int(now))
    stamp = body.effective_at.timestamp()
    if stamp % HOUR:
        raise Invalid(
            "effective_at",
            "a price takes effect on the hour (charges are hourly), e.g. "
            f"{utc_iso(hour_of(int(stamp)))}",
            user=who.user,
        )
    month = month_start(now)
    if stamp < month:
        raise Invalid(
            "effective_at",
            f"{utc_iso(stamp)} is before {utc_iso(month)}, the start of the current month: "
            "a closed month is never repriced",
            user=who.user,
        )
    return int(stamp)


def month_start(now: float) -> int:
    """The start of the UTC month holding ``now``, in epoch seconds."""
    day = utc_from_epoch(now)
    return int(day.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp())


def _check_price_references(state: LiveState, body: m.PriceRequest, who: Principal) -> None:
    """A currency of ISO 4217, a known pool and, for a negotiated rate, a known budget."""
    import pycountry

    if pycountry.currencies.get(alpha_3=body.currency) is None:
        raise Invalid(
            "currency", f"{body.currency!r} is not an ISO 4217 currency code", user=who.user
        )
    if body.pool not in state.cluster.pools:
        known = ", ".join(sorted(state.cluster.pools)) or "none"
        raise Invalid("pool", f"unknown pool {body.pool!r} (known: {known})", user=who.user)
    if body.budget is not None:
        queries.budget_or_404(state, body.budget)


def _same_instant(book: PriceBook, pool: str, budget: str | None, at: int) -> Price | None:
    return next((p for p in book.histories.get((pool, budget), []) if p.effective_at == at), None)


def _same_price(existing: Price, body: m.PriceRequest) -> bool:
    return existing.currency == body.currency and existing.per_gpu_hour == Decimal(
        body.per_gpu_hour
    )


def _check_price_refusal(book: PriceBook, price: Price, who: Principal) -> None:
    """What the book would refuse: another currency (422), a second price for the same pool,
    subtree and instant (409)."""
    refusal = book.refusal(price)
    if refusal is None:
        return
    if book.currency is not None and price.currency != book.currency:
        raise Invalid("currency", refusal, user=who.user)
    raise Conflict(refusal, user=who.user)


def _price_answer(price: Price, changed: bool, event_id: str | None) -> m.PriceSetView:
    return m.PriceSetView(**price_view(price).model_dump(), changed=changed, event_id=event_id)


def price_view(price: Price) -> m.PriceView:
    return m.PriceView(
        pool=price.pool,
        budget=price.budget,
        currency=price.currency,
        per_gpu_hour=format(price.per_gpu_hour, "f"),
        effective_at=utc_iso(price.effective_at),
        set_by=price.set_by,
        reason=price.reason,
    )


def price_list(state: LiveState, pool: str | None) -> m.PriceList:
    """Every price of the live state's book (of ``pool`` only, if given): ``GET /prices``."""
    book = state.tree.prices
    return m.PriceList(currency=book.currency, prices=[price_view(p) for p in book.prices(pool)])
