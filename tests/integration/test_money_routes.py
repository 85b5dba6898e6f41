"""A budget's money over HTTP, the CLI and the dashboard's data, on SQLite and PostgreSQL:
``GET /budgets/{path}/statement`` and ``GET /statements`` answer what ``budget_money``
computes, line by line down to the workloads, with exact and display amounts; they refuse a bad
month (422), an unknown budget (404), a missing token (401) and a missing database (503); and
for one log the same billed figure comes out of the API, ``fairshare statement`` (text, JSON,
CSV), ``fairshare share --cost``, the dashboard's reads and the FOCUS export."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from typer.testing import CliRunner

from events import new_event
from events.models import MembershipGranted
from services.client import FairshareClient, register
from services.devtools.demo_data import project
from services.reports.costs import budget_money
from services.reports.focus import month_bounds
from services.reports.focus_export import focus_bytes
from tests.databases import fresh_database
from tests.priced_lab import BUDGETS, MONTH, priced_app, priced_lab

pytestmark = [pytest.mark.database]
#: Every budget's money: a finance token (a member sees only the budgets they hold a role on).
FIN = {"Authorization": "Bearer finance-token"}
KINDS = ["usage", "burst", "lost", "idle", "corrections"]


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with fresh_database(database_url) as engine:
        project(engine, priced_lab())
        yield engine


@pytest.fixture
def client(engine: Engine) -> TestClient:
    return TestClient(priced_app(priced_lab(), engine))


def _get(client: TestClient, path: str, **params: str) -> dict[str, Any]:
    answer = client.get(path, params=params, headers=FIN)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def _exact(money: dict[str, str]) -> Decimal:
    return Decimal(money["exact"])


def _displayed(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def test_a_statement_is_budget_money_down_to_the_workloads(
    client: TestClient, engine: Engine
) -> None:
    answer = _get(client, "/budgets/lab/statement", month=MONTH)
    start, end = month_bounds(MONTH)
    money = budget_money(engine, "lab", start, end)
    assert answer["budget"] == "lab"
    assert answer["period"] == {
        "month": MONTH,
        "start": "2026-11-01T00:00:00Z",
        "end": "2026-12-01T00:00:00Z",
    }
    assert (answer["currency"], answer["idle_method"], answer["sealed"]) == ("EUR", "share", False)
    assert answer["log_position"] == money.log_position
    assert answer["billed"] == {
        "exact": format(money.statement.billed, "f"),
        "display": _displayed(money.statement.billed),
    }
    assert [line["kind"] for line in answer["lines"]] == KINDS
    for line in answer["lines"]:
        mine = money.statement.lines[line["kind"]]
        assert _exact(line["billed"]) == mine.billed, line["kind"]
        assert _exact(line["list_value"]) == mine.list_value, line["kind"]
        assert line["gpu_s"] == mine.gpu_s
        assert line["gpu_h"] == pytest.approx(mine.gpu_s / 3600, abs=1e-6)
        # a line is the sum of its workloads, exactly
        assert sum(_exact(w["billed"]) for w in line["workloads"]) == _exact(line["billed"])
        assert sum(w["gpu_s"] for w in line["workloads"]) == line["gpu_s"]
        billed = [_exact(w["billed"]) for w in line["workloads"]]
        assert billed == sorted(billed, reverse=True)  # the most billed first
        # every line with GPU-hours names its price per GPU-hour: billed / GPU-h
        if line["gpu_s"]:
            per_hour = _exact(line["billed"]) * 3600 / line["gpu_s"]
            assert _exact(line["unit_price"]) == pytest.approx(per_hour, abs=Decimal("1e-6"))
            listed = _exact(line["list_value"]) * 3600 / line["gpu_s"]
            assert _exact(line["list_unit_price"]) == pytest.approx(listed, abs=Decimal("1e-6"))
        else:
            assert line["unit_price"] is None
            assert line["list_unit_price"] is None
    assert sum(_exact(line["billed"]) for line in answer["lines"]) == _exact(answer["billed"])
    assert sum(_exact(m) for m in answer["by_pool"].values()) == _exact(answer["billed"])
    lines = {line["kind"]: line for line in answer["lines"]}
    assert [w["workload_id"] for w in lines["lost"]["workloads"]] == ["robot-sim-1"]
    assert _exact(lines["burst"]["billed"]) == 0
    assert {w["workload_id"] for w in lines["usage"]["workloads"]} >= {"vision-train-1"}
    # idle: one entry per leaf it was allocated to (by share, the lab's leaves entitled then)
    idle = [(w["workload_id"], w["budget"]) for w in lines["idle"]["workloads"]]
    assert len(idle) >= 2
    assert all(name == f"(idle of {leaf} in a100)" for name, leaf in idle)
    assert {leaf for _, leaf in idle} <= {"lab/nlp", "lab/robotics", "lab/vision"}
    # the idle line shows the GPU-hours behind it, at the list price, and says why it is billed
    assert lines["idle"]["gpu_s"] > 0
    assert lines["idle"]["unit_price"] == lines["idle"]["list_unit_price"]
    assert "entitlement" in answer["idle_rule"]
    assert "from the instant it exists" in answer["idle_rule"]
    forecast = answer["forecast"]
    assert _exact(forecast["spent"]) == money.forecast.spent == money.statement.billed
    assert _exact(forecast["at_current_rate"]) == money.forecast.at_current_rate
    assert _exact(forecast["at_entitlement"]) == money.forecast.at_entitlement
    assert forecast["as_of"] == "2026-11-02T12:00:00Z"
    assert forecast["month_end"] == "2026-12-01T00:00:00Z"
    # without a month: the month of the API's clock
    assert _get(client, "/budgets/lab/statement") == answer


def test_statements_hold_every_budget_as_its_own_route_answers(client: TestClient) -> None:
    every = _get(client, "/statements", month=MONTH)
    assert every["period"]["month"] == MONTH
    assert every["currency"] == "EUR"
    assert [s["budget"] for s in every["statements"]] == BUDGETS
    for statement in every["statements"]:
        alone = _get(client, f"/budgets/{statement['budget']}/statement", month=MONTH)
        assert statement == alone
    light = _get(client, "/statements", month=MONTH, workloads="false")
    for full, short in zip(every["statements"], light["statements"], strict=True):
        assert all(line["workloads"] is None for line in short["lines"])
        assert short["billed"] == full["billed"]
        assert short["forecast"] == full["forecast"]
    # a parent is the sum of its children; another idle method moves only the idle line
    by_budget = {s["budget"]: _exact(s["billed"]) for s in every["statements"]}
    assert by_budget["lab"] == by_budget["lab/robotics"] + by_budget["lab/vision"]
    platform = _get(client, "/statements", month=MONTH, idle="platform", workloads="false")
    for statement in platform["statements"]:
        lines = {line["kind"]: line for line in statement["lines"]}
        assert _exact(lines["idle"]["billed"]) == 0
    # a month before any price: nothing billed, every line present
    october = _get(client, "/budgets/lab/statement", month="2026-10")
    assert _exact(october["billed"]) == 0
    assert [line["kind"] for line in october["lines"]] == KINDS


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "26-11", "november", "1969-12", "2100-01"])
def test_a_bad_month_is_422(client: TestClient, month: str) -> None:
    for path in ("/budgets/lab/statement", "/statements"):
        answer = client.get(path, params={"month": month}, headers=FIN)
        assert answer.status_code == 422, (path, month, answer.text)
        assert answer.json()["detail"][0]["loc"] == ["query", "month"]


def test_unknown_budgets_tokens_and_databases_are_refused(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = client.get("/budgets/lab/nowhere/statement", params={"month": MONTH}, headers=FIN)
    assert unknown.status_code == 404
    assert "lab/nowhere" in unknown.json()["detail"]
    assert client.get("/budgets/lab/statement").status_code == 401
    assert client.get("/statements").status_code == 401
    # the budget's own figures are still its route's (the statement route comes first)
    assert client.get("/budgets/lab", headers=FIN).json()["budget"] == "lab"
    monkeypatch.delenv("FAIRSHARE_DATABASE_URL", raising=False)
    bare = TestClient(priced_app(priced_lab(), None))
    missing = bare.get("/budgets/lab/statement", params={"month": MONTH}, headers=FIN)
    assert missing.status_code == 503
    assert "FAIRSHARE_DATABASE_URL" in missing.json()["detail"]


def test_a_budgets_money_is_seen_by_its_roles_admins_and_finance(engine: Engine) -> None:
    """A member of lab/vision saw every team's costs. Now: a role on a budget or above it
    (ana, member of lab/vision: lab/vision's; chen, manager of lab: all of lab's), admins and
    finance tokens (everything); another's statement is a 403 naming why."""
    at = datetime.fromisoformat("2026-11-01T00:00:00+00:00")
    roles = [
        new_event(
            MembershipGranted(budget=budget, user=user, role=role, granted_by="admin"),
            source="tests",
            time=at,
        )
        for budget, user, role in (("lab/vision", "ana", "member"), ("lab", "chen", "manager"))
    ]
    client = TestClient(priced_app([*priced_lab(), *roles], engine))

    def seen(token: str) -> list[str]:
        answer = client.get(
            "/statements", params={"month": MONTH, "workloads": "false"},
            headers={"Authorization": f"Bearer {token}"},
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        return [s["budget"] for s in answer.json()["statements"]]

    assert seen("ana-token") == ["lab/vision"]
    assert seen("chen-token") == ["lab", "lab/robotics", "lab/vision"]
    assert seen("bo-token") == []
    assert seen("admin-token") == seen("finance-token") == BUDGETS
    ana = {"Authorization": "Bearer ana-token"}
    mine = client.get("/budgets/lab/vision/statement", params={"month": MONTH}, headers=ana)
    assert mine.status_code == 200, mine.text
    other = client.get("/budgets/ops/statement", params={"month": MONTH}, headers=ana)
    assert other.status_code == 403
    assert "ana holds no role on ops" in other.json()["detail"]
    above = client.get("/budgets/lab/statement", params={"month": MONTH}, headers=ana)
    assert above.status_code == 403, "a member of a child does not see the parent's total"


def _cli(client: TestClient) -> typer.Typer:
    app = typer.Typer()
    register(app, lambda api, token: FairshareClient(api, token, http=client))
    return app


def _run(client: TestClient, *args: str) -> str:
    done = CliRunner().invoke(
        _cli(client), list(args), env={"FAIRSHARE_TOKEN": "finance-token", "COLUMNS": "200"}
    )
    assert done.exit_code == 0, done.output
    return done.stdout


def test_one_log_one_figure_on_the_api_the_cli_the_dashboard_and_focus(
    client: TestClient, engine: Engine, tmp_path: Path
) -> None:
    start, end = month_bounds(MONTH)
    rows = list(csv.DictReader(io.StringIO(focus_bytes(engine, MONTH, "csv").decode())))
    # what the dashboard reads: /statements without workloads, the month of now
    dashboard = {
        s["budget"]: s
        for s in _get(client, "/statements", month=MONTH, workloads="false")["statements"]
    }
    share = json.loads(_run(client, "share", "--cost", "--json"))
    money = share["statements"]
    assert money["period"]["month"] == MONTH  # the month of the API clock
    spent = {s["budget"]: s["forecast"]["spent"]["exact"] for s in money["statements"]}
    assert [b["budget"] for b in share["budgets"]["budgets"]] == BUDGETS
    for budget in BUDGETS:
        billed = budget_money(engine, budget, start, end).statement.billed
        mine = [
            r
            for r in rows
            if r["SubAccountId"] == budget or r["SubAccountId"].startswith(budget + "/")
        ]
        assert sum(Decimal(r["BilledCost"]) for r in mine) == billed, budget
        api = _get(client, f"/budgets/{budget}/statement", month=MONTH)
        assert _exact(api["billed"]) == billed, budget
        assert _exact(dashboard[budget]["billed"]) == billed, budget
        assert Decimal(spent[budget]) == billed, budget
        printed = _run(client, "statement", budget, "--month", MONTH, "--format", "json")
        as_json = json.loads(printed)
        assert _exact(as_json["billed"]) == billed, budget
        out = tmp_path / f"{budget.replace('/', '_')}.csv"
        _run(client, "statement", budget, "--month", MONTH, "--format", "csv", "--out", str(out))
        table = list(csv.DictReader(out.open()))
        [total] = [r for r in table if r["row"] == "total"]
        assert Decimal(total["billed"]) == billed, budget
        assert sum(Decimal(r["billed"]) for r in table if r["row"] == "line") == billed
        assert sum(Decimal(r["billed"]) for r in table if r["row"] == "workload") == billed
        text = _run(client, "statement", budget, "--month", MONTH)
        assert "total billed" in text
        assert _displayed(billed) in text, budget


def test_the_printed_statement_reads_as_a_statement(client: TestClient) -> None:
    text = _run(client, "statement", "lab", "--month", MONTH)
    for words in (
        "Statement of lab for 2026-11 (EUR)",
        "fair share over the window",
        "funded use",
        "burst (billed 0; list value)",
        "lost to preemption",
        "idle capacity allocated",
        "corrections of sealed months",
        "billed per pool: a100",
        "forecast to 2026-12-01T00:00:00Z",
        "robot-sim-1",
        "vision-train-1",
        "as of 2026-11-02T12:00:00Z",
    ):
        assert words in text, words
    # every line with GPU-hours names its unit price; the idle rule is printed
    assert "PER GPU-h" in text
    assert "LIST PER GPU-h" in text
    idle_row = next(row for row in text.splitlines() if row.strip().startswith("idle capacity"))
    gpu_h, per_hour = idle_row.split()[3:5]
    assert float(gpu_h) > 0, idle_row
    assert per_hour != "-", idle_row
    assert "split by entitlement" in " ".join(text.split())
    header = "\n".join(text.splitlines()[:3])
    assert "log position" not in header, "a time heads it; the log position is a footnote"
    assert "Read from the read models at log position" in text.splitlines()[-1]
    share = _run(client, "share", "--cost")
    assert "SPENT" in share
    assert "FORECAST AT RATE" in share
    assert "money 2026-11" in share
    unknown = CliRunner().invoke(
        _cli(client), ["statement", "nowhere"], env={"FAIRSHARE_TOKEN": "finance-token"}
    )
    assert unknown.exit_code == 1
    assert "unknown budget" in unknown.stderr
