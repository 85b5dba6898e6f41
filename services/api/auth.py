"""The authorisation rules of the API, and (re-exported) who a request comes from.

Tokens themselves live in :mod:`services.api.tokens` (hashing, constant-time recognition, the
demo's) and :mod:`services.api.tokens_file` (the file of hashes). The rules:

* a user submits only to budgets they are a member of, or manage (role on the budget or on an
  ancestor: roles cover subtrees);
* only a manager of a subtree (``manager`` on the node or an ancestor) re-weights the node's
  children and adds members to it; the top-level budgets are children of the root, which only
  admins manage;
* only admins cordon and uncordon nodes; admins may do everything;
* a budget's money (its statement and forecast) is seen by whoever holds a role on it or
  above it (a member of lab/vision sees lab/vision's, a manager of lab all of lab's), by
  admins, and by finance tokens (which see every budget's money and may change nothing).
"""

from __future__ import annotations

from projections.budget_tree import ROOT, BudgetTree, parent_of
from services.api.tokens import DEMO_TOKENS, Principal, TokenTable, default_tokens
from services.api.tokens_file import TokenFileError, load_tokens

__all__ = [
    "DEMO_TOKENS",
    "Principal",
    "TokenFileError",
    "TokenTable",
    "default_tokens",
    "load_tokens",
    "may_cancel",
    "may_manage",
    "may_operate_nodes",
    "may_see_money",
    "may_set_weight",
    "may_submit",
]


# -- the rules --------------------------------------------------------------------------------
def may_submit(who: Principal, tree: BudgetTree, budget: str) -> str | None:
    """None if allowed, else the reason for refusing."""
    if who.admin or tree.is_member(who.user, budget, "member"):
        return None
    if tree.is_member(who.user, budget, "manager"):
        return None
    return f"{who.user} is not a member of {budget} (nor of any budget above it)"


def may_manage(who: Principal, tree: BudgetTree, budget: str) -> str | None:
    """Whether ``who`` manages ``budget``'s subtree (adds members to it)."""
    if who.admin or tree.is_member(who.user, budget, "manager"):
        return None
    return f"{who.user} is not a manager of {budget} (nor of any budget above it)"


def may_set_weight(who: Principal, tree: BudgetTree, budget: str) -> str | None:
    """A weight is set by whoever manages the budget's parent."""
    parent = parent_of(budget)
    if who.admin:
        return None
    if parent == ROOT:
        return f"{budget} is a top-level budget: only an admin sets its weight"
    if tree.is_member(who.user, parent, "manager"):
        return None
    return f"{who.user} is not a manager of {parent}, the parent of {budget}"


def may_cancel(who: Principal, tree: BudgetTree, budget: str, submitter: str) -> str | None:
    if who.admin or who.user == submitter or tree.is_member(who.user, budget, "manager"):
        return None
    return f"{who.user} neither submitted this workload nor manages {budget}"


def may_operate_nodes(who: Principal) -> str | None:
    if who.admin:
        return None
    return f"{who.user} is not an admin: only admins cordon and uncordon nodes"


def may_see_money(who: Principal, tree: BudgetTree, budget: str) -> str | None:
    """Whether ``who`` may read ``budget``'s money: a role on it or above it, admin or
    finance. Other teams' bills are theirs and their managers' (a member saw every team's)."""
    if who.admin or who.finance:
        return None
    if tree.is_member(who.user, budget, "member") or tree.is_member(who.user, budget, "manager"):
        return None
    return f"{who.user} holds no role on {budget} (nor above it): its money is not theirs to see"
