"""Kubernetes namespaces are bound to budgets through the API and the CLI: by a manager of the
budget (or above) or an admin, to an open leaf, with names Kubernetes accepts; nothing refused
is published (docs/security.md: the binding is what stops a team charging another team's
budget from its manifests)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.models import MembershipGranted
from projections.bindings import Charge, namespace_budget
from tests.unit.test_api import ADMIN, ANA, BO, CHEN, NOW, World, build_world
from tests.unit.test_client import run


@pytest.fixture
def world() -> World:
    return build_world()


def _bind(world: World, budget: str, headers: dict[str, str], **body: Any) -> Any:
    payload = {"cluster": "k1", "namespace": "ml", **body}
    return world.client.post(f"/budgets/{budget}/namespaces", json=payload, headers=headers)


def test_a_manager_binds_a_namespace_and_everyone_reads_it(world: World) -> None:
    done = _bind(world, "lab/a", CHEN, default=True)
    assert done.status_code == 201, done.text
    assert done.json() == {
        "budget": "lab/a",
        "cluster": "k1",
        "namespace": "ml",
        "default": True,
        "changed": True,
        "replaced_default": None,
    }
    [record] = world.records()
    assert record.type == "fairshare.budget.group_bound.v1"
    assert (record.data.group, record.data.bound_by, record.subject) == ("ml", "chen", "lab/a")
    again = _bind(world, "lab/a", CHEN, default=True)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    assert len(world.records()) == 1
    # a later default replaces the earlier one, and says so
    replaced = _bind(world, "lab/b", ADMIN, default=True)
    assert replaced.status_code == 201, replaced.text
    assert replaced.json()["replaced_default"] == "lab/a"
    listed = world.client.get("/namespaces", headers=ANA)
    assert listed.status_code == 200
    rows = [
        (b["budget"], b["namespace"], b["default"], b["counts"]) for b in listed.json()["bindings"]
    ]
    assert rows == [("lab/a", "ml", False, True), ("lab/b", "ml", True, True)]
    assert world.client.get("/namespaces?cluster=k2", headers=ANA).json()["bindings"] == []
    detail = world.client.get("/budgets/lab/b", headers=BO).json()
    assert [(n["cluster"], n["namespace"]) for n in detail["namespaces"]] == [("k1", "ml")]
    with world.view.read() as state:
        assert namespace_budget(state.bindings, state.tree, "k1", "ml", None) == Charge(
            "lab/b", by_default=True
        )


def test_a_manager_unbinds(world: World) -> None:
    _bind(world, "lab/a", CHEN)
    assert world.client.delete("/budgets/lab/a/namespaces/k1/ml", headers=ANA).status_code == 403
    done = world.client.delete("/budgets/lab/a/namespaces/k1/ml", headers=CHEN)
    assert done.status_code == 200, done.text
    assert done.json()["changed"] is True
    assert world.records()[-1].type == "fairshare.budget.group_unbound.v1"
    again = world.client.delete("/budgets/lab/a/namespaces/k1/ml", headers=CHEN)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    assert len(world.records()) == 2
    bad = world.client.delete("/budgets/lab/a/namespaces/k1/ML", headers=CHEN)
    assert bad.status_code == 422
    assert "DNS-1123" in json.dumps(bad.json())
    assert world.client.get("/namespaces", headers=ANA).json()["bindings"] == []


def test_a_member_cannot_bind_nor_can_a_manager_of_another_budget(world: World) -> None:
    member = _bind(world, "lab/a", ANA)  # ana is a member of lab/a
    assert member.status_code == 403
    assert "ana is not a manager of lab/a" in member.json()["detail"]
    world.fact(
        MembershipGranted(budget="lab/b", user="bo", role="manager", granted_by="admin"), NOW
    )
    assert _bind(world, "lab/b", BO).status_code == 201  # bo manages lab/b ...
    other = _bind(world, "lab/a", BO, namespace="web")  # ... not lab/a
    assert other.status_code == 403
    assert "bo is not a manager of lab/a" in other.json()["detail"]
    assert [r.data.budget for r in world.records()] == ["lab/b"]


@pytest.mark.parametrize(
    ("budget", "body", "code", "needle"),
    [
        ("lab", {}, 422, "'lab' is not a leaf"),
        ("lab/zz", {}, 404, "unknown budget 'lab/zz'"),
        ("lab/a", {"namespace": "ML"}, 422, "DNS-1123"),
        ("lab/a", {"namespace": "m" * 64}, 422, "at most 63"),
        ("lab/a", {"cluster": "k 1"}, 422, "cluster"),
        ("lab/a", {"default": "yes"}, 422, "default"),
    ],
)
def test_refused_bindings_publish_nothing(
    world: World, budget: str, body: dict[str, Any], code: int, needle: str
) -> None:
    response = _bind(world, budget, ADMIN, **body)
    assert response.status_code == code, response.text
    assert needle in json.dumps(response.json())
    assert world.records() == []


def test_a_closed_budget_takes_no_binding_and_its_bindings_stop_counting(world: World) -> None:
    assert _bind(world, "lab/a", CHEN, default=True).status_code == 201
    assert world.client.post("/budgets/lab/a/close", headers=CHEN).status_code == 200
    refused = _bind(world, "lab/a", CHEN, namespace="web")
    assert refused.status_code == 409
    assert "budget 'lab/a' is closed" in refused.json()["detail"]
    [row] = world.client.get("/namespaces", headers=ANA).json()["bindings"]
    assert (row["budget"], row["counts"]) == ("lab/a", False)


def test_the_cli_binds_lists_and_unbinds(world: World) -> None:
    code, out, err = run(
        world, "budgets", "bind-namespace", "lab/a", "--cluster", "k1", "--namespace", "ml",
        "--default", token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "k1/ml -> lab/a (default)" in out
    code, out, err = run(
        world, "budgets", "bind-namespace", "lab/b", "--cluster", "k1", "--namespace", "ml",
        "--default", token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "replaces default lab/a" in out
    code, _, err = run(
        world, "budgets", "bind-namespace", "lab/a", "--cluster", "k1", "--namespace", "web"
    )
    assert code == 1
    assert "ana is not a manager of lab/a" in err
    code, out, err = run(world, "budgets", "namespaces")
    assert code == 0, err
    assert "lab/a" in out
    assert "lab/b" in out
    assert "yes" in out
    code, out, err = run(world, "budgets", "namespaces", "--cluster", "k1", "--json")
    assert code == 0, err
    rows = json.loads(out)["bindings"]
    assert [(b["budget"], b["default"]) for b in rows] == [("lab/a", False), ("lab/b", True)]
    code, out, err = run(
        world, "budgets", "unbind-namespace", "lab/a", "--cluster", "k1", "--namespace", "ml",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "k1/ml -> lab/a: unbound" in out
    types = [r.type.removeprefix("fairshare.") for r in world.records()]
    assert types == ["budget.group_bound.v1", "budget.group_bound.v1", "budget.group_unbound.v1"]
