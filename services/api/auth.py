"""Bearer tokens mapped to users, and the authorisation rules of the API.

A tokens file is JSON: ``{"<token>": {"user": "ana", "admin": false}, ...}``. The rules:

* a user submits only to budgets they are a member of, or manage (role on the budget or on an
  ancestor: roles cover subtrees);
* only a manager of a subtree (``manager`` on the node or an ancestor) re-weights the node's
  children and adds members to it; the top-level budgets are children of the root, which only
  admins manage;
* only admins cordon and uncordon nodes; admins may do everything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from events.types import Identifier
from projections.budget_tree import ROOT, BudgetTree, parent_of


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    user: str
    admin: bool = False


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user: Identifier
    admin: bool = False


class TokenFileError(ValueError):
    """The tokens file is missing, not JSON, or has an invalid entry; the message says which."""


_ENTRIES = TypeAdapter(dict[str, TokenEntry])

#: The demo's users (``fairshare api serve`` without ``--tokens``): never use in production.
DEMO_TOKENS: dict[str, dict[str, Any]] = {
    "admin-token": {"user": "admin", "admin": True},
    "ana-token": {"user": "ana", "admin": False},
    "bo-token": {"user": "bo", "admin": False},
    "chen-token": {"user": "chen", "admin": False},
}


def parse_tokens(document: Mapping[str, Any]) -> dict[str, Principal]:
    try:
        entries = _ENTRIES.validate_python(dict(document))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TokenFileError(f"tokens: {where}: {first['msg']}") from error
    tokens: dict[str, Principal] = {}
    for token, entry in entries.items():
        if len(token) < 8 or token != token.strip():
            raise TokenFileError(f"tokens: a token of {entry.user!r} is shorter than 8 characters")
        tokens[token] = Principal(entry.user, entry.admin)
    return tokens


def load_tokens(path: str | Path) -> dict[str, Principal]:
    """Read a tokens file (see the module docstring); raises TokenFileError when invalid."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise TokenFileError(f"tokens: cannot read {path}: {error}") from error
    except json.JSONDecodeError as error:
        raise TokenFileError(f"tokens: {path} is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise TokenFileError(f"tokens: {path} must hold a JSON object of token -> user")
    return parse_tokens(document)


def default_tokens() -> dict[str, Principal]:
    """The demo's tokens (``admin-token``, ``ana-token``, ``bo-token``, ``chen-token``)."""
    return parse_tokens(DEMO_TOKENS)


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
