"""Writes of ``/budgets/{budget}/namespaces``: bind a Kubernetes namespace of a cluster to a
leaf budget (optionally as its default), unbind it. A manager of the budget (or above) or an
admin: the binding is what lets a namespace's manifests charge the budget
(``projections.bindings``), so it is the budget's manager's to give."""

from __future__ import annotations

from events.models import GroupBound, GroupUnbound
from events.models.budgets import KUBERNETES_NAMESPACE, group_name_error
from projections.live_state import LiveState
from services.api import models as m
from services.api.application import Application, Result
from services.api.auth import Principal
from services.api.errors import Conflict, Invalid
from services.api.writes.budgets import accepted_on, allowed_on
from services.api.writes.skeleton import Publish, Unchanged, write


def bind_namespace(
    app: Application, who: Principal, budget: str, body: m.NamespaceBindRequest
) -> Result[m.NamespaceBindingAnswer]:
    """Bind ``body.namespace`` of ``body.cluster`` to the open leaf ``budget``. UNCHANGED if
    it already is, with the same ``default``."""

    def check(
        state: LiveState,
    ) -> Unchanged[m.NamespaceBindingAnswer] | Publish[m.NamespaceBindingAnswer]:
        allowed_on(state, who, budget)
        node = state.tree.nodes[budget]
        if not node.is_leaf:
            raise Invalid(
                "budget",
                f"{budget!r} is not a leaf (it has {', '.join(node.children)}): a namespace "
                "charges a leaf budget; bind it to one of its children",
                location="path",
                user=who.user,
            )
        for ancestor in state.tree.ancestors(budget):
            if not state.tree.nodes[ancestor].open_at(app.clock()):
                closed = "" if ancestor == budget else f" ({ancestor!r} was closed)"
                raise Conflict(f"budget {budget!r} is closed{closed}", user=who.user)
        bindings = state.bindings
        bound = {b.budget: b for b in bindings.of_group(body.cluster, body.namespace)}
        default = bindings.default_of(body.cluster, body.namespace)
        current = bound.get(budget)
        if current is not None and current.default == body.default:
            return Unchanged(_change(budget, body.cluster, body.namespace, body.default, False))
        replaced = default if body.default and default not in (None, budget) else None
        data = GroupBound(
            budget=budget,
            cluster=body.cluster,
            kind=KUBERNETES_NAMESPACE,
            group=body.namespace,
            default=body.default,
            bound_by=who.user,
        )
        answer = _change(budget, body.cluster, body.namespace, body.default, True, replaced)
        return Publish(data, lambda _: answer)

    return write(app, who, check, accepted_on(budget))


def unbind_namespace(
    app: Application, who: Principal, budget: str, cluster: str, namespace: str
) -> Result[m.NamespaceBindingAnswer]:
    """Take ``budget`` from ``namespace`` of ``cluster``. UNCHANGED if it was not bound."""
    error = group_name_error(KUBERNETES_NAMESPACE, namespace)
    if error is not None:
        raise Invalid("namespace", error, location="path", user=who.user)

    def check(
        state: LiveState,
    ) -> Unchanged[m.NamespaceBindingAnswer] | Publish[m.NamespaceBindingAnswer]:
        allowed_on(state, who, budget)
        bound = {b.budget for b in state.bindings.of_group(cluster, namespace)}
        if budget not in bound:
            return Unchanged(_change(budget, cluster, namespace, False, False))
        data = GroupUnbound(
            budget=budget,
            cluster=cluster,
            kind=KUBERNETES_NAMESPACE,
            group=namespace,
            unbound_by=who.user,
        )
        return Publish(data, lambda _: _change(budget, cluster, namespace, False, True))

    return write(app, who, check, accepted_on(budget))


def _change(
    budget: str,
    cluster: str,
    namespace: str,
    default: bool,
    changed: bool,
    replaced: str | None = None,
) -> m.NamespaceBindingChange:
    return m.NamespaceBindingChange(
        budget=budget,
        cluster=cluster,
        namespace=namespace,
        default=default,
        changed=changed,
        replaced_default=replaced,
    )
