"""Writes of ``/budgets/{budget}/namespaces`` and ``/budgets/{budget}/accounts``: bind a group
outside Fairshare (a Kubernetes namespace, a Slurm account) of a cluster to a leaf budget,
unbind it. One path for every kind of group (:func:`bind_group`, :func:`unbind_group`), each
kind with its own answer. A manager of the budget (or above) or an admin: the binding is what
lets a group's work charge the budget (``projections.bindings``), so it is the budget's
manager's to give."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from events.models import GroupBound, GroupUnbound
from events.models.budgets import KUBERNETES_NAMESPACE, SLURM_ACCOUNT, GroupKind, group_name_error
from projections.live_state import LiveState
from services.api import models as m
from services.api.application import Application, Result
from services.api.auth import Principal
from services.api.errors import Conflict, Invalid
from services.api.writes.budgets import accepted_on, allowed_on
from services.api.writes.skeleton import Publish, Unchanged, write

#: A kind's answer to a bind or unbind.
C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class GroupChange:
    """A binding after a bind or unbind, whatever the kind of group."""

    budget: str
    cluster: str
    group: str
    #: After a bind: whether it is the group's default now; after an unbind: false.
    default: bool
    #: False after a bind: it already was so; after an unbind: it was not bound.
    changed: bool
    #: After a bind as default: the group's default until now, if another budget.
    replaced_default: str | None = None


@dataclass(frozen=True, slots=True)
class GroupKindWrites(Generic[C]):
    """What the writes say of one kind of group."""

    kind: GroupKind
    #: The group's name in requests, paths and answers: ``namespace``, ``account``.
    field: str
    #: The group in a sentence: "a namespace".
    noun: str
    #: The kind's answer.
    answer: Callable[[GroupChange], C]


def _namespace_change(change: GroupChange) -> m.NamespaceBindingChange:
    return m.NamespaceBindingChange(
        budget=change.budget,
        cluster=change.cluster,
        namespace=change.group,
        default=change.default,
        changed=change.changed,
        replaced_default=change.replaced_default,
    )


def _account_change(change: GroupChange) -> m.AccountBindingChange:
    return m.AccountBindingChange(
        budget=change.budget,
        cluster=change.cluster,
        account=change.group,
        default=change.default,
        changed=change.changed,
        replaced_default=change.replaced_default,
    )


NAMESPACES = GroupKindWrites(KUBERNETES_NAMESPACE, "namespace", "a namespace", _namespace_change)
ACCOUNTS = GroupKindWrites(SLURM_ACCOUNT, "account", "a Slurm account", _account_change)


def bind_namespace(
    app: Application, who: Principal, budget: str, body: m.NamespaceBindRequest
) -> Result[m.NamespaceBindingAnswer]:
    """Bind ``body.namespace`` of ``body.cluster`` to the open leaf ``budget`` (as its default
    with ``body.default``). UNCHANGED if it already is, with the same ``default``."""
    return bind_group(app, who, budget, NAMESPACES, body.cluster, body.namespace, body.default)


def unbind_namespace(
    app: Application, who: Principal, budget: str, cluster: str, namespace: str
) -> Result[m.NamespaceBindingAnswer]:
    """Take ``budget`` from ``namespace`` of ``cluster``. UNCHANGED if it was not bound."""
    return unbind_group(app, who, budget, NAMESPACES, cluster, namespace)


def bind_account(
    app: Application, who: Principal, budget: str, body: m.AccountBindRequest
) -> Result[m.AccountBindingAnswer]:
    """Bind Slurm account ``body.account`` of ``body.cluster`` to the open leaf ``budget``,
    always as its default: an account's work names no budget, so it charges one, the one it
    was bound to last (an earlier one is replaced). UNCHANGED if it already is."""
    return bind_group(app, who, budget, ACCOUNTS, body.cluster, body.account, True)


def unbind_account(
    app: Application, who: Principal, budget: str, cluster: str, account: str
) -> Result[m.AccountBindingAnswer]:
    """Take ``budget`` from Slurm ``account`` of ``cluster``. UNCHANGED if it was not bound."""
    return unbind_group(app, who, budget, ACCOUNTS, cluster, account)


def bind_group(
    app: Application,
    who: Principal,
    budget: str,
    of: GroupKindWrites[C],
    cluster: str,
    group: str,
    default: bool,
) -> Result[C | m.BudgetAccepted]:
    """Bind ``group`` (of kind ``of``) of ``cluster`` to the open leaf ``budget``. UNCHANGED
    if it already is, with the same ``default``."""

    def check(state: LiveState) -> Unchanged[C | m.BudgetAccepted] | Publish[C | m.BudgetAccepted]:
        allowed_on(state, who, budget)
        node = state.tree.nodes[budget]
        if not node.is_leaf:
            raise Invalid(
                "budget",
                f"{budget!r} is not a leaf (it has {', '.join(node.children)}): {of.noun} "
                "charges a leaf budget; bind it to one of its children",
                location="path",
                user=who.user,
            )
        for ancestor in state.tree.ancestors(budget):
            if not state.tree.nodes[ancestor].open_at(app.clock()):
                closed = "" if ancestor == budget else f" ({ancestor!r} was closed)"
                raise Conflict(f"budget {budget!r} is closed{closed}", user=who.user)
        bindings = state.bindings
        bound = {b.budget: b for b in bindings.of_group(cluster, group, of.kind)}
        was_default = bindings.default_of(cluster, group, of.kind)
        current = bound.get(budget)
        if current is not None and current.default == default:
            return Unchanged(of.answer(GroupChange(budget, cluster, group, default, False)))
        replaced = was_default if default and was_default not in (None, budget) else None
        data = GroupBound(
            budget=budget,
            cluster=cluster,
            kind=of.kind,
            group=group,
            default=default,
            bound_by=who.user,
        )
        answer = of.answer(GroupChange(budget, cluster, group, default, True, replaced))
        return Publish(data, lambda _: answer)

    return write(app, who, check, accepted_on(budget))


def unbind_group(
    app: Application,
    who: Principal,
    budget: str,
    of: GroupKindWrites[C],
    cluster: str,
    group: str,
) -> Result[C | m.BudgetAccepted]:
    """Take ``budget`` from ``group`` (of kind ``of``) of ``cluster``. UNCHANGED if it was
    not bound."""
    error = group_name_error(of.kind, group)
    if error is not None:
        raise Invalid(of.field, error, location="path", user=who.user)

    def check(state: LiveState) -> Unchanged[C | m.BudgetAccepted] | Publish[C | m.BudgetAccepted]:
        allowed_on(state, who, budget)
        bound = {b.budget for b in state.bindings.of_group(cluster, group, of.kind)}
        if budget not in bound:
            return Unchanged(of.answer(GroupChange(budget, cluster, group, False, False)))
        data = GroupUnbound(
            budget=budget, cluster=cluster, kind=of.kind, group=group, unbound_by=who.user
        )
        return Publish(data, lambda _: of.answer(GroupChange(budget, cluster, group, False, True)))

    return write(app, who, check, accepted_on(budget))
