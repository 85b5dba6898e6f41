"""``why`` leads with one sentence and keeps the details for ``--verbose``; what it says about
burst work and about a preemption does not contradict itself."""

from __future__ import annotations

from datetime import timedelta

import pytest

from events.models import (
    BudgetStanding,
    DecisionRecord,
    InputPosition,
    NodeGpus,
    Placement,
    PreemptCommand,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadStarted,
)
from tests.factories import submitted
from tests.unit.test_api import ANA, NOW, World, build_world
from tests.unit.test_cli_slurm import words
from tests.unit.test_client import run


@pytest.fixture
def world() -> World:
    return build_world()


def test_why_pending_is_one_sentence_with_the_details_on_request(world: World) -> None:
    code, out, _ = run(world, "why", "pa1")
    assert code == 0
    assert out.splitlines() == [
        "pa1: pending in p (position 1 of 2): waits for 4 GPU(s) on one node; n1 can free them "
        "at 11:50 UTC (in 50 min), when r1's contract ends"
    ]
    code, out, _ = run(world, "why", "pa1", "--verbose")
    assert "[insufficient-capacity] needs 4 GPU(s) on one node" in out
    assert "[cordoned-nodes]" in out
    why = world.client.get("/workloads/pa1/why", headers=ANA).json()
    assert why["summary"] == out.splitlines()[0].removeprefix("pa1: ")
    assert why["pending"][0]["reason"] == "contract"


def test_burst_work_is_not_said_to_wait_for_budgets_ranking_behind_it(world: World) -> None:
    """lab/a ranks first, yet its burst job comes after lab/b's funded one: funded work comes
    before any burst work, which is what the reason must say (not that lab/b ranks ahead)."""
    world.fact(
        submitted("burst", budget="lab/a", pools=("p",), gpus=4, min_runtime_s=0, submitter="ana"),
        NOW - timedelta(minutes=5),
    )
    code, out, _ = run(world, "why", "burst", "-v")
    assert code == 0
    text = words(out)
    assert "2 funded workload(s) come first (lab/a, lab/b): burst work is considered" in text
    assert "[fair-share]" not in text
    assert "ranking ahead" not in text
    assert text.startswith(
        "burst: pending in p (position 3 of 3): burst work: waits for 4 GPU(s) on one node to "
        "be idle (the largest free block is 2 on n2); it never preempts"
    )
    queue = world.client.get("/queue", headers=ANA).json()["pools"][0]["pending"]
    assert [(e["workload_id"], e["reason"]) for e in queue] == [
        ("pa1", "contract"),
        ("pb1", "fits-now"),
        ("burst", "unallocated"),
    ]


def _burst_preempted_by_its_own_budget(world: World) -> None:
    on_n2 = Placement(nodes=(NodeGpus(node="n2", gpus=(2, 3)),))
    at = NOW - timedelta(minutes=30)
    world.fact(submitted("bursty", budget="lab/a", pools=("p",), gpus=2, min_runtime_s=0), at)
    placed = WorkloadPlaced(
        workload_id="bursty", attempt=1, pool="p", placement=on_n2, allocated=False, command_id="b"
    )
    world.fact(placed, at)
    world.fact(
        WorkloadStarted(
            workload_id="bursty", attempt=1, pool="p", placement=on_n2, allocated=False
        ),
        at,
    )
    standing = BudgetStanding(budget="lab/a", rank=1, share=0.5, usage_gpu_s=0, usage_ratio=0.0)
    positions = tuple(
        InputPosition(topic="fairshare.workloads", partition=p, offset=10 + p) for p in range(18)
    )
    command = PreemptCommand(
        command_id="preempt:bursty:1",
        cluster="c",
        pool="p",
        workload_id="bursty",
        attempt=1,
        requeue=False,
        decision=DecisionRecord(
            pass_id=7,
            input_position=positions,
            reason="preempt-for",
            preemptor="pa1",
            budgets=(standing, standing),
        ),
    )
    world.fact(command, at + timedelta(minutes=5))
    world.fact(
        WorkloadPreempted(workload_id="bursty", attempt=1, command_id=command.command_id, ran_s=0),
        at + timedelta(minutes=5),
    )


def test_why_preempted_says_it_once_and_keeps_the_record_for_verbose(world: World) -> None:
    _burst_preempted_by_its_own_budget(world)
    code, out, _ = run(world, "why", "bursty")
    assert code == 0
    assert out.splitlines() == [
        "bursty: preempted to make room for pa1 (lab/a): it ran as burst work (min_runtime 0), "
        "which funded work may always preempt"
    ]
    code, out, _ = run(world, "why", "bursty", "--verbose")
    assert out.count("lab/a: rank 1") == 1
    assert "pass 7, decided at fairshare.workloads/0@10" in out
