"""``fairshare submit --array``, and ``queue``, ``list``, ``history``, ``show`` and ``cancel``
taking an array's id, run with CliRunner against the API's TestClient."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_api import World, build_world
from tests.unit.test_client import run

SUBMIT = ("submit", "-A", "lab/a", "-p", "p", "-t", "10m", "--id", "sweep")


@pytest.fixture
def world() -> World:
    return build_world()


def test_submit_an_array_with_a_throttle(world: World) -> None:
    code, out, err = run(world, *SUBMIT, "--array", "0-99:2%5", "--", "python", "sweep.py")
    assert code == 0, err
    assert "Submitted array sweep: 50 element(s) (sweep_0 .. sweep_98), at most 5 at once" in out
    [record] = world.records()
    assert (record.data.array_id, record.data.indices, record.data.max_running) == (
        "sweep",
        "0-98:2",
        5,
    )
    assert record.data.spec == {"command": ["python", "sweep.py"]}
    code, out, _ = run(world, *SUBMIT, "--array", "0-99:2%5", "--", "python", "sweep.py")
    assert (code, "Array sweep was already submitted" in out) == (0, True)
    code, _, err = run(world, *SUBMIT, "--array", "0-9%5", "--", "python", "sweep.py")
    assert code == 1
    assert "HTTP 409" in err
    assert len(world.records()) == 1


def test_a_bad_array_is_named_by_the_api(world: World) -> None:
    code, _, err = run(world, *SUBMIT, "--array", "9-0", "--", "true")
    assert code == 1
    assert "indices" in err
    assert "a range goes up" in err
    code, _, err = run(world, *SUBMIT, "--array", "0-9%x", "--", "true")
    assert code != 0
    assert "whole number" in err
    assert world.records() == []


def test_queue_shows_the_held_elements_in_one_line(world: World) -> None:
    run(world, *SUBMIT, "--array", "0-19%3", "--", "true")
    code, out, err = run(world, "queue", "--array", "sweep")
    assert code == 0, err
    lines = [line for line in out.splitlines() if "sweep_" in line]
    assert any("sweep_[3-19]" in line and "array-limit" in line for line in lines), out
    code, out, _ = run(world, "queue", "--array", "sweep", "--json")
    [pool] = json.loads(out)["pools"]
    assert [e["array_index"] for e in pool["pending"]] == list(range(20))


def test_list_show_and_cancel_take_the_array_id(world: World) -> None:
    run(world, *SUBMIT, "--array", "0-4", "--", "true")
    code, out, _ = run(world, "list", "--array", "sweep", "--json")
    assert [w["workload_id"] for w in json.loads(out)["workloads"]] == [
        f"sweep_{i}" for i in range(5)
    ]
    code, out, _ = run(world, "show", "sweep", "--json")
    assert (json.loads(out)["count"], json.loads(out)["statuses"]) == (5, {"pending": 5})
    code, out, err = run(world, "cancel", "sweep_4")
    assert code == 0, err
    assert "Cancel of sweep_4 recorded" in out
    code, out, err = run(world, "cancel", "sweep", "--reason", "wrong data")
    assert code == 0, err
    assert "Cancel of array sweep recorded for 4 element(s) (1 cancelled already" in out
    code, out, _ = run(world, "cancel", "sweep")
    assert "Nothing left to cancel in array sweep" in out
    code, out, err = run(world, "history", "--array", "sweep", "--json")
    assert code == 0, err
    ended = json.loads(out)["workloads"]
    assert sorted(w["workload_id"] for w in ended) == [f"sweep_{i}" for i in range(5)]
    assert {w["status"] for w in ended} == {"cancelled"}
    code, _, err = run(world, "cancel", "nothing-here")
    assert code == 1
    assert "unknown workload 'nothing-here' (no array has that id either)" in err
