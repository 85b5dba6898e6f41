"""Budgets are created and closed, and memberships revoked, through the API and the CLI: by
managers of the parent (top-level: admins) and of the budget, as docs/design.md says; every
reference must exist, and nothing refused is published."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_api import ADMIN, ANA, BO, CHEN, World, build_world
from tests.unit.test_client import run


@pytest.fixture
def world() -> World:
    return build_world()


def _types(world: World) -> list[str]:
    return [r.type.removeprefix("fairshare.") for r in world.records()]


def test_a_manager_creates_a_budget_under_their_subtree(world: World) -> None:
    body = {"budget": "lab/c", "weight": 2.0, "pool_weights": {"p": 3.0}, "description": "audio"}
    created = world.client.post("/budgets", json=body, headers=CHEN)
    assert created.status_code == 201, created.text
    assert created.json() == {
        "budget": "lab/c",
        "parent": "lab",
        "leaf": True,
        "closed": False,
        "weight": 2.0,
        "pool_weights": {"p": 3.0},
        "changed": True,
    }
    [record] = world.records()
    assert (record.data.budget, record.data.created_by) == ("lab/c", "chen")
    again = world.client.post("/budgets", json=body, headers=CHEN)
    assert again.status_code == 200
    assert again.json()["changed"] is False
    other = world.client.post("/budgets", json={**body, "weight": 5.0}, headers=CHEN)
    assert other.status_code == 409
    assert "PUT /budgets/lab/c/weight" in other.json()["detail"]
    assert len(world.records()) == 1
    shares = {b["budget"]: b for b in world.client.get("/budgets", headers=ANA).json()["budgets"]}
    assert shares["lab/c"]["pools"]["p"]["share"] == pytest.approx(0.6)  # 3 of 1 + 1 + 3


@pytest.mark.parametrize(
    ("headers", "body", "code", "needle"),
    [
        (CHEN, {"budget": "team"}, 403, "only an admin"),
        (BO, {"budget": "lab/x"}, 403, "bo is not a manager of lab"),
        (CHEN, {"budget": "lab/zz/x"}, 404, "unknown budget 'lab/zz'"),
        (CHEN, {"budget": "lab/a/x"}, 409, "lab/a funds work that has not ended (pa1"),
        (CHEN, {"budget": "lab/a", "weight": 2.0}, 409, "exists with other weights"),
    ],
)
def test_refused_creations_publish_nothing(
    world: World, headers: dict[str, str], body: dict[str, Any], code: int, needle: str
) -> None:
    response = world.client.post("/budgets", json=body, headers=headers)
    assert response.status_code == code, response.text
    assert needle in response.json()["detail"]
    assert world.records() == []


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"budget": "lab/c", "pool_weights": {"q": 2.0}}, ["body", "pool_weights", "q"]),
        ({"budget": "lab/c", "weight": 0}, ["body", "weight"]),
        ({"budget": "lab//c"}, ["body", "budget"]),
        ({"budget": "lab/c", "owner": "chen"}, ["body", "owner"]),
    ],
)
def test_invalid_creations_name_the_field(
    world: World, body: dict[str, Any], loc: list[str]
) -> None:
    response = world.client.post("/budgets", json=body, headers=ADMIN)
    assert response.status_code == 422, response.text
    assert loc in [error["loc"] for error in response.json()["detail"]]
    assert world.records() == []


def test_an_admin_creates_a_top_level_budget(world: World) -> None:
    response = world.client.post("/budgets", json={"budget": "team"}, headers=ADMIN)
    assert response.status_code == 201, response.text
    assert response.json()["parent"] is None


def test_closing_a_budget_stops_new_work(world: World) -> None:
    refused = world.client.post("/budgets/lab/b/close", json={"reason": "done"}, headers=BO)
    assert refused.status_code == 403
    assert "not a manager of lab" in refused.json()["detail"]
    assert world.client.post("/budgets/lab/zz/close", headers=CHEN).status_code == 404
    assert world.records() == []
    closed = world.client.post("/budgets/lab/b/close", json={"reason": "grant over"}, headers=CHEN)
    assert closed.status_code == 200, closed.text
    assert (closed.json()["closed"], closed.json()["changed"]) == (True, True)
    [record] = world.records()
    assert (record.data.budget, record.data.closed_by, record.data.reason) == (
        "lab/b",
        "chen",
        "grant over",
    )
    again = world.client.post("/budgets/lab/b/close", headers=CHEN)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    submit = {"workload_id": "late", "budget": "lab/b", "pools": ["p"], "gpus": 1}
    late = world.client.post("/workloads", json={**submit, "min_runtime_s": 0}, headers=BO)
    assert late.status_code == 409
    assert "closed" in late.json()["detail"]
    reuse = world.client.post("/budgets", json={"budget": "lab/b"}, headers=CHEN)
    assert reuse.status_code == 409
    assert "never reused" in reuse.json()["detail"]
    assert len(world.records()) == 1


def test_a_manager_revokes_a_membership(world: World) -> None:
    assert world.client.delete("/budgets/lab/b/members/bo", headers=ANA).status_code == 403
    assert world.client.delete("/budgets/lab/zz/members/bo", headers=CHEN).status_code == 404
    bad_user = world.client.delete("/budgets/lab/b/members/b%20o", headers=CHEN)
    assert bad_user.status_code == 422
    bad_role = world.client.delete("/budgets/lab/b/members/bo?role=owner", headers=CHEN)
    assert bad_role.status_code == 422
    assert world.records() == []
    done = world.client.delete("/budgets/lab/b/members/bo", headers=CHEN)
    assert done.status_code == 200, done.text
    assert done.json() == {
        "budget": "lab/b",
        "user": "bo",
        "role": "member",
        "changed": True,
        "still_held_on": None,
    }
    [record] = world.records()
    assert (record.data.user, record.data.role, record.data.revoked_by) == ("bo", "member", "chen")
    submit = {"workload_id": "j", "budget": "lab/b", "pools": ["p"], "gpus": 1, "min_runtime_s": 0}
    assert world.client.post("/workloads", json=submit, headers=BO).status_code == 403
    again = world.client.delete("/budgets/lab/b/members/bo", headers=CHEN)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    # chen manages lab: revoking the role on lab/a changes nothing, and says where it is held
    above = world.client.delete("/budgets/lab/a/members/chen?role=manager", headers=ADMIN)
    assert above.json()["changed"] is False
    assert above.json()["still_held_on"] == "lab"
    assert len(world.records()) == 1


def test_the_cli_creates_closes_and_revokes(world: World) -> None:
    code, out, err = run(
        world, "budgets", "create", "lab/c", "--weight", "2", "--pool-weight", "p=3",
        token="chen-token",
    )  # fmt: skip
    assert code == 0, err
    assert "lab/c: created (weight 2)" in out
    code, _, err = run(world, "budgets", "create", "team", token="chen-token")
    assert code == 1
    assert "only an admin" in err
    code, out, err = run(
        world, "budgets", "close", "lab/c", "--reason", "moved", token="chen-token"
    )
    assert code == 0, err
    assert "lab/c: closed" in out
    code, out, err = run(world, "budgets", "revoke-member", "lab/b", "bo", token="chen-token")
    assert code == 0, err
    assert "bo: member of lab/b revoked" in out
    code, out, _ = run(
        world, "budgets", "revoke-member", "lab/a", "chen", "--role", "manager", token="admin-token"
    )
    assert "not held there; still manager through lab" in out
    assert sorted(_types(world)) == [
        "budget.closed.v1",
        "budget.created.v1",
        "budget.membership_revoked.v1",
    ]
