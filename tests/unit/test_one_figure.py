"""One delivered/owed figure: for one log and one range, the API's ``/budgets``, ``fairshare
share``, the dashboard's timeline (in any bin size) and the charges report say the same per
budget, mid-hour, with a node down and after a weight change."""

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
from events.models import BudgetWeightChanged, NodeDown, NodeUp, WorkloadSubmitted
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
BUDGETS = ("lab", "lab/robotics", "lab/vision", "ops")


def _log() -> list[Envelope[Any]]:
    late = WorkloadSubmitted(
        workload_id="robot-late-3",
        budget="lab/robotics",
        pools=(POOL,),
        gpus=2,
        min_runtime_s=600,
        submitter="bo",
    )
    changes = [
        (BudgetWeightChanged(budget="lab/robotics", weight=3.0, changed_by="admin"), 3.25),
        (NodeDown(node="n3"), 4.5),
        (NodeUp(node="n3"), 5.0),
    ]
    extra = [new_event(e, source="tests", time=T0 + timedelta(hours=h)) for e, h in changes]
    return [
        *sorted([*small_lab(), *extra], key=lambda e: e.time),
        new_event(late, source="tests", time=NOW),
    ]


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
        ["charges", "--database-url", str(engine.url), "--bucket", "hour", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_the_report_cli_still_takes_period_as_the_old_name_of_bucket(engine: Engine) -> None:
    args = ["charges", "--database-url", str(engine.url), "--format", "json"]
    by_period = runner.invoke(report_app, [*args, "--period", "hour"])
    assert by_period.exit_code == 0, by_period.output
    assert json.loads(by_period.stdout) == _report(engine)


def _share(api: TestClient) -> dict[str, Any]:
    app = typer.Typer()
    register(app, lambda url, token: FairshareClient(url, token, http=api))
    result = runner.invoke(app, ["share", "--json"], env={"FAIRSHARE_TOKEN": "admin-token"})
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def _from_budgets(api: TestClient) -> dict[str, tuple[float, float]]:
    answer = api.get("/budgets", headers=ADMIN).json()
    return {
        b["budget"]: (b["pools"][POOL]["delivered_gpu_s"], b["pools"][POOL]["owed_gpu_s"])
        for b in answer["budgets"]
    }


def _from_report(engine: Engine) -> dict[str, tuple[float, float]]:
    rows = [r for r in _report(engine)["rows"] if r["pool"] == POOL and r["line"] != "correction"]
    return {
        name: (
            sum(r["delivered_gpu_s"] for r in rows if r["budget"] == name),
            sum(r["owed_gpu_s"] for r in rows if r["budget"] == name),
        )
        for name in BUDGETS
    }


def _from_timeline(api: TestClient, bin_s: int) -> dict[str, tuple[float, float]]:
    start = int((T0 - timedelta(hours=1)).timestamp())
    answer = api.get(f"/dashboard/api/timeline?from={start}&bin={bin_s}", headers=ADMIN).json()
    covered = answer["covered_s"]

    def total(series: list[float | None]) -> float:
        return sum((v or 0.0) * c for v, c in zip(series, covered, strict=True))

    return {
        b["budget"]: (total(b["delivered_gpus"]), total(b["owed_gpus"])) for b in answer["budgets"]
    }


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.005 * max(abs(a), abs(b), 1.0)


def test_every_surface_says_the_same_delivered_owed_and_ratio(
    engine: Engine, api: TestClient
) -> None:
    budgets = api.get("/budgets", headers=ADMIN).json()
    assert _share(api) == budgets, "share prints what /budgets (the dashboard's table) says"
    expected = _from_budgets(api)
    surfaces = {
        "charges report": _from_report(engine),
        "timeline, hourly bins": _from_timeline(api, 3600),
        "timeline, 1-minute bins": _from_timeline(api, 60),
    }
    for name in BUDGETS:
        delivered, owed = expected[name]
        for surface, figures in surfaces.items():
            got_delivered, got_owed = figures[name]
            assert _close(got_delivered, delivered), (surface, name, got_delivered, delivered)
            assert _close(got_owed, owed), (surface, name, got_owed, owed)
            if owed:
                assert _close(got_delivered / got_owed, delivered / owed), (surface, name)
    # ops only bursts (unallocated): it is owed nothing; the lab is owed and served
    assert expected["ops"] == (0, 0)
    assert all(expected[name][1] > 0 for name in ("lab", "lab/robotics", "lab/vision"))


def test_mid_hour_running_work_counts_as_delivered_up_to_now(
    engine: Engine, api: TestClient
) -> None:
    """Vision's two runs have run 20 minutes (6 GPUs) past their last charge: those minutes
    are delivered, and owed, up to now; a budget served all along does not read as
    short-changed for as long as its work runs."""
    rows = [r for r in _report(engine)["rows"] if r["pool"] == POOL and r["budget"] == "lab/vision"]
    charged = sum(r["allocated_gpu_s"] for r in rows)
    delivered, _owed = _from_budgets(api)["lab/vision"]
    assert delivered == pytest.approx(charged + 6 * 20 * 60)


def test_a_down_node_is_out_of_capacity_and_a_weight_change_reprices_from_then_on(
    api: TestClient,
) -> None:
    start = int((T0 - timedelta(hours=1)).timestamp())
    answer = api.get(f"/dashboard/api/timeline?from={start}&bin=900", headers=ADMIN).json()
    capacity = dict(zip(answer["bins"], answer["capacity_gpus"], strict=True))
    at = lambda hours: (T0 + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")  # noqa: E731
    assert capacity[at(4.5)] == 8, "n3 down"
    assert capacity[at(4)] == capacity[at(5)] == 12
    robotics = next(b for b in answer["budgets"] if b["budget"] == "lab/robotics")
    entitled = dict(zip(answer["bins"], robotics["entitled_gpus"], strict=True))
    # lab has 3/4 of the pool; robotics 1/3 of lab, then 3/5 of it
    assert entitled[at(3)] == pytest.approx(0.75 * 12 / 3)
    assert entitled[at(3.5)] == pytest.approx(0.75 * 12 * 3 / 5)


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


def test_the_surfaces_compared_read_both_whole_hours_summed_and_hours_change_by_change(
    engine: Engine,
) -> None:
    """/budgets, the report and the hourly timeline take whole hours summed from what the
    projector keeps; the 1-minute timeline, the partial hour and the hours of the weight change
    and of the node going down are read change by change: the agreement above spans both."""
    from events.times import HOUR
    from services.reports.history import pool_histories
    from services.reports.window import read_tree

    lo, at = (T0 - timedelta(hours=1)).timestamp(), NOW.timestamp()
    with engine.connect() as connection:
        tree = read_tree(connection)
        history = pool_histories(
            connection, lo, at, summed=True, share_changes=tree.change_times(lo, at)
        )[POOL]
    summed = {hour for span in history.settled for hour in range(span.start, span.end, HOUR)}
    exact = {charge.bucket_start for charge in history.charges}
    assert len(summed) >= 3
    weight_change, node_down = (T0 + timedelta(hours=h) for h in (3.25, 4.5))
    assert {int(t.timestamp()) // HOUR * HOUR for t in (weight_change, node_down)} <= exact
    assert int(at) // HOUR * HOUR not in summed
    assert not summed & exact
