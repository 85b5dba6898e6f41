"""Which groups outside Fairshare may charge which budgets: the bindings, and the one rule
that picks the budget a group's work is charged to.

A budget's manager binds a group (a Kubernetes namespace of one cluster, or a Slurm account
of one cluster: its ``kind``) to a leaf budget (``events.models.budgets.GroupBound``),
optionally as the group's default. Work of the group names its budget (a Kubernetes Job's or
pod's ``fairshare.dev/budget`` label) or gets the default; a budget the group is not bound to
is refused, so a team cannot charge another team's budget from its own manifests. A Slurm
account's work (``sbatch --account=vision``) names no budget: it charges the account's
default, and binding an account always makes the budget its default (one account, one
budget). One rule decides it for every kind, :func:`group_budget`.

The rules, decided here once:

* one group may be bound to several budgets; it has at most one default: a later default
  replaces the earlier one (the earlier budget stays bound, not default);
* stating a binding again restates whether it is the default; unbinding the default leaves
  the group with no default (the earlier one does not come back);
* a binding to a budget that is closed (or under a closed budget), or that has since become
  a parent, no longer counts: work naming it is refused, and so is work falling to such a
  default. The binding stays in the fold (a closed budget's history stays in the log).

Pure: no I/O, no clock; the tree it is asked with is the live state's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from events.models import EventData, GroupBound, GroupUnbound
from events.models.budgets import KUBERNETES_NAMESPACE, SLURM_ACCOUNT, group_name_error
from projections.budget_tree import BudgetTree, BudgetTreeError, MissingBudgetError

#: What a budget label may hold: a budget path, or (Kubernetes label values cannot hold '/')
#: the same path with each '/' written as '.'.
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)*$")
_MAX_LABEL = 512


@dataclass(frozen=True, slots=True)
class Binding:
    """One group bound to one budget, as last stated."""

    kind: str
    cluster: str
    group: str
    budget: str
    default: bool
    bound_by: str
    #: When it was (last) stated, epoch seconds.
    bound_at: float


@dataclass(slots=True)
class _Group:
    #: Bound budgets, by path.
    budgets: dict[str, Binding] = field(default_factory=dict)
    default: str | None = None


class GroupBindings:
    """The bindings in force: a fold over :class:`GroupBound` and :class:`GroupUnbound`."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, str], _Group] = {}

    def apply(self, data: EventData, at: float, tree: BudgetTree) -> None:
        """Fold one binding fact in at ``at``. Raises MissingBudgetError for a budget the tree
        has not seen (it may come later) and BudgetTreeError for a parent or closed one."""
        if isinstance(data, GroupBound):
            tree.require_leaf(data.budget, at)
            key = (data.kind, data.cluster, data.group)
            group = self._groups.setdefault(key, _Group())
            if group.default is not None and group.default in group.budgets:
                previous = group.budgets[group.default]
                if data.default and previous.budget != data.budget:
                    group.budgets[group.default] = _as_default(previous, False)
            group.budgets[data.budget] = Binding(
                data.kind,
                data.cluster,
                data.group,
                data.budget,
                data.default,
                data.bound_by,
                at,
            )
            if data.default:
                group.default = data.budget
            elif group.default == data.budget:
                group.default = None
        elif isinstance(data, GroupUnbound):
            if data.budget not in tree.nodes:  # it may come later
                raise MissingBudgetError(f"budget: unknown budget {data.budget!r}")
            key = (data.kind, data.cluster, data.group)
            entry = self._groups.get(key)
            if entry is None or data.budget not in entry.budgets:
                raise BudgetTreeError(
                    f"group: {data.group!r} of cluster {data.cluster!r} is not bound to "
                    f"{data.budget!r}"
                )
            del entry.budgets[data.budget]
            if entry.default == data.budget:
                entry.default = None
            if not entry.budgets:
                del self._groups[key]

    # -- reading ---------------------------------------------------------------------------
    def of_group(self, cluster: str, group: str, kind: str = KUBERNETES_NAMESPACE) -> list[Binding]:
        entry = self._groups.get((kind, cluster, group))
        return [] if entry is None else sorted(entry.budgets.values(), key=lambda b: b.budget)

    def default_of(self, cluster: str, group: str, kind: str = KUBERNETES_NAMESPACE) -> str | None:
        entry = self._groups.get((kind, cluster, group))
        return None if entry is None else entry.default

    def all(self, cluster: str | None = None, kind: str | None = None) -> list[Binding]:
        """Every binding (of one cluster, of one kind), by cluster, group and budget."""
        return [
            binding
            for (k, c, _), entry in sorted(self._groups.items())
            if (cluster is None or c == cluster) and (kind is None or k == kind)
            for binding in sorted(entry.budgets.values(), key=lambda b: b.budget)
        ]

    def of_budget(self, budget: str) -> list[Binding]:
        return [binding for binding in self.all() if binding.budget == budget]


def _as_default(binding: Binding, default: bool) -> Binding:
    return Binding(
        binding.kind,
        binding.cluster,
        binding.group,
        binding.budget,
        default,
        binding.bound_by,
        binding.bound_at,
    )


def counts(tree: BudgetTree, budget: str) -> bool:
    """Whether a binding to ``budget`` counts: an existing, open leaf under open budgets."""
    node = tree.nodes.get(budget)
    if node is None or not budget or not node.is_leaf:
        return False
    return all(tree.nodes[a].closed_at is None for a in tree.ancestors(budget))


@dataclass(frozen=True, slots=True)
class Charge:
    """Charge this budget; ``by_default``: the work named none, the group's default it is."""

    budget: str
    by_default: bool
    ok: Literal[True] = True


@dataclass(frozen=True, slots=True)
class Refusal:
    """The work may not run here; ``reason`` says why in one sentence, ``code`` for machines."""

    code: Literal["malformed", "unbound", "not-bound-to", "no-default", "closed"]
    reason: str
    ok: Literal[False] = False


@dataclass(frozen=True, slots=True)
class _Words:
    """How the rule's sentences speak of a group of one kind and of what its work names."""

    #: The group: "namespace", "Slurm account".
    noun: str
    #: The command that binds one (a refusal of an unbound group names it).
    bind: str
    #: What holds the budget the work names: "the fairshare.dev/budget label".
    label: str
    #: The work names a budget there: "the label names".
    names: str
    #: The work names none: "names no budget (label fairshare.dev/budget)".
    names_none: str
    #: After "<group> has no default budget", what it may do: "; it may charge {bound}".
    no_default: str


_WORDS: dict[str, _Words] = {
    KUBERNETES_NAMESPACE: _Words(
        noun="namespace",
        bind="fairshare budgets bind-namespace",
        label="the fairshare.dev/budget label",
        names="the label names",
        names_none="names no budget (label fairshare.dev/budget)",
        no_default="; it may charge {bound}",
    ),
    SLURM_ACCOUNT: _Words(
        noun="Slurm account",
        bind="fairshare budgets bind-account",
        label="the budget",
        names="the work names",
        names_none="names no budget (sbatch --account carries none)",
        no_default=(
            " (its default was unbound; it is still bound to {bound}): a budget's manager must "
            "bind it again (fairshare budgets bind-account)"
        ),
    ),
}


def group_budget(
    bindings: GroupBindings,
    tree: BudgetTree,
    kind: str,
    cluster: str,
    group: str,
    label: str | None,
) -> Charge | Refusal:
    """The budget to charge for work of ``group`` (a group of ``kind``, a
    :data:`~events.models.budgets.GroupKind`) on ``cluster`` that names budget ``label``
    (None: names none), or why it is refused: the one rule of every kind of group.

    A Kubernetes namespace's work names its budget by its ``fairshare.dev/budget`` label:
    the path of a budget the namespace is bound to (``physics/ml``) or, as label values cannot
    hold '/', the path with each '/' as '.' (``physics.ml``). Work naming none is charged to
    the group's default budget. A Slurm account's work names none (``sbatch --account``
    carries no budget): it is charged to the account's default budget, the one it was bound
    to last (``fairshare budgets bind-account``)."""
    words = _WORDS.get(kind)
    if words is None:
        known = ", ".join(_WORDS)
        return Refusal("malformed", f"{kind!r} is not a kind of group (known: {known}).")
    where = f"{words.noun} {group!r} of cluster {cluster!r}"
    name_error = group_name_error(kind, group)
    if name_error is not None:
        return Refusal("malformed", f"{name_error}.")
    bound = bindings.of_group(cluster, group, kind)
    if label is not None and (len(label) > _MAX_LABEL or not _LABEL.match(label)):
        return Refusal(
            "malformed",
            f"{words.label} {label!r} is not a budget path "
            "(segments of letters, digits, '_', '.', '-', separated by '/' or '.').",
        )
    if not bound:
        return Refusal(
            "unbound",
            f"{where} is bound to no budget: a budget's manager must bind it ({words.bind}).",
        )
    if label is None:
        default = bindings.default_of(cluster, group, kind)
        if default is None:
            tail = words.no_default.format(bound=_names(bound))
            return Refusal(
                "no-default",
                f"the work {words.names_none} and {where} has no default budget{tail}.",
            )
        if not counts(tree, default):
            return Refusal(
                "closed", f"{where}'s default budget {default!r} {_why_not(tree, default)}."
            )
        return Charge(default, by_default=True)
    matches = [b.budget for b in bound if b.budget == label]
    if not matches:
        matches = [b.budget for b in bound if b.budget.replace("/", ".") == label]
    if not matches:
        return Refusal(
            "not-bound-to",
            f"{words.names} budget {label!r}, which {where} is not bound to; it may charge "
            f"{_names(bound)}.",
        )
    if len(matches) > 1:
        return Refusal(
            "malformed",
            f"{words.label} {label!r} could name any of {', '.join(matches)}; write the "
            "budget's path with '/' (in an annotation) or bind only one of them.",
        )
    budget = matches[0]
    if not counts(tree, budget):
        return Refusal("closed", f"budget {budget!r} {_why_not(tree, budget)}.")
    return Charge(budget, by_default=False)


def namespace_budget(
    bindings: GroupBindings, tree: BudgetTree, cluster: str, namespace: str, label: str | None
) -> Charge | Refusal:
    """:func:`group_budget` for Kubernetes ``namespace`` and its ``fairshare.dev/budget``
    label."""
    return group_budget(bindings, tree, KUBERNETES_NAMESPACE, cluster, namespace, label)


def _names(bound: list[Binding]) -> str:
    return ", ".join(b.budget for b in bound)


def _why_not(tree: BudgetTree, budget: str) -> str:
    node = tree.nodes.get(budget)
    if node is not None and node.is_leaf:
        closed = next(a for a in tree.ancestors(budget) if tree.nodes[a].closed_at is not None)
        return "is closed" if closed == budget else f"is closed ({closed!r} was closed)"
    return "is no longer a leaf budget (work is charged to leaves)"
