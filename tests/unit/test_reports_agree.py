"""One delivered/owed figure: the API's ``/budgets`` (which ``fairshare share`` and the dashboard
show) and ``fairshare report charges`` say the same for the same period and log position, and
running work counts as demand only as far as it is charged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine
from typer.testing import CliRunner

from events.envelope import Envelope, new_event
from events.models import WorkloadSubmitted
from services.api import create_app, default_tokens
from services.api.view import VIEW_KINDS, LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.client import FairshareClient, register
from services.devtools.demo_data import POOL, T0, project, small_lab
from services.read_models.migrate import migrate
from services.reports.cli import report_app

#: Twenty minutes into the hour after the lab's morning: vision's two runs are charged up to
#: 12:00 (their heartbeats), not for the twenty minutes since.
NOW = T0 + timedelta(hours=6, minutes=20)
ADMIN = {"Authorization": "Bearer admin-token"}
runner = CliRunner()


def _log() -> list[Envelope[Any]]:
    late = WorkloadSubmitted(
        workload_id="robot-late-3",
        budget="lab/robotics",
        pools=(POOL,),
        gpus=2,
        min_runtime_s=600,
        submitter="bo",
    )
    return [*small_lab(), new_event(late, source="tests", time=NOW)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('agree') / 'rm.db'}")
    migrate(engine)
    project(engine, _log())
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def api(engine: Engine) -> TestClient:
    broker = InMemoryBroker()
    view = LiveView(InMemorySubscriber(broker, "agree-view", VIEW_KINDS))
    view.feed(*_log())
    app = create_app(
        view, InMemoryPublisher(broker), default_tokens(), clock=NOW.timestamp, engine=engine
    )
    return TestClient(app)


def _report(engine: Engine) -> dict[str, Any]:
    result = runner.invoke(
        report_app,
        ["charges", "--database-url", str(engine.url), "--period", "day", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _share(api: TestClient) -> dict[str, Any]:
    app = typer.Typer()
    register(app, lambda url, token: FairshareClient(url, token, http=api))
    result = runner.invoke(app, ["share", "--json"], env={"FAIRSHARE_TOKEN": "admin-token"})
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def test_the_api_share_and_the_charges_report_agree(engine: Engine, api: TestClient) -> None:
    budgets = api.get("/budgets", headers=ADMIN).json()
    assert _share(api) == budgets, "share prints what /budgets (the dashboard's source) says"
    report = _report(engine)
    source = budgets["delivered_owed"]
    assert (source["log_position"], source["as_of"]) == (report["log_position"], report["as_of"])
    rows = [r for r in report["rows"] if r["pool"] == POOL]
    owed_rows = {r["budget"]: r for r in rows if r["line"] != "correction"}
    for budget in budgets["budgets"]:
        name, figures = budget["budget"], budget["pools"][POOL]
        # a leaf's corrections are a row of their own; delivered counts them, as its ratio does
        delivered = sum(r["allocated_gpu_s"] for r in rows if r["budget"] == name)
        assert figures["delivered_gpu_s"] == delivered, name
        assert figures["owed_gpu_s"] == owed_rows[name]["owed_gpu_s"], name
        assert figures["delivered_ratio"] == owed_rows[name]["delivered_over_owed"], name
    assert {b["budget"] for b in budgets["budgets"]} == {"lab", "lab/robotics", "lab/vision", "ops"}
    vision = next(b for b in budgets["budgets"] if b["budget"] == "lab/vision")
    assert vision["pools"][POOL]["delivered_ratio"] == 0.920506  # 98,310 / 106,800


def test_running_work_counts_as_demand_up_to_its_last_charge(engine: Engine) -> None:
    """Its two runs have run 20 minutes past their last charge: those minutes are counted
    neither as delivered nor as owed (counted as owed only, a budget served all along reads as
    short-changed for as long as its work runs)."""
    rows = {
        r["budget"]: r
        for r in _report(engine)["rows"]
        if r["pool"] == POOL and r["line"] != "correction"
    }
    # lab/vision is entitled to 6 GPUs (0.75 x 2/3 x 12) and wants 4 (06:00-08:00), 8 (to
    # 09:00), 4 (to 10:10), then 6 up to 12:00, where its running work's charges end: the 20
    # minutes since are neither delivered nor owed yet (counted as owed, they made it 114,000).
    assert rows["lab/vision"]["owed_gpu_s"] == 4 * 7200 + 6 * 3600 + 4 * 4200 + 6 * 6600
    # robot-late-3 waits from 12:20 on: pending work is owed up to the horizon, robot-big-2
    # (8 GPUs, pending since 09:30) too
    assert rows["lab/robotics"]["demand_gpu_s"] > 0


def test_the_report_finds_the_read_models_of_the_data_dir(engine: Engine, tmp_path: Path) -> None:
    database = Path(str(engine.url.database))
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "fairshare.db").write_bytes(database.read_bytes())
    by_option = runner.invoke(report_app, ["users", "--data-dir", str(data_dir)])
    by_variable = runner.invoke(report_app, ["users"], env={"FAIRSHARE_DATA_DIR": str(data_dir)})
    assert by_option.exit_code == by_variable.exit_code == 0, by_option.output
    assert by_option.stdout == by_variable.stdout
    assert "robot-sim-1" not in by_option.stdout
    assert "lab/vision" in by_option.stdout
