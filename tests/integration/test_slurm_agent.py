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
from events.models import GpuHeartbeat, NodeForeignGpus
from services.agents.serve import read_history
from services.agents.slurm.agent import FOREIGN_OCCUPANT
from services.agents.slurm.commands import SlurmCli, SlurmError
from services.agents.slurm.parse import parse_sinfo
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
    records = {w: tmp_path / f"{w}.txt" for w in ("wa1", "wa2")}
    record_b = tmp_path / "b.txt"

    def command_a(record: Path) -> str:
        """Attempt 1 runs until it is told to stop (SIGTERM through Slurm); attempt 2 ends."""
        return _script(
            record,
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

        # lab/a takes the whole pool with two one-node jobs, each funded for 5 s. (One gang of
        # the whole pool would not do: stopping it would leave lab/a below its entitlement,
        # which the churn rules allow only a gang that has starved for an hour.)
        node_gpus = min(slurm_cluster.gpus.values())
        for workload_id, record in records.items():
            response = api.post(
                "/workloads",
                json={
                    "workload_id": workload_id,
                    "budget": "lab/a",
                    "pools": [stack.pool],
                    "gpus": node_gpus,
                    "min_runtime_s": 5,
                    "spec": {"command": command_a(record)},
                },
                headers=ANA,
            )
            assert response.status_code in (200, 201, 202), response.text
        for workload_id, record in records.items():
            wait_until(
                lambda w=workload_id: stack.workload(w).get("status") == "running",
                f"{workload_id} to run",
            )
            wait_until(lambda r=record: _lines(r) != [], f"{workload_id}'s job to write")
        jobs = {job.name: job for job in stack.jobs()}
        assert set(jobs) == {f"{w}+1+{stack.cluster}" for w in records}
        assert all(len(job.nodes) == 1 for job in jobs.values()), "pinned to their placements"

        # lab/b, holding nothing of its half, asks for one node: lab/a's contracts are over
        # after 5 s and it holds more than its half
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
        attempts = {w: stack.workload(w)["attempt"] for w in records}
        [victim] = [w for w, attempt in attempts.items() if attempt == 2]
        wait_until(
            lambda: stack.workload(victim).get("status") == "succeeded", "the victim to finish", 120
        )
        [survivor] = [w for w in records if w != victim]
        assert stack.workload(survivor)["attempt"] == 1, "one run was enough to stop"
        # Read while the survivor still runs: leaving the stack cancels it (scancel), and its
        # trap then writes "term" a few milliseconds later, a race with a read after the block.
        survivor_lines = _lines(records[survivor])

    lines = _lines(records[victim])
    assert [line.split()[0] for line in lines] == ["start", "term", "start", "done"], lines
    first_job, second_job = lines[0].split()[2], lines[2].split()[2]
    assert first_job != second_job, "each attempt is its own Slurm job"
    assert [line.split()[0] for line in survivor_lines] == ["start"], "never signalled"
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


def test_gpus_taken_around_fairshare_are_reported_and_never_placed_onto(
    slurm_cluster: SlurmCluster, bus: KafkaBus, tmp_path: Path
) -> None:
    """Jobs sent to Slurm around Fairshare hold every node's GPUs: the agent states them
    (heartbeats name them foreign, and a ``NodeForeignGpus`` fact per node), the scheduler
    places nothing onto them (the workload stays pending, nothing is sent to pend in Slurm),
    and once one node is given back the workload is placed there and runs."""
    cli = SlurmCli()
    node = min(slurm_cluster.gpus)
    gpus = slurm_cluster.gpus[node]
    # around Fairshare: to "plain", the same nodes but not Fairshare's partition (Fairshare's
    # job_submit plugin would refuse or hold a job sent to "gpu")
    sbatch = ["sbatch", "--parsable", "--job-name=around fairshare", "--output=/dev/null"]
    sbatch.append("--partition=plain")
    foreign = {
        name: cli.submit(
            [*sbatch, f"--nodelist={name}", f"--gres=gpu:{count}"], "#!/bin/sh\nsleep 300\n"
        )
        for name, count in sorted(slurm_cluster.gpus.items())
    }
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

            def foreign_stated() -> bool:
                facts = read_history(bus.broker.bootstrap, bus.topics, [TopicKind.CLUSTER])
                held: dict[str, int] = {}
                for e in facts:
                    if isinstance(e.data, NodeForeignGpus):
                        held[e.data.node] = e.data.gpus
                return held == dict(slurm_cluster.gpus)

            wait_until(foreign_in_heartbeats, "a heartbeat naming the foreign GPUs")
            wait_until(foreign_stated, "every node's foreign GPUs stated")
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
            time.sleep(3)
            assert stack.workload("wf")["status"] == "pending", "never placed onto foreign GPUs"
            assert stack.jobs() == [], "not submitted to pend in Slurm"
            cli.cancel(foreign[node])
            wait_until(lambda: stack.workload("wf").get("status") == "succeeded", "wf to run")
            assert stack.workload("wf")["placement"][0]["node"] == node
    finally:
        for job in foreign.values():
            with contextlib.suppress(SlurmError):
                cli.cancel(job)
