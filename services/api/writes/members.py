"""Writes of ``/budgets/{budget}/members``: grant a role on a budget's subtree, revoke one."""

from __future__ import annotations

from collections.abc import Collection

from events.models import MembershipGranted, MembershipRevoked
from events.types import Role
from projections.live_state import LiveState
from services.api import models as m
from services.api.application import Application, Result
from services.api.auth import Principal
from services.api.errors import Invalid
from services.api.writes.budgets import accepted_on, allowed_on
from services.api.writes.skeleton import Publish, Unchanged, write


def add_member(
    app: Application,
    who: Principal,
    budget: str,
    body: m.MemberRequest,
    known_users: Collection[str] | None = None,
) -> Result[m.MemberAnswer]:
    """Grant ``body.user`` a role on the budget's subtree: a manager of the budget (or above).
    UNCHANGED if the role is already held."""

    def check(state: LiveState) -> Unchanged[m.MemberAnswer] | Publish[m.MemberAnswer]:
        allowed_on(state, who, budget)
        if known_users is not None and body.user not in known_users:
            raise Invalid("user", f"unknown user {body.user!r}: no token names them", user=who.user)
        if body.role in state.tree.nodes[budget].members.get(body.user, set()):
            return Unchanged(_grant(budget, body, changed=False))
        data = MembershipGranted(budget=budget, user=body.user, role=body.role, granted_by=who.user)
        return Publish(data, lambda _: _grant(budget, body, changed=True))

    return write(app, who, check, accepted_on(budget))


def _grant(budget: str, body: m.MemberRequest, *, changed: bool) -> m.MemberGrant:
    return m.MemberGrant(budget=budget, user=body.user, role=body.role, changed=changed)


def revoke_member(
    app: Application, who: Principal, budget: str, user: str, role: Role
) -> Result[m.RevokeAnswer]:
    """Take ``role`` on ``budget`` from ``user``: a manager of the budget (or above).
    UNCHANGED if they do not hold it there (the answer names an ancestor where they still
    do: roles cover subtrees, so revoking here would change nothing)."""

    def check(state: LiveState) -> Unchanged[m.RevokeAnswer] | Publish[m.RevokeAnswer]:
        allowed_on(state, who, budget)
        still = _held_above(state, budget, user, role)
        if role not in state.tree.nodes[budget].members.get(user, set()):
            return Unchanged(
                m.MemberRevoke(
                    budget=budget, user=user, role=role, changed=False, still_held_on=still
                )
            )
        data = MembershipRevoked(budget=budget, user=user, role=role, revoked_by=who.user)
        return Publish(
            data,
            lambda _: m.MemberRevoke(
                budget=budget, user=user, role=role, changed=True, still_held_on=still
            ),
        )

    return write(app, who, check, accepted_on(budget))


def _held_above(state: LiveState, budget: str, user: str, role: str) -> str | None:
    """The nearest ancestor of ``budget`` on which ``user`` holds ``role``."""
    for ancestor in reversed(state.tree.ancestors(budget)[:-1]):
        if role in state.tree.nodes[ancestor].members.get(user, set()):
            return ancestor
    return None
