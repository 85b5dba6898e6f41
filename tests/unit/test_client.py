"""The CLI client's commands, run with CliRunner against the API's TestClient."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from services.client import FairshareClient, register
from services.client.api import ApiError, format_detail
from services.client.commands import parse_duration
from tests.unit.test_api import World, build_world

runner = CliRunner()


@pytest.fixture
def world() -> World:
    return build_world()


def cli(world: World) -> typer.Typer:
    app = typer.Typer()
    register(app, lambda api, token: FairshareClient(api, token, http=world.client))
    return app


def run(world: World, *args: str, token: str = "ana-token") -> tuple[int, str, str]:
    result = runner.invoke(cli(world), [*args], env={"FAIRSHARE_TOKEN": token, "COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_submit_then_show(world: World) -> None:
    code, out, err = run(
        world,
        "submit",
        "-A",
        "lab/a",
        "-G",
        "2",
        "-p",
        "p",
        "-t",
        "30m",
        "--id",
        "job-7",
        "--priority",
        "3",
        "--",
        "python",
        "train.py",
    )
    assert code == 0, err
    assert "Submitted workload job-7 (pending)" in out
    [record] = world.records()
    assert record.data.min_runtime_s == 1800
    assert record.data.spec == {"command": ["python", "train.py"]}
    assert (record.data.gpus, record.data.priority, record.data.pools) == (2, 3, ("p",))
    code, out, _ = run(
        world,
        "submit",
        "-A",
        "lab/a",
        "-G",
        "2",
        "-p",
        "p",
        "-t",
        "30m",
        "--id",
        "job-7",
        "--priority",
        "3",
        "--",
        "python",
        "train.py",
    )
    assert code == 0
    assert "already submitted" in out
    code, out, _ = run(world, "show", "job-7", "--json")
    assert code == 0
    assert json.loads(out)["submitter"] == "ana"


def test_submit_generates_an_id(world: World) -> None:
    code, out, err = run(world, "submit", "-A", "lab/a", "-p", "p", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["workload_id"]) == 36
    assert data["min_runtime_s"] == 0
    assert data["allocated"] is False


def test_queue_json_is_the_apis_json(world: World) -> None:
    code, out, _ = run(world, "queue", "--json")
    assert code == 0
    data = json.loads(out)
    assert data == world.client.get("/queue", headers={"Authorization": "Bearer ana-token"}).json()
    assert [e["workload_id"] for e in data["pools"][0]["pending"]] == ["pa1", "pb1"]


def test_queue_table(world: World) -> None:
    code, out, _ = run(world, "queue")
    assert code == 0
    lines = [line for line in out.splitlines() if "pa1" in line or "pb1" in line]
    assert "pa1" in lines[0]
    assert "contract" in lines[0]
    assert "pb1" in lines[1]
    assert "fits-now" in lines[1]  # one reason per job, the one that decides (squeue's REASON)
    code, out, _ = run(world, "queue", "--long")
    assert code == 0
    assert "n1 can free them at 11:50 UTC" in " ".join(out.split())


def test_why_pending_and_preempted(world: World) -> None:
    code, out, _ = run(world, "why", "pa1")
    assert code == 0
    assert "position 1 of 2" in out
    assert "when r1's contract ends" in out
    assert "waits on r1" not in out  # the details are under --verbose
    code, out, _ = run(world, "why", "pa1", "--verbose")
    assert code == 0
    assert "waits on r1" in out
    code, out, _ = run(world, "why", "v1")
    assert code == 0
    assert "room for pa0" in out
    assert "pass 3" not in out
    code, out, _ = run(world, "why", "v1", "-v")
    assert code == 0
    assert "pass 3, decided at fairshare.workloads/1@17" in out


def test_share(world: World) -> None:
    code, out, _ = run(world, "share", "--json")
    assert code == 0
    by = {b["budget"]: b for b in json.loads(out)["budgets"]}
    assert by["lab/b"]["pools"]["p"]["usage_gpu_s"] == 102_400
    code, out, _ = run(world, "share")
    assert code == 0
    assert "lab" in out
    assert "28.4" in out  # lab/b: 102,400 GPU-s = 28.4 GPU-h


def test_nodes_and_cordon(world: World) -> None:
    code, out, _ = run(world, "nodes")
    assert code == 0
    assert "cordoned" in out
    code, _, err = run(world, "cordon", "n1", "--reason", "disk")
    assert code == 1
    assert "HTTP 403" in err
    assert "only admins" in err
    code, out, _ = run(world, "cordon", "n1", "--reason", "disk", token="admin-token")
    assert code == 0
    assert "n1: draining" in out


def test_budget_commands(world: World) -> None:
    code, out, err = run(world, "budgets", "set-weight", "lab/a", "3", token="chen-token")
    assert code == 0, err
    assert "lab/a: weight 3" in out
    code, out, _ = run(world, "budgets", "add-member", "lab/b", "ana", token="chen-token")
    assert code == 0
    assert "granted" in out
    code, _, err = run(world, "budgets", "add-member", "lab/b", "eve", token="bo-token")
    assert code == 1
    assert "not a manager of lab/b" in err


def test_errors_exit_1_with_the_status_and_detail(world: World) -> None:
    code, _, err = run(world, "show", "nope")
    assert code == 1
    assert "HTTP 404" in err
    assert "unknown workload 'nope' (no array has that id either)" in err
    code, _, err = run(world, "submit", "-A", "lab/a", "-p", "p", "-G", "0")
    assert code == 1
    assert "HTTP 422" in err
    assert "gpus" in err
    code, _, err = run(world, "queue", token="wrong-token")
    assert code == 1
    assert "HTTP 401" in err
    assert world.records() == []


def test_unreachable_api() -> None:
    client = FairshareClient("http://127.0.0.1:9", "t")
    with pytest.raises(ApiError, match="cannot reach the API"):
        client.nodes()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3600", 3600),
        ("90s", 90),
        ("30m", 1800),
        ("1h30m", 5400),
        ("01:30:00", 5400),
        ("5:00", 300),
    ],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration() -> None:
    with pytest.raises(typer.BadParameter):
        parse_duration("soon")


def test_validation_details_name_the_field() -> None:
    detail = [{"loc": ["body", "pools", 1], "msg": "unknown pool 'q'"}]
    assert format_detail(detail) == "pools.1: unknown pool 'q'"


def test_client_commands_merge_into_another_app(world: World) -> None:
    from services.client import client_app
    from services.client.commands import client_commands

    names = {command.name for command in client_app.registered_commands}
    assert names == {
        "submit",
        "cancel",
        "list",
        "queue",
        "history",
        "show",
        "why",
        "share",
        "statement",
        "nodes",
        "cordon",
        "uncordon",
    }
    root = typer.Typer()

    @root.command()
    def other() -> None:
        """A command of the app the client is mounted into."""

    root.add_typer(
        client_commands(lambda api, token: FairshareClient(api, token, http=world.client))
    )
    result = runner.invoke(root, ["queue", "--json"], env={"FAIRSHARE_TOKEN": "ana-token"})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["pools"][0]["queue_length"] == 2
    result = runner.invoke(
        root, ["budgets", "add-member", "lab/b", "ana"], env={"FAIRSHARE_TOKEN": "chen-token"}
    )
    assert result.exit_code == 0, result.stderr
    assert "granted" in result.stdout


def test_budgets_list_shows_the_tree_weights_shares_and_members(world: World) -> None:
    code, out, err = run(world, "budgets", "list")
    assert code == 0, err
    lines = out.splitlines()
    lab = next(line for line in lines if line.split()[0] == "lab")
    assert "chen (manager)" in lab
    a = next(line for line in lines if line.split()[0] == "a")  # lab/a, indented under lab
    assert a.index("a") > lab.index("lab")
    assert "ana (member)" in a
    assert "p 50.0%" in a
    code, out, _ = run(world, "budgets", "list", "--json")
    assert code == 0
    assert {b["budget"] for b in json.loads(out)["budgets"]} >= {"lab", "lab/a", "lab/b"}


def test_budgets_members_lists_roles_in_a_subtree(world: World) -> None:
    code, out, err = run(world, "budgets", "members", "--json")
    assert code == 0, err
    rows = json.loads(out)["members"]
    assert {"budget": "lab", "user": "chen", "role": "manager"} in rows
    assert {"budget": "lab/a", "user": "ana", "role": "member"} in rows
    code, out, _ = run(world, "budgets", "members", "lab/b", "--json")
    assert [r["user"] for r in json.loads(out)["members"]] == ["bo"]
    code, out, _ = run(world, "budgets", "members", "lab/b")
    assert "bo" in out
    assert "member" in out
    code, _, err = run(world, "budgets", "members", "nope")
    assert code == 1
    assert "unknown budget 'nope'" in err
