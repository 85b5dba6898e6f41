"""Budget tree, weights and memberships (topic: budgets, keyed by budget path).

A weight change takes effect from its event time onward (docs/design.md section 2), so the
event time of these facts matters and is never rewritten.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from events.models.base import EventData
from events.topics import TopicKind
from events.types import BudgetPath, Identifier, PoolName, Role, ShortText, Weight


class BudgetCreated(EventData):
    """A node of the budget tree; its parent is its path minus the last segment."""

    event_type: ClassVar[str] = "fairshare.budget.created.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath
    weight: Weight = 1.0
    #: Weights that replace ``weight`` in specific pools.
    pool_weights: dict[PoolName, Weight] = Field(default_factory=dict)
    created_by: Identifier
    description: ShortText = ""


class BudgetClosed(EventData):
    """A budget stops accepting new work; its history stays in the log."""

    event_type: ClassVar[str] = "fairshare.budget.closed.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath
    closed_by: Identifier
    reason: ShortText = ""


class BudgetWeightChanged(EventData):
    """A manager of the parent re-weights a child, in every pool (``pool`` None) or in one."""

    event_type: ClassVar[str] = "fairshare.budget.weight_changed.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath
    weight: Weight
    pool: PoolName | None = None
    changed_by: Identifier
    reason: ShortText = ""


class MembershipGranted(EventData):
    """A user may submit to (member) or manage (manager) a budget's subtree."""

    event_type: ClassVar[str] = "fairshare.budget.membership_granted.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath
    user: Identifier
    role: Role
    granted_by: Identifier


class MembershipRevoked(EventData):
    event_type: ClassVar[str] = "fairshare.budget.membership_revoked.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath
    user: Identifier
    role: Role
    revoked_by: Identifier
