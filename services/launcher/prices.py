"""The list prices ``fairshare up`` sets through the API once it answers, as an admin would with
``fairshare prices set``: those of ``--price POOL=AMOUNT[@ISO]``, or for the demo
:data:`~services.launcher.config.DEMO_PRICE` per GPU-hour in each of its pools that has no list
price yet, so that the cost reports have something to show.

A pool is known to the API once its agent has registered a node, which may come after the API
answers: a price the API refuses for an unknown pool is tried again until ``timeout_s``. A
restart sets nothing twice: a price without a time is skipped when the same one is in force
already, and the API answers the very same price at the same hour as unchanged."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from services.launcher.config import DEMO_PRICE, UpConfig, UpPrice

if TYPE_CHECKING:
    from services.client.api import FairshareClient

Report = Callable[[str], None]

#: The demo's admin token (``services.api.tokens.DEMO_TOKENS``).
DEMO_ADMIN_TOKEN = "admin-token"


def parse_price(text: str) -> UpPrice:
    """``POOL=AMOUNT[@ISO]`` (``a100=2.35``, ``a100=2.10@2026-12-01T00:00:00Z``); ValueError
    saying what is wrong. The amount and the time are checked as the API checks them."""
    from services.api.models import money_text

    pool, equals, rest = text.partition("=")
    amount, at, when = rest.partition("@")
    if not equals or not pool.strip() or not amount.strip() or (at and not when.strip()):
        raise ValueError(f"{text!r} is not POOL=AMOUNT[@ISO TIME] (e.g. a100=2.35)")
    amount = money_text(amount.strip())
    if at:
        try:
            stamp = datetime.fromisoformat(when.strip())
        except ValueError as error:
            raise ValueError(f"{when!r} is not an ISO time (e.g. 2026-12-01T00:00:00Z)") from error
        if stamp.tzinfo is None:
            raise ValueError(f"{when!r} has no UTC offset (e.g. 2026-12-01T00:00:00Z)")
    return UpPrice(pool.strip(), amount, when.strip() or None)


def price_token(config: UpConfig) -> str | None:
    """The admin token prices are set with: the demo's, or with a tokens file
    ``$FAIRSHARE_TOKEN`` (an admin's; None without it)."""
    if config.tokens_file is None:
        return DEMO_ADMIN_TOKEN
    return os.environ.get("FAIRSHARE_TOKEN") or None


def up_prices(config: UpConfig) -> tuple[tuple[UpPrice, ...], bool]:
    """The prices to set and whether they are the demo's (set only where a pool has none)."""
    if config.prices:
        return config.prices, False
    if config.tokens_file is not None:  # not the demo: prices are the operator's to set
        return (), False
    return tuple(UpPrice(pool, DEMO_PRICE) for pool in config.pools), True


def set_up_prices(
    config: UpConfig,
    client: FairshareClient,
    should_stop: Callable[[], bool],
    report: Report,
    *,
    timeout_s: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Set the prices of :func:`up_prices` through ``client``; returns how many were set.
    Each outcome is reported in one line (already in force, set, or refused and why)."""
    prices, demo = up_prices(config)
    deadline = clock() + timeout_s
    done = 0
    for price in prices:
        while not should_stop():
            outcome = _set_one(config, client, price, demo, retry=clock() < deadline)
            if outcome is None:  # the pool is not registered yet
                sleep(1.0)
                continue
            report(outcome)
            done += outcome.startswith("price set")
            break
    return done


def _set_one(
    config: UpConfig, client: FairshareClient, price: UpPrice, demo: bool, retry: bool
) -> str | None:
    """One line saying what became of ``price``; None: try again (its pool is unknown yet)."""
    from services.api.models import PriceSetView
    from services.client.api import ApiError

    where = f"{price.pool}: {price.amount} {config.currency} per GPU-hour"
    try:
        if price.effective_at is None and _in_force(client, price, config.currency, demo):
            return f"price in force already: {where}"
        answer = client.set_price(
            price.pool,
            price.amount,
            config.currency,
            effective_at=price.effective_at,
            reason="fairshare up (demo)" if demo else "fairshare up --price",
        )
    except ApiError as error:
        if retry and error.status == 422 and "unknown pool" in str(error):
            return None
        return f"price not set ({where}): {error}"
    if isinstance(answer, PriceSetView):
        if not answer.changed:
            return f"price in force already: {where} from {answer.effective_at}"
        return f"price set: {where} from {answer.effective_at}"
    return f"price set: {where} (recorded; not yet visible)"


def _in_force(client: FairshareClient, price: UpPrice, currency: str, demo: bool) -> bool:
    """Whether nothing needs setting: for the demo, any list price of the pool; else the same
    list price in force now."""
    listed = [p for p in client.prices(price.pool).prices if p.budget is None]
    if demo:
        return bool(listed)
    now = time.time()
    started = [p for p in listed if _instant(p.effective_at) <= now]
    if not started:
        return False
    current = max(started, key=lambda p: _instant(p.effective_at))
    return current.currency == currency and Decimal(current.per_gpu_hour) == Decimal(price.amount)


def _instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()
