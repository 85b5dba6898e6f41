"""Prices are set through the API (admins only) and read by anyone: ``POST /prices`` publishes
one ``PriceSet`` after every check, and refuses (publishing nothing) a malformed, negative or
non-finite amount, an unknown currency, pool or budget, a time off the hour or in a closed
month, another currency than the book's, and a second price for the same instant."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_api import ADMIN, ANA, CHEN, World, build_world
from tests.unit.test_client import run

#: NOW in tests.unit.test_api is 2026-11-02 11:00 UTC.
HOUR_NOW = "2026-11-02T11:00:00Z"


@pytest.fixture
def world() -> World:
    return build_world()


def price(**overrides: Any) -> dict[str, Any]:
    return {"pool": "p", "currency": "EUR", "per_gpu_hour": "2.50", **overrides}


def test_an_admin_sets_a_price_that_everyone_reads(world: World) -> None:
    done = world.client.post("/prices", json=price(reason="list"), headers=ADMIN)
    assert done.status_code == 201, done.text
    answer = done.json()
    assert answer["effective_at"] == HOUR_NOW  # the start of the current hour
    assert (answer["per_gpu_hour"], answer["changed"], answer["set_by"]) == ("2.50", True, "admin")
    [record] = world.records()
    assert record.type == "fairshare.price.set.v1"
    assert (record.subject, record.data.per_gpu_hour, record.data.budget) == ("p", "2.50", None)
    rate = price(per_gpu_hour=1.9, budget="lab/a", effective_at="2026-11-03T00:00:00+01:00")
    assert world.client.post("/prices", json=rate, headers=ADMIN).status_code == 201
    listed = world.client.get("/prices", headers=ANA)
    assert listed.status_code == 200, listed.text
    assert listed.json() == {
        "currency": "EUR",
        "prices": [
            {"pool": "p", "budget": None, "currency": "EUR", "per_gpu_hour": "2.50",
             "effective_at": HOUR_NOW, "set_by": "admin", "reason": "list"},
            {"pool": "p", "budget": "lab/a", "currency": "EUR", "per_gpu_hour": "1.9",
             "effective_at": "2026-11-02T23:00:00Z", "set_by": "admin", "reason": ""},
        ],
    }  # fmt: skip
    assert world.client.get("/prices?pool=q", headers=ANA).json()["prices"] == []
    assert world.client.get("/prices").status_code == 401


def test_the_same_price_again_changes_nothing_and_another_one_conflicts(world: World) -> None:
    assert world.client.post("/prices", json=price(), headers=ADMIN).status_code == 201
    again = world.client.post("/prices", json=price(per_gpu_hour=2.5), headers=ADMIN)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    other = world.client.post("/prices", json=price(per_gpu_hour="3"), headers=ADMIN)
    assert other.status_code == 409, other.text
    assert "already has a price taking effect at that instant" in other.json()["detail"]
    dollars = price(currency="USD", effective_at="2026-11-02T12:00:00Z")
    refused = world.client.post("/prices", json=dollars, headers=ADMIN)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "currency"]
    assert "prices are in EUR" in refused.json()["detail"][0]["msg"]
    assert len(world.records()) == 1


@pytest.mark.parametrize(
    ("body", "loc", "needle"),
    [
        (price(per_gpu_hour="-1"), "per_gpu_hour", "never negative"),
        (price(per_gpu_hour=-0.5), "per_gpu_hour", "never negative"),
        (price(per_gpu_hour="NaN"), "per_gpu_hour", "not a decimal amount"),
        (price(per_gpu_hour="Infinity"), "per_gpu_hour", "not a decimal amount"),
        (price(per_gpu_hour="2,50"), "per_gpu_hour", "not a decimal amount"),
        (price(per_gpu_hour="1e3"), "per_gpu_hour", "not a decimal amount"),
        (price(per_gpu_hour="0.1234567"), "per_gpu_hour", "at most 6 decimals"),
        (price(per_gpu_hour=1e-7), "per_gpu_hour", "at most 6 decimals"),
        (price(per_gpu_hour="1234567890"), "per_gpu_hour", "at most 9 digits"),
        (price(per_gpu_hour=True), "per_gpu_hour", "decimal string"),
        (price(currency="XYZ"), "currency", "not an ISO 4217 currency"),
        (price(currency="eur"), "currency", "pattern"),
        (price(effective_at="2026-11-02T10:30:00Z"), "effective_at", "on the hour"),
        (price(effective_at="2026-10-31T23:00:00Z"), "effective_at", "closed month"),
        (price(effective_at="2026-11-02T12:00:00"), "effective_at", "UTC offset"),
        (price(effective_at="tomorrow"), "effective_at", "not an ISO 8601 time"),
        (price(pool="q"), "pool", "unknown pool 'q' (known: p)"),
        (price(budget="lab//a"), "budget", "pattern"),
        (price(colour="red"), "colour", "Extra inputs"),
    ],
)
def test_invalid_prices_name_the_field_and_publish_nothing(
    world: World, body: dict[str, Any], loc: str, needle: str
) -> None:
    response = world.client.post("/prices", json=body, headers=ADMIN)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert (error["loc"], needle in error["msg"]) == (["body", loc], True), error
    assert world.records() == []


@pytest.mark.parametrize("amount", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_numbers_are_refused(world: World, amount: str) -> None:
    body = json.dumps(price()).replace('"2.50"', amount)
    response = world.client.post(
        "/prices", content=body, headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert "finite" in response.json()["detail"][0]["msg"]
    assert world.records() == []


def test_only_admins_set_prices_and_budgets_must_exist(world: World) -> None:
    refused = world.client.post("/prices", json=price(), headers=CHEN)
    assert refused.status_code == 403
    assert "only admins set prices" in refused.json()["detail"]
    unknown = world.client.post("/prices", json=price(budget="lab/zz"), headers=ADMIN)
    assert unknown.status_code == 404
    assert "unknown budget 'lab/zz'" in unknown.json()["detail"]
    assert world.records() == []


def test_the_cli_sets_and_lists_prices(world: World) -> None:
    code, out, err = run(
        world, "prices", "set", "p", "2.50", "--currency", "eur", "--reason", "list price",
        token="admin-token",
    )  # fmt: skip
    assert code == 0, err
    assert "p: 2.50 EUR per GPU-hour from 2026-11-02T11:00:00Z (list price)" in out
    code, out, err = run(
        world, "prices", "set", "p", "1.75", "--currency", "EUR", "--budget", "lab/a",
        "--effective-at", "2026-11-05T00:00:00Z", token="admin-token",
    )  # fmt: skip
    assert code == 0, err
    assert "for lab/a" in out
    code, _, err = run(
        world, "prices", "set", "--currency", "EUR", "--", "p", "-1", token="admin-token"
    )
    assert code == 1
    assert "never negative" in err
    code, _, err = run(world, "prices", "set", "p", "3", "--currency", "EUR")
    assert (code, "only admins set prices" in err) == (1, True)
    code, out, err = run(world, "prices", "list")
    assert code == 0, err
    assert "lab/a" in out
    assert "1.75" in out
    assert "list price" in out
    code, out, err = run(world, "prices", "list", "--pool", "p", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [(p["budget"], p["per_gpu_hour"]) for p in listed["prices"]] == [
        (None, "2.50"),
        ("lab/a", "1.75"),
    ]
    assert [r.type for r in world.records()] == ["fairshare.price.set.v1"] * 2


@pytest.mark.parametrize(
    "args",
    [
        ["prices", "list", "--api", "{api}"],
        ["prices", "set", "p", "2.5", "--currency", "EUR", "--api", "{api}"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_the_price_commands_import_nothing_of_the_servers(args: list[str]) -> None:
    from tests.unit.test_cli_import_budget import run_isolated, server_side

    answer, _ = run_isolated(*args)
    assert answer["exit_code"] == 1, answer["output"]
    assert "cannot reach the API" in answer["output"]
    assert server_side(answer["modules"]) == []
