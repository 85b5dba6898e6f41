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

    budget: BudgetPath = Field(
        description=(
            "The new budget's path in the organisation tree (e.g. lab/robotics/sim2real); its "
            "parent is the path minus its last segment (top-level budgets are the root's "
            "children). The record's subject. Only a leaf budget funds workloads. Stated by the "
            "api (or an admin)."
        )
    )
    weight: Weight = Field(
        default=1.0,
        description=(
            "The budget's weight among its siblings, from the event time on, in every pool "
            "without a pool weight: its share is weight / (sum of its open siblings' weights, its "
            "own included) x its parent's share (design 2.1). Positive and finite. Stated by the "
            "api (or an admin)."
        ),
    )
    pool_weights: dict[PoolName, Weight] = Field(
        default_factory=dict,
        description=(
            "Weights that replace weight in specific pools: pool name -> weight. Stated by the "
            "api (or an admin)."
        ),
    )
    created_by: Identifier = Field(
        description=(
            "The user who created the budget (a manager of its parent, or an admin), as the api "
            "authenticated them; informational. Stated by the api (or an admin)."
        )
    )
    description: ShortText = Field(
        default="",
        description=(
            "Free text describing the budget; shown, never interpreted. Stated by the api (or an "
            "admin)."
        ),
    )


class BudgetClosed(EventData):
    """A budget stops accepting new work; its history stays in the log."""

    event_type: ClassVar[str] = "fairshare.budget.closed.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath = Field(
        description=(
            "The budget closed, and with it its subtree: from the event time on it accepts no new "
            "work and has no share (its siblings' shares grow), and its group bindings stop "
            "counting. Its history stays in the log. The record's subject. Stated by the api (or "
            "an admin)."
        )
    )
    closed_by: Identifier = Field(
        description=(
            "The user who closed it (a manager of its parent, or an admin); informational. Stated "
            "by the api (or an admin)."
        )
    )
    reason: ShortText = Field(
        default="", description="Free text: why; informational. Stated by the api (or an admin)."
    )


class BudgetWeightChanged(EventData):
    """A manager of the parent re-weights a child, in every pool (``pool`` None) or in one."""

    event_type: ClassVar[str] = "fairshare.budget.weight_changed.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath = Field(
        description=(
            "The budget re-weighted (a child of its manager's budget); the record's subject. "
            "Stated by the api (or an admin)."
        )
    )
    weight: Weight = Field(
        description=(
            "Its new weight among its siblings, positive and finite, from the event time on (the "
            "tree keeps the history: a past share uses the weight in force then). Stated by the "
            "api (or an admin)."
        )
    )
    pool: PoolName | None = Field(
        default=None,
        description=(
            "None: the weight in every pool that has no weight of its own for the budget; a pool: "
            "the budget's weight in that pool only. Stated by the api (or an admin)."
        ),
    )
    changed_by: Identifier = Field(
        description=(
            "The user (a manager of the parent, or an admin) who changed it. Informational. "
            "Stated by the api (or an admin)."
        )
    )
    reason: ShortText = Field(
        default="", description="Free text: why; informational. Stated by the api (or an admin)."
    )


class MembershipGranted(EventData):
    """A user may submit to (member) or manage (manager) a budget's subtree."""

    event_type: ClassVar[str] = "fairshare.budget.membership_granted.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath = Field(
        description=(
            "The budget whose whole subtree the role covers; the record's subject. Stated by the "
            "api (or an admin)."
        )
    )
    user: Identifier = Field(
        description=(
            "The user granted the role, as the api names users. Stated by the api (or an admin)."
        )
    )
    role: Role = Field(
        description=(
            "member: may submit to the subtree's leaves; manager: may also re-weight the budget's "
            "children, grant and revoke roles in it and bind groups to its leaves (design 2.1). "
            "The api checks it on every request. Stated by the api (or an admin)."
        )
    )
    granted_by: Identifier = Field(
        description=(
            "The user (a manager of the budget, or an admin) who granted it. Informational. "
            "Stated by the api (or an admin)."
        )
    )


class MembershipRevoked(EventData):
    event_type: ClassVar[str] = "fairshare.budget.membership_revoked.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "budget"

    budget: BudgetPath = Field(
        description=(
            "The budget the role was held on; the record's subject. Stated by the api (or an "
            "admin)."
        )
    )
    user: Identifier = Field(
        description="The user who loses the role. Stated by the api (or an admin)."
    )
    role: Role = Field(
        description=(
            "The role taken back (member or manager); other roles the user holds stay. Stated by "
            "the api (or an admin)."
        )
    )
    revoked_by: Identifier = Field(
        description=(
            "The user (a manager of the budget, or an admin) who revoked it. Informational. "
            "Stated by the api (or an admin)."
        )
    )


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

    budget: BudgetPath = Field(
        description=(
            "A leaf budget, the record's subject: the budget the group's work may charge "
            "(group_bound) or may no longer charge (group_unbound). Stated by the api (or an "
            "admin)."
        )
    )
    cluster: Identifier = Field(
        description=(
            "The cluster whose group this is (a namespace or a Slurm account is one cluster's): "
            "that cluster's agent picks the budget of the group's native work by the bindings "
            "(projections.bindings). Stated by the api (or an admin)."
        )
    )
    kind: GroupKind = Field(
        default=KUBERNETES_NAMESPACE,
        description=(
            "The kind of group: kubernetes-namespace (the default, so facts written before the "
            "field read as a namespace's) or slurm-account; selects the check of group's name. "
            "Stated by the api (or an admin)."
        ),
    )
    group: Identifier = Field(
        description=(
            "The group's name in its cluster: a namespace's name (a DNS-1123 label) or a Slurm "
            "account's name as Slurm stores it (lower case). Stated by the api (or an admin)."
        )
    )

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

    default: bool = Field(
        default=False,
        description=(
            "Whether the budget becomes the group's default, charged by its work that names no "
            "budget (a Slurm account's binding always is); a later default replaces the earlier "
            "one, which stays bound. Restating a binding restates it. Stated by the api (or an "
            "admin)."
        ),
    )
    bound_by: Identifier = Field(
        description=(
            "The user (a manager of the budget, or an admin) who bound the group. Informational. "
            "Stated by the api (or an admin)."
        )
    )


class GroupUnbound(_GroupBinding):
    """The group may no longer charge ``budget`` (if it was its default, it has none now)."""

    event_type: ClassVar[str] = "fairshare.budget.group_unbound.v1"

    unbound_by: Identifier = Field(
        description=(
            "The user (a manager of the budget, or an admin) who unbound the group. "
            "Informational. Stated by the api (or an admin)."
        )
    )
