"""Fairshare over a real Slurm (``bash .ci/start-slurm``): workloads submitted through the API
run as Slurm jobs, are preempted through Slurm for an under-served budget once their contract
is over, requeued and finished; a node drained in Slurm is cordoned in Fairshare, and one
cordoned in Fairshare is drained in Slurm; an agent restarted mid-job adopts the job; GPUs a job
submitted around Fairshare holds are reported occupied and waited for."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from events import TopicKind
from events.models import GpuHeartbeat
from services.agents.host import read_history
from services.agents.slurm_agent import FOREIGN_OCCUPANT
from services.agents.slurm_commands import SlurmCli, SlurmError
from services.agents.slurm_parse import parse_sinfo
from tests.integration.kafka_bus import KafkaBus
from tests.integration.slurm_fixtures import (
    ADMIN,
    ANA,
    BO,
    SlurmCluster,
    require_slurm,
    running_stack,
    wait_until,
)

pytestmark = [pytest.mark.broker, pytest.mark.slurm]


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """Session-wide, so that it is checked before the broker starts: a missing Slurm skips
    at once."""
    return require_slurm()


def _script(out: Path, body: str) -> str:
    """A job that appends what it does to ``out``; the shell runs it on the Slurm node."""
    return f"out={out}; {body}"


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_a_workload_runs_in_slurm_is_preempted_for_an_underserved_budget_then_finishes(
    slurm_cluster: SlurmCluster, bus: KafkaBus, tmp_path: Path
) -> None:
    total = sum(slurm_cluster.gpus.values())
    record_a, record_b = tmp_path / "a.txt", tmp_path / "b.txt"
    # attempt 1 runs until it is told to stop (SIGTERM through Slurm); attempt 2 finishes
    command_a = _script(
        record_a,
        'echo "start $FAIRSHARE_ATTEMPT $SLURM_JOB_ID" >> "$out"; '
        'if [ "$FAIRSHARE_ATTEMPT" = 1 ]; then '
        "trap 'echo term >> \"$out\"; exit 143' TERM; sleep 300 & wait; fi; "
        'echo done >> "$out"',
    )
    command_b = _script(record_b, 'echo "b $SLURM_JOB_NODELIST" >> "$out"')
    with running_stack(bus, tmp_path / "slurm-out") as stack:
        stack.seed_lab()
        stack.start_agent()
        stack.start_scheduler()
        api = stack.start_api()
        wait_until(lambda: stack.api().get("/nodes", headers=ADMIN).json()["nodes"], "nodes")

        # lab/a takes the whole pool, funded for 5 s
        response = api.post(
            "/workloads",
            json={
                "workload_id": "wa",
                "budget": "lab/a",
                "pools": [stack.pool],
                "gpus": total,
                "gang": "whole-nodes",
                "min_runtime_s": 5,
                "spec": {"command": command_a},
            },
            headers=ANA,
        )
        assert response.status_code in (200, 201, 202), response.text
        wait_until(lambda: stack.workload("wa").get("status") == "running", "wa to run")
        wait_until(lambda: _lines(record_a) != [], "wa's job to write its file")
        [job] = stack.jobs()
        assert job.name == f"wa+1+{stack.cluster}"
        assert set(job.nodes) == set(slurm_cluster.nodes), "pinned to its placement"

        # lab/b, with no usage, asks for one node: lab/a's contract is over after 5 s
        first_node = min(slurm_cluster.gpus)
        response = api.post(
            "/workloads",
            json={
                "workload_id": "wb",
                "budget": "lab/b",
                "pools": [stack.pool],
                "gpus": slurm_cluster.gpus[first_node],
                "min_runtime_s": 5,
                "spec": {"command": command_b},
            },
            headers=BO,
        )
        assert response.status_code in (200, 201, 202), response.text
        wait_until(lambda: stack.workload("wb").get("status") == "succeeded", "wb to finish", 120)
        wait_until(
            lambda: stack.workload("wa").get("status") == "succeeded", "wa to finish again", 120
        )
        wa = stack.workload("wa")
        assert wa["attempt"] == 2, "preempted, requeued, placed again"

    lines = _lines(record_a)
    assert [line.split()[0] for line in lines] == ["start", "term", "start", "done"], lines
    first_job, second_job = lines[0].split()[2], lines[2].split()[2]
    assert first_job != second_job, "each attempt is its own Slurm job"
    assert len(_lines(record_b)) == 1
    assert stack.agent is not None
    assert stack.agent.published["preempted"] == 1
    assert stack.agent.published["finished"] == 2
    assert stack.agent.fenced_commands == 0


def test_drains_pass_between_slurm_and_fairshare(
    slurm_cluster: SlurmCluster, bus: KafkaBus, tmp_path: Path
) -> None:
    cli = SlurmCli()
    slurm_node, fairshare_node = sorted(slurm_cluster.nodes)[:2]

    def drained_in_slurm(node: str) -> bool:
        return parse_sinfo(cli.list_nodes(None))[node].drained

    with running_stack(bus, tmp_path / "slurm-out", drain_in_slurm=True) as stack:
        stack.start_agent()
        stack.start_scheduler()
        stack.start_api()
        wait_until(lambda: bool(stack.node(slurm_node)["last_heartbeat"]), "a heartbeat")
        try:
            # drained in Slurm: cordoned, then drained (it is empty), in Fairshare
            cli.set_node_state(slurm_node, "DRAIN", "disk check by ops")
            wait_until(lambda: stack.node(slurm_node)["cordoned"], "the cordon from Slurm")
            wait_until(lambda: stack.node(slurm_node)["drained"], "the empty node drained")
            cli.set_node_state(slurm_node, "RESUME", None)
            wait_until(lambda: not stack.node(slurm_node)["cordoned"], "the cordon lifted")

            # cordoned in Fairshare: drained in Slurm with Fairshare's reason, and back
            response = stack.api().post(
                f"/nodes/{fairshare_node}/cordon", json={"reason": "firmware"}, headers=ADMIN
            )
            assert response.status_code in (200, 202), response.text
            wait_until(lambda: drained_in_slurm(fairshare_node), "the drain in Slurm")
            reason = parse_sinfo(cli.list_nodes(None))[fairshare_node].reason
            assert reason == "fairshare: cordoned by admin: firmware"
            assert stack.node(fairshare_node)["cordoned"]
            response = stack.api().post(f"/nodes/{fairshare_node}/uncordon", headers=ADMIN)
            assert response.status_code in (200, 202), response.text
            wait_until(lambda: not drained_in_slurm(fairshare_node), "the resume in Slurm")
            assert stack.agent is not None
            assert stack.agent.published["cordoned"] == 1, "its own drain is not echoed back"
        finally:
            for node in (slurm_node, fairshare_node):
                if drained_in_slurm(node):
                    cli.set_node_state(node, "RESUME", None)


def test_an_agent_restarted_mid_job_adopts_it(
    slurm_cluster: SlurmCluster, bus: KafkaBus, tmp_path: Path
) -> None:
    record, release = tmp_path / "w.txt", tmp_path / "release"
    command = _script(
        record,
        f'echo "start $SLURM_JOB_ID" >> "$out"; '
        f"while [ ! -e {release} ]; do sleep 0.2; done; "
        'echo done >> "$out"; exit 7',
    )
    with running_stack(bus, tmp_path / "slurm-out") as stack:
        stack.seed_lab()
        stack.start_agent()
        stack.start_scheduler()
        api = stack.start_api()
        response = api.post(
            "/workloads",
            json={
                "workload_id": "wr",
                "budget": "lab/a",
                "pools": [stack.pool],
                "gpus": 2,
                "min_runtime_s": 60,
                "spec": {"command": command},
            },
            headers=ANA,
        )
        assert response.status_code in (200, 201, 202), response.text
        wait_until(lambda: _lines(record) != [], "the job to start")
        stack.stop_agent()  # the job goes on in Slurm
        assert [j.state for j in stack.jobs()] == ["RUNNING"]

        second = stack.start_agent()
        wait_until(lambda: second.runs.get("wr") is not None, "the restarted agent to adopt it")
        assert second.runs["wr"].adopted
        release.touch()
        wait_until(lambda: stack.workload("wr").get("status") == "failed", "its end, exit 7")
        assert second.published["lost"] == 0
        assert second.published["started"] == 0, "started once, by the first incarnation"
        assert second.published["finished"] == 1

    assert len(stack.jobs()) == 1, "never submitted twice"
    assert [line.split()[0] for line in _lines(record)] == ["start", "done"]


def test_gpus_taken_around_fairshare_are_reported_and_waited_for(
    slurm_cluster: SlurmCluster, bus: KafkaBus, tmp_path: Path
) -> None:
    cli = SlurmCli()
    node = min(slurm_cluster.gpus)  # where the scheduler's best fit puts a whole-node job
    gpus = slurm_cluster.gpus[node]
    sbatch = ["sbatch", "--parsable", "--job-name=around fairshare", "--output=/dev/null"]
    foreign = cli.submit(
        [*sbatch, f"--nodelist={node}", f"--gres=gpu:{gpus}"], "#!/bin/sh\nsleep 300\n"
    )
    try:
        with running_stack(bus, tmp_path / "slurm-out") as stack:
            stack.seed_lab()
            stack.start_agent()
            stack.start_scheduler()
            api = stack.start_api()

            def foreign_in_heartbeats() -> bool:
                beats = read_history(bus.broker.bootstrap, bus.topics, [TopicKind.HEARTBEATS])
                return any(
                    isinstance(e.data, GpuHeartbeat)
                    and e.data.node == node
                    and sum(g.occupant == FOREIGN_OCCUPANT for g in e.data.gpus) == gpus
                    for e in beats
                )

            wait_until(foreign_in_heartbeats, "a heartbeat naming the foreign GPUs")
            response = api.post(
                "/workloads",
                json={
                    "workload_id": "wf",
                    "budget": "lab/a",
                    "pools": [stack.pool],
                    "gpus": gpus,
                    "min_runtime_s": 0,
                    "spec": {"command": ["true"]},
                },
                headers=ANA,
            )
            assert response.status_code in (200, 201, 202), response.text
            wait_until(lambda: stack.workload("wf").get("status") == "placed", "the placement")
            assert stack.workload("wf")["placement"][0]["node"] == node
            time.sleep(3)
            assert stack.workload("wf")["status"] == "placed", "waits: not started"
            assert stack.jobs() == [], "not submitted to pend in Slurm"
            cli.cancel(foreign)
            wait_until(lambda: stack.workload("wf").get("status") == "succeeded", "wf to run")
    finally:
        with contextlib.suppress(SlurmError):
            cli.cancel(foreign)
