"""``/health`` and ``/me``."""

from __future__ import annotations

from fastapi import APIRouter

from services.api import queries
from services.api.deps import Context, User
from services.api.errors import Unavailable
from services.api.models import Health, Me

router = APIRouter(tags=["meta"])

#: How long a health check lets the view reach the end offsets it read.
HEALTH_WAIT_S = 1.0


@router.get("/health")
def health(ctx: Context) -> Health:
    """Liveness, and whether the view is current *now* (no token needed): the log's end
    offsets are read first, and ``caught_up`` says whether the view has folded that far
    (allowing it a moment to get there), not whether it once had."""
    view = ctx.view
    try:
        ends = view.log_end()
    except Exception as error:  # the bus client's own type: any failure means the same here
        # a broker that is down (or restarting) is an outage the caller can wait out: 503 with
        # a Retry-After, never a 500 that reads as a bug
        raise Unavailable(
            f"the event log does not answer ({error}); the view cannot say if it is current",
            retry_after_s=2,
        ) from error
    caught_up = view.reached(ends, timeout_s=HEALTH_WAIT_S) and view.caught_up
    with view.read() as state:
        waiting, rejected, events = len(state.waiting), state.rejected_total, state.events
        not_believed = dict(state.trust.refused)
    return Health(
        caught_up=caught_up,
        consumer_running=view.running,
        events=events,
        behind=view.behind(ends),
        waiting=waiting,
        rejected=rejected,
        skipped=view.skipped,
        not_believed=not_believed,
    )


@router.get("/me")
def me(who: User, ctx: Context) -> Me:
    """Who the token belongs to, and their roles."""
    with ctx.view.read() as state:
        return queries.me(state, who.user, who.admin)
