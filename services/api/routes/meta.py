"""``/health`` and ``/me``."""

from __future__ import annotations

from fastapi import APIRouter

from services.api import queries
from services.api.deps import Context, User
from services.api.models import Health, Me

router = APIRouter(tags=["meta"])


@router.get("/health")
def health(ctx: Context) -> Health:
    """Liveness and whether the view has read the log's history (no token needed)."""
    ctx.view.sync()
    return Health(
        caught_up=ctx.view.caught_up,
        consumer_running=ctx.view.running,
        events=ctx.view.state.events,
    )


@router.get("/me")
def me(who: User, ctx: Context) -> Me:
    """Who the token belongs to, and their roles."""
    with ctx.view.read() as state:
        return queries.me(state, who.user, who.admin)
