"""Slurm accounts are the second kind of group outside Fairshare (docs/design.md 2.1): a
budget's manager binds an account of a cluster to a leaf budget, always as its default (an
account's work, ``sbatch --account=vision``, names no budget: it charges its one budget), and
the one rule, ``group_budget``, decides its work's budget as it does a namespace's. Checked
for the rule, the fact, the API (``/budgets/{budget}/accounts``, ``GET /accounts``) and the CLI
(``fairshare budgets bind-account|unbind-account|accounts``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from events.envelope import new_event
from events.models import BudgetClosed, BudgetCreated, GroupBound, GroupUnbound, MembershipGranted
from events.models.budgets import KUBERNETES_NAMESPACE, SLURM_ACCOUNT, group_name_error
from events.registry import default_registry
from projections.bindings import Charge, GroupBindings, Refusal, group_budget, namespace_budget
from projections.budget_tree import BudgetTree
from tests.unit.test_api import ADMIN, ANA, BO, CHEN, NOW, World, build_world
from tests.unit.test_client import run

T0 = 1_800_000_000.0


def _tree(*paths: str) -> BudgetTree:
    tree = BudgetTree()
    for path in paths:
        tree.apply(BudgetCreated(budget=path, created_by="admin"), T0)
    return tree


def account(budget: str, name: str = "vision", cluster: str = "hpc") -> GroupBound:
    return GroupBound(
        budget=budget, cluster=cluster, kind=SLURM_ACCOUNT, group=name, default=True,
        bound_by="chen",
    )  # fmt: skip


# -- the rule ---------------------------------------------------------------------------------
def test_an_account_charges_its_default_budget() -> None:
    tree = _tree("lab", "lab/vision", "lab/audio")
    b = GroupBindings()
    b.apply(account("lab/vision"), T0, tree)
    assert group_budget(b, tree, SLURM_ACCOUNT, "hpc", "vision", None) == Charge(
        "lab/vision", by_default=True
    )
    # binding it to another budget replaces the default: the account charges that one now
    b.apply(account("lab/audio"), T0 + 1, tree)
    assert group_budget(b, tree, SLURM_ACCOUNT, "hpc", "vision", None) == Charge(
        "lab/audio", by_default=True
    )
    assert b.default_of("hpc", "vision", SLURM_ACCOUNT) == "lab/audio"


def test_kinds_do_not_mix() -> None:
    """A namespace and an account of the same name on the same cluster are two groups."""
    tree = _tree("lab", "lab/vision", "lab/audio")
    b = GroupBindings()
    b.apply(account("lab/vision", cluster="k1"), T0, tree)
    namespace = GroupBound(
        budget="lab/audio", cluster="k1", group="vision", default=True, bound_by="chen"
    )
    b.apply(namespace, T0, tree)
    assert group_budget(b, tree, SLURM_ACCOUNT, "k1", "vision", None) == Charge(
        "lab/vision", by_default=True
    )
    assert namespace_budget(b, tree, "k1", "vision", None) == Charge("lab/audio", by_default=True)
    assert group_budget(b, tree, KUBERNETES_NAMESPACE, "k1", "vision", None) == Charge(
        "lab/audio", by_default=True
    )
    assert [x.kind for x in b.all(kind=SLURM_ACCOUNT)] == [SLURM_ACCOUNT]


def test_an_unbound_account_is_refused_naming_the_command_that_binds_it() -> None:
    tree = _tree("lab", "lab/vision")
    b = GroupBindings()
    b.apply(account("lab/vision"), T0, tree)
    for cluster, name in (("hpc", "audio"), ("other", "vision")):
        refused = group_budget(b, tree, SLURM_ACCOUNT, cluster, name, None)
        assert isinstance(refused, Refusal)
        assert refused.code == "unbound"
        assert f"Slurm account {name!r} of cluster {cluster!r} is bound to no budget" in (
            refused.reason
        )
        assert "fairshare budgets bind-account" in refused.reason
        assert "bind-namespace" not in refused.reason
    # a namespace's refusal still names its own command
    refused = namespace_budget(b, tree, "hpc", "vision", None)
    assert isinstance(refused, Refusal)
    assert "namespace 'vision' of cluster 'hpc'" in refused.reason
    assert "fairshare budgets bind-namespace" in refused.reason


def test_an_account_whose_default_was_unbound_is_refused() -> None:
    tree = _tree("lab", "lab/vision", "lab/audio")
    b = GroupBindings()
    b.apply(account("lab/vision"), T0, tree)
    b.apply(account("lab/audio"), T0 + 1, tree)
    unbind = GroupUnbound(
        budget="lab/audio", cluster="hpc", kind=SLURM_ACCOUNT, group="vision", unbound_by="chen"
    )
    b.apply(unbind, T0 + 2, tree)
    refused = group_budget(b, tree, SLURM_ACCOUNT, "hpc", "vision", None)
    assert isinstance(refused, Refusal)
    assert refused.code == "no-default"
    assert "sbatch --account carries none" in refused.reason
    assert "still bound to lab/vision" in refused.reason
    assert "fairshare budgets bind-account" in refused.reason
    assert "fairshare.dev/budget" not in refused.reason


def test_an_account_of_a_closed_budget_is_refused() -> None:
    tree = _tree("lab", "lab/vision")
    b = GroupBindings()
    b.apply(account("lab/vision"), T0, tree)
    tree.apply(BudgetClosed(budget="lab", closed_by="admin"), T0 + 1)
    refused = group_budget(b, tree, SLURM_ACCOUNT, "hpc", "vision", None)
    assert isinstance(refused, Refusal)
    assert refused.code == "closed"
    assert "Slurm account 'vision' of cluster 'hpc''s default budget 'lab/vision'" in (
        refused.reason
    )
    assert "('lab' was closed)" in refused.reason


@pytest.mark.parametrize("name", ["Vision", "_vision", "-vision", ".v", "vi sion", "v" * 65, ""])
def test_a_malformed_account_name_is_refused(name: str) -> None:
    tree = _tree("lab", "lab/vision")
    refused = group_budget(GroupBindings(), tree, SLURM_ACCOUNT, "hpc", name, None)
    assert isinstance(refused, Refusal)
    assert refused.code == "malformed"
    assert "is not a Slurm account name" in refused.reason
    assert refused.reason.endswith(".")


def test_an_unknown_kind_is_refused_not_raised() -> None:
    refused = group_budget(GroupBindings(), _tree("lab"), "lsf-queue", "c", "q", None)
    assert isinstance(refused, Refusal)
    assert (refused.code, refused.ok) == ("malformed", False)
    assert "'lsf-queue' is not a kind of group" in refused.reason


# -- the fact ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vision", "v", "a_b.c-d", "0lab", "v" * 64])
def test_slurm_account_names_as_slurm_stores_them(name: str) -> None:
    assert group_name_error(SLURM_ACCOUNT, name) is None
    assert account("lab/a", name=name).group == name


def test_the_fact_checks_the_account_name_and_round_trips() -> None:
    for name in ("Vision", "_v", "v" * 65, "v/x"):
        with pytest.raises(ValidationError, match="not a Slurm account name"):
            account("lab/a", name=name)
    # names a namespace may not have, an account may
    assert group_name_error(KUBERNETES_NAMESPACE, "a_b.c") is not None
    data = account("lab/a", name="a_b.c")
    envelope = new_event(data, source="tests", time=datetime.fromtimestamp(T0, UTC))
    model = default_registry().model_for(envelope.type)
    assert model is GroupBound
    again = model.model_validate_json(orjson.dumps(data.model_dump(mode="json")))
    assert again == data
    assert isinstance(again, GroupBound)
    assert again.kind == SLURM_ACCOUNT


def test_an_old_fact_without_a_kind_reads_as_a_namespace() -> None:
    old = {"budget": "lab/a", "cluster": "k1", "group": "ml", "default": True, "bound_by": "x"}
    assert GroupBound.model_validate(old).kind == KUBERNETES_NAMESPACE
    gone = {"budget": "lab/a", "cluster": "k1", "group": "ml", "unbound_by": "x"}
    assert GroupUnbound.model_validate(gone).kind == KUBERNETES_NAMESPACE


# -- the API ----------------------------------------------------------------------------------
@pytest.fixture
def world() -> World:
    return build_world()


def _bind(world: World, budget: str, headers: dict[str, str], **body: Any) -> Any:
    payload = {"cluster": "hpc", "account": "vision", **body}
    return world.client.post(f"/budgets/{budget}/accounts", json=payload, headers=headers)


def test_a_manager_binds_an_account_and_everyone_reads_it(world: World) -> None:
    done = _bind(world, "lab/a", CHEN)
    assert done.status_code == 201, done.text
    assert done.json() == {
        "budget": "lab/a",
        "cluster": "hpc",
        "account": "vision",
        "default": True,
        "changed": True,
        "replaced_default": None,
    }
    [record] = world.records()
    assert record.type == "fairshare.budget.group_bound.v1"
    assert (record.data.kind, record.data.group, record.data.default) == (
        SLURM_ACCOUNT,
        "vision",
        True,
    )
    assert (record.data.bound_by, record.subject) == ("chen", "lab/a")
    again = _bind(world, "lab/a", CHEN)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    assert len(world.records()) == 1
    # binding it to another budget replaces its default, and says so
    replaced = _bind(world, "lab/b", ADMIN)
    assert replaced.status_code == 201, replaced.text
    assert (replaced.json()["default"], replaced.json()["replaced_default"]) == (True, "lab/a")
    listed = world.client.get("/accounts", headers=ANA)
    assert listed.status_code == 200
    rows = [
        (b["budget"], b["cluster"], b["account"], b["default"], b["counts"], b["bound_by"])
        for b in listed.json()["bindings"]
    ]
    assert rows == [
        ("lab/a", "hpc", "vision", False, True, "chen"),
        ("lab/b", "hpc", "vision", True, True, "admin"),
    ]
    assert world.client.get("/accounts?cluster=k1", headers=ANA).json()["bindings"] == []
    # accounts are not namespaces: GET /namespaces does not list them
    assert world.client.get("/namespaces", headers=ANA).json()["bindings"] == []
    detail = world.client.get("/budgets/lab/b", headers=BO).json()
    assert [(a["cluster"], a["account"]) for a in detail["accounts"]] == [("hpc", "vision")]
    assert detail["namespaces"] == []
    with world.view.read() as state:
        assert group_budget(state.bindings, state.tree, SLURM_ACCOUNT, "hpc", "vision", None) == (
            Charge("lab/b", by_default=True)
        )


def test_the_namespace_endpoints_do_not_see_accounts(world: World) -> None:
    """The same name bound as a namespace and as an account: two bindings, each listed once."""
    assert _bind(world, "lab/a", CHEN).status_code == 201
    payload = {"cluster": "hpc", "namespace": "vision", "default": True}
    ns = world.client.post("/budgets/lab/b/namespaces", json=payload, headers=CHEN)
    assert ns.status_code == 201, ns.text
    assert ns.json()["replaced_default"] is None  # the account's default is not the namespace's
    [n] = world.client.get("/namespaces", headers=ANA).json()["bindings"]
    [a] = world.client.get("/accounts", headers=ANA).json()["bindings"]
    assert (n["budget"], n["namespace"]) == ("lab/b", "vision")
    assert (a["budget"], a["account"]) == ("lab/a", "vision")
    # unbinding the namespace leaves the account bound
    gone = world.client.delete("/budgets/lab/a/namespaces/hpc/vision", headers=CHEN)
    assert (gone.status_code, gone.json()["changed"]) == (200, False)
    assert len(world.client.get("/accounts", headers=ANA).json()["bindings"]) == 1


def test_a_manager_unbinds_an_account(world: World) -> None:
    _bind(world, "lab/a", CHEN)
    assert world.client.delete("/budgets/lab/a/accounts/hpc/vision", headers=ANA).status_code == 403
    done = world.client.delete("/budgets/lab/a/accounts/hpc/vision", headers=CHEN)
    assert done.status_code == 200, done.text
    assert done.json() == {
        "budget": "lab/a",
        "cluster": "hpc",
        "account": "vision",
        "default": False,
        "changed": True,
        "replaced_default": None,
    }
    record = world.records()[-1]
    assert (record.type, record.data.kind) == ("fairshare.budget.group_unbound.v1", SLURM_ACCOUNT)
    again = world.client.delete("/budgets/lab/a/accounts/hpc/vision", headers=CHEN)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    assert len(world.records()) == 2
    bad = world.client.delete("/budgets/lab/a/accounts/hpc/Vision", headers=CHEN)
    assert bad.status_code == 422
    assert "not a Slurm account name" in json.dumps(bad.json())
    unknown = world.client.delete("/budgets/lab/zz/accounts/hpc/vision", headers=CHEN)
    assert unknown.status_code == 404
    assert world.client.get("/accounts", headers=ANA).json()["bindings"] == []


def test_a_member_cannot_bind_an_account_nor_can_a_manager_of_another_budget(
    world: World,
) -> None:
    member = _bind(world, "lab/a", ANA)  # ana is a member of lab/a
    assert member.status_code == 403
    assert "ana is not a manager of lab/a" in member.json()["detail"]
    world.fact(
        MembershipGranted(budget="lab/b", user="bo", role="manager", granted_by="admin"), NOW
    )
    assert _bind(world, "lab/b", BO).status_code == 201  # bo manages lab/b ...
    other = _bind(world, "lab/a", BO, account="audio")  # ... not lab/a
    assert other.status_code == 403
    assert "bo is not a manager of lab/a" in other.json()["detail"]
    assert [r.data.budget for r in world.records()] == ["lab/b"]


@pytest.mark.parametrize(
    ("budget", "body", "code", "needle"),
    [
        ("lab", {}, 422, "'lab' is not a leaf"),
        ("lab/zz", {}, 404, "unknown budget 'lab/zz'"),
        ("lab/a", {"account": "Vision"}, 422, "not a Slurm account name"),
        ("lab/a", {"account": "_vision"}, 422, "not a Slurm account name"),
        ("lab/a", {"account": "v" * 65}, 422, "at most 64"),
        ("lab/a", {"cluster": "h pc"}, 422, "cluster"),
        # an account charges one budget: there is no default to ask for
        ("lab/a", {"default": False}, 422, "default"),
    ],
)
def test_refused_account_bindings_publish_nothing(
    world: World, budget: str, body: dict[str, Any], code: int, needle: str
) -> None:
    response = _bind(world, budget, ADMIN, **body)
    assert response.status_code == code, response.text
    assert needle in json.dumps(response.json())
    assert world.records() == []


def test_a_closed_budget_takes_no_account_and_its_accounts_stop_counting(world: World) -> None:
    assert _bind(world, "lab/a", CHEN).status_code == 201
    assert world.client.post("/budgets/lab/a/close", headers=CHEN).status_code == 200
    refused = _bind(world, "lab/a", CHEN, account="audio")
    assert refused.status_code == 409
    assert "budget 'lab/a' is closed" in refused.json()["detail"]
    [row] = world.client.get("/accounts", headers=ANA).json()["bindings"]
    assert (row["budget"], row["counts"]) == ("lab/a", False)
    with world.view.read() as state:
        decision = group_budget(state.bindings, state.tree, SLURM_ACCOUNT, "hpc", "vision", None)
    assert isinstance(decision, Refusal)
    assert decision.code == "closed"


# -- the CLI ----------------------------------------------------------------------------------
def test_the_cli_binds_lists_and_unbinds_accounts(world: World) -> None:
    code, out, err = run(
        world, "budgets", "bind-account", "lab/a", "--cluster", "hpc", "--account", "vision",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "hpc/vision -> lab/a (default)" in out
    code, out, err = run(
        world, "budgets", "bind-account", "lab/a", "--cluster", "hpc", "--account", "vision",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "already so" in out
    code, out, err = run(
        world, "budgets", "bind-account", "lab/b", "--cluster", "hpc", "--account", "vision",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "replaces default lab/a" in out
    code, _, err = run(
        world, "budgets", "bind-account", "lab/a", "--cluster", "hpc", "--account", "audio"
    )
    assert code == 1
    assert "ana is not a manager of lab/a" in err
    code, _, err = run(
        world, "budgets", "bind-account", "lab/a", "--cluster", "hpc", "--account", "Audio",
        token="chen-token",
    )  # fmt: skip
    assert code == 1
    assert "not a Slurm account name" in err
    code, out, err = run(world, "budgets", "accounts")
    assert code == 0, err
    assert "ACCOUNT" in out
    assert "lab/a" in out
    assert "lab/b" in out
    assert "yes" in out
    code, out, err = run(world, "budgets", "accounts", "--cluster", "hpc", "--json")
    assert code == 0, err
    rows = json.loads(out)["bindings"]
    assert [(b["budget"], b["account"], b["default"]) for b in rows] == [
        ("lab/a", "vision", False),
        ("lab/b", "vision", True),
    ]
    code, out, err = run(world, "budgets", "accounts", "--cluster", "k1", "--json")
    assert code == 0, err
    assert json.loads(out)["bindings"] == []
    code, out, err = run(
        world, "budgets", "unbind-account", "lab/a", "--cluster", "hpc", "--account", "vision",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "hpc/vision -> lab/a: unbound" in out
    code, out, err = run(
        world, "budgets", "unbind-account", "lab/a", "--cluster", "hpc", "--account", "vision",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "hpc/vision -> lab/a: was not bound" in out
    types = [r.type.removeprefix("fairshare.") for r in world.records()]
    assert types == ["budget.group_bound.v1", "budget.group_bound.v1", "budget.group_unbound.v1"]
    assert {r.data.kind for r in world.records()} == {SLURM_ACCOUNT}
