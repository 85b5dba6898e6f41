"""What a Slurm user reaches for: sbatch's -J and a default partition, squeue's REASON and
--me, sacct, sinfo -R, sshare's FairShare; and a CLI that says which of its own options to use
when the API refuses a token."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from events.models import (
    DecisionRecord,
    LedgerCharge,
    NodeGpus,
    NodeRegistered,
    Placement,
    PreemptCommand,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    charge_id,
)
from tests.factories import submitted
from tests.unit.test_api import ANA, NOW, T0, World, build_world
from tests.unit.test_client import run


@pytest.fixture
def world() -> World:
    return build_world()


def words(text: str) -> str:
    """Table cells as one line of words (Rich wraps long cells)."""
    return " ".join(text.replace("│", " ").split())


# -- submit ---------------------------------------------------------------------------------------
def test_submit_takes_the_only_pool_and_a_name(world: World) -> None:
    code, out, err = run(
        world, "submit", "-A", "lab/a", "-J", "resnet sweep", "--id", "j1", "--", "train"
    )
    assert code == 0, err
    [record] = world.records()
    assert record.data.pools == ("p",)
    assert record.data.spec == {"command": ["train"], "name": "resnet sweep"}
    code, out, _ = run(world, "list", "--me")
    assert "resnet sweep" in words(out)
    code, out, _ = run(world, "queue")
    assert "resnet sweep" in words(out)


def test_submit_needs_a_pool_where_there_are_several(world: World) -> None:
    world.fact(NodeRegistered(node="q1", cluster="c", pool="q", gpus=8, gpu_type="H100"), T0)
    code, _, err = run(world, "submit", "-A", "lab/a", "--", "train")
    assert code == 2
    assert "Invalid value for --pool: required: the cluster has 2 pools: p, q" in words(err)
    assert world.records() == []


def test_submit_help_marks_what_is_required(world: World) -> None:
    _, out, _ = run(world, "submit", "--help")
    text = words(out)
    assert "leaf budget that funds it (Slurm: account) [required]" in text
    assert "(required when the cluster has several pools; default: its only pool)" in text


# -- list, history --------------------------------------------------------------------------------
def test_list_refuses_an_unknown_status(world: World) -> None:
    code, _, err = run(world, "list", "--status", "bogus")
    assert code == 2
    assert "'bogus' is not one of" in words(err)
    response = world.client.get("/workloads", params={"status": "bogus"}, headers=ANA)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "status"]


def test_list_shows_work_that_was_preempted_and_requeued(world: World) -> None:
    code, out, _ = run(world, "list", "--status", "preempted")
    assert code == 0
    assert "v1" in words(out)
    _preempted_and_requeued(world)
    code, out, _ = run(world, "list", "--preempted", "--json")
    assert code == 0
    listed = {w["workload_id"]: w for w in json.loads(out)["workloads"]}
    assert sorted(listed) == ["again", "v1"]
    assert listed["again"]["status"] == "pending"
    assert listed["again"]["preemptions"] == 1


def _preempted_and_requeued(world: World) -> None:
    """again: lab/a, ran on n3 from 09:10, preempted at 09:20 (drain) and requeued."""
    on_n3 = Placement(nodes=(NodeGpus(node="n3", gpus=(0,)),))
    world.fact(submitted("again", budget="lab/a", pools=("p",), gpus=1, submitter="ana"), T0)
    at = T0 + timedelta(minutes=10)
    placed = WorkloadPlaced(
        workload_id="again", attempt=1, pool="p", placement=on_n3, allocated=True, command_id="x"
    )
    world.fact(placed, at)
    world.fact(
        WorkloadStarted(workload_id="again", attempt=1, pool="p", placement=on_n3, allocated=True),
        at,
    )
    decision = DecisionRecord(pass_id=9, input_position=(), reason="drain")
    command = PreemptCommand(
        command_id="preempt:again:1",
        cluster="c",
        pool="p",
        workload_id="again",
        attempt=1,
        requeue=True,
        decision=decision,
    )
    world.fact(command, at + timedelta(minutes=10))
    world.fact(
        WorkloadPreempted(workload_id="again", attempt=1, command_id=command.command_id, ran_s=600),
        at + timedelta(minutes=10),
    )
    world.fact(
        WorkloadRequeued(
            workload_id="again", attempt=1, original_submit_time=T0, reason="preempted"
        ),
        at + timedelta(minutes=11),
    )


def _finished(world: World) -> None:
    """f1: lab/a, 2 GPUs on n2 from 09:50 to 10:50, failed with exit code 3, charged 7,200."""
    on_n2 = Placement(nodes=(NodeGpus(node="n2", gpus=(2, 3)),))
    world.fact(
        submitted("f1", budget="lab/a", pools=("p",), gpus=2, min_runtime_s=600, submitter="ana"),
        T0,
    )
    start, end = T0 + timedelta(minutes=50), T0 + timedelta(minutes=110)
    world.fact(
        WorkloadPlaced(
            workload_id="f1", attempt=1, pool="p", placement=on_n2, allocated=True, command_id="c"
        ),
        start,
    )
    world.fact(
        WorkloadStarted(workload_id="f1", attempt=1, pool="p", placement=on_n2, allocated=True),
        start,
    )
    world.fact(WorkloadFinished(workload_id="f1", attempt=1, outcome="failed", exit_code=3), end)
    world.fact(
        LedgerCharge(
            charge_id=charge_id("f1", 1, int(T0.timestamp()) // 3600),
            workload_id="f1",
            budget="lab/a",
            pool="p",
            bucket_start=T0,
            kind="allocated",
            debit_account="budget:lab/a",
            credit_account="capacity:p",
            gpu_seconds=7200,
            amount=7200,
        ),
        end,
    )


def test_history_lists_finished_work_like_sacct(world: World) -> None:
    _finished(world)
    code, out, err = run(world, "history")
    assert code == 0, err
    rows = [words(line) for line in out.splitlines() if " f1 " in line or " v1 " in line]
    assert rows[0].startswith("f1 - lab/a ana failed 3 01:00:00 2 2.00 0.00 0 n2")
    assert rows[1].startswith("v1 - lab/b bo preempted - 00:29:00 4 0.00 0.00 1 n1")
    assert "r1" not in words(out)  # running: not finished
    code, out, _ = run(world, "history", "--me", "--json")
    [f1] = json.loads(out)["workloads"]
    assert (f1["exit_code"], f1["elapsed_s"], f1["charged_gpu_s"]) == (3, 3600, 7200)
    assert f1["ended_at"] == "2026-11-02T10:50:00Z"


def test_list_shows_elapsed_time_left_and_nodes(world: World) -> None:
    code, out, _ = run(world, "list", "--status", "running")
    assert code == 0
    [r2] = [words(line) for line in out.splitlines() if " r2 " in line]
    assert "r2 - lab/a ana running 2 00:01:40 00:58:20 0 n2" in r2
    assert NOW.hour == 11


# -- nodes ----------------------------------------------------------------------------------------
def test_cordon_reasons_are_shown(world: World) -> None:
    code, out, _ = run(world, "nodes")
    assert code == 0
    assert "firmware" in words(out)
    code, out, _ = run(world, "nodes", "--json")
    n3 = next(n for n in json.loads(out)["nodes"] if n["node"] == "n3")
    assert (n3["cordon_reason"], n3["cordoned_by"]) == ("firmware", "admin")
    assert n3["cordoned_at"] == "2026-11-01T09:00:00Z"
    code, _, err = run(world, "cordon", "n1", "--reason", "bad fan", token="admin-token")
    assert code == 0, err
    code, out, _ = run(world, "nodes", "-R")
    assert code == 0
    lines = [words(line) for line in out.splitlines() if " n1 " in line or " n3 " in line]
    assert lines[0].startswith("bad fan admin 2026-11-02T11:00:00Z n1 draining")
    assert lines[1].startswith("firmware admin 2026-11-01T09:00:00Z n3 cordoned")
    assert " n2 " not in out


# -- share ----------------------------------------------------------------------------------------
def test_share_has_a_fairshare_factor(world: World) -> None:
    code, out, _ = run(world, "share", "--json")
    assert code == 0
    figures = {b["budget"]: b["pools"]["p"] for b in json.loads(out)["budgets"]}
    assert 0.5 < figures["lab/a"]["fairshare_factor"] <= 1
    assert figures["lab/b"]["fairshare_factor"] == pytest.approx(
        2 ** -figures["lab/b"]["usage_ratio"], abs=1e-6
    )
    _, out, _ = run(world, "share")
    assert "FAIRSHARE" in out
    assert "no read models" in words(out)


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("token", "hint"),
    [
        ("", "no token given: pass --token TOKEN or set FAIRSHARE_TOKEN"),
        ("nope-nope", "the API does not know this token: check --token or FAIRSHARE_TOKEN"),
    ],
)
def test_a_refused_token_names_the_cli_options(world: World, token: str, hint: str) -> None:
    code, _, err = run(world, "queue", token=token)
    assert code == 1
    assert f"HTTP 401: {hint}" in words(err)
    assert "Authorization" not in err
