"""Budget tree, weights, memberships and group bindings (topic: budgets, keyed by budget path).

A weight change takes effect from its event time onward (docs/design.md section 2), so the
event time of these facts matters and is never rewritten.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal, Self

from pydantic import Field, model_validator

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


#: The kinds of group outside Fairshare that a budget's manager may bind to the budget: a
#: Kubernetes namespace of one cluster, or a Slurm account of one cluster. Each kind has its
#: own name check in :func:`group_name_error`; the facts are the same for both. A fact written
#: before the field existed reads as a namespace's (the default).
GroupKind = Literal["kubernetes-namespace", "slurm-account"]
KUBERNETES_NAMESPACE: GroupKind = "kubernetes-namespace"
SLURM_ACCOUNT: GroupKind = "slurm-account"
#: A Kubernetes namespace name is a DNS-1123 label: lower-case letters, digits and '-',
#: starting and ending with a letter or digit, at most 63 characters.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: A Slurm account name as Slurm stores it (sacctmgr lower-cases account names): lower-case
#: letters, digits, '_', '.' and '-', starting with a letter or digit, at most 64 characters.
SLURM_ACCOUNT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def group_name_error(kind: str, group: str) -> str | None:
    """Why ``group`` is not a valid name of a group of ``kind`` (None: it is)."""
    if kind == KUBERNETES_NAMESPACE and not DNS1123_LABEL.match(group):
        return (
            f"{group!r} is not a Kubernetes namespace name (a DNS-1123 label: at most 63 "
            "lower-case letters, digits and '-', starting and ending with a letter or digit)"
        )
    if kind == SLURM_ACCOUNT and not SLURM_ACCOUNT_NAME.match(group):
        return (
            f"{group!r} is not a Slurm account name as Slurm stores it (at most 64 lower-case "
            "letters, digits, '_', '.' and '-', starting with a letter or digit; Slurm "
            "lower-cases account names)"
        )
    return None


class _GroupBinding(EventData):
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    #: A leaf budget.
    budget: BudgetPath
    #: The cluster whose group this is (a namespace or a Slurm account is one cluster's).
    cluster: Identifier
    kind: GroupKind = KUBERNETES_NAMESPACE
    #: The group's name in its cluster (a namespace's name, a Slurm account's name).
    group: Identifier

    @model_validator(mode="after")
    def _group_named(self) -> Self:
        error = group_name_error(self.kind, self.group)
        if error is not None:
            raise ValueError(f"group: {error}")
        return self


class GroupBound(_GroupBinding):
    """A manager of ``budget`` lets work of a group outside Fairshare (a Kubernetes namespace
    or a Slurm account of one cluster) charge the budget: a label naming a budget the group
    is not bound to is refused (``projections.bindings``). ``default``: the group's budget for
    work that names none (a Slurm account's work names none: its binding is always the
    default); a later default for the same group replaces the earlier one (which stays
    bound, not default). Stating a binding again restates whether it is the default. Once the
    budget is closed the binding no longer counts."""

    event_type: ClassVar[str] = "fairshare.budget.group_bound.v1"

    default: bool = False
    bound_by: Identifier


class GroupUnbound(_GroupBinding):
    """The group may no longer charge ``budget`` (if it was its default, it has none now)."""

    event_type: ClassVar[str] = "fairshare.budget.group_unbound.v1"

    unbound_by: Identifier
