"""The Slurm adapter against a fake Slurm that prints the agent's formats: submissions, ends
with their exit codes, stops (SIGTERM, then a kill after the grace), adoption after a restart
without submitting twice, jobs pending too long, a Slurm that stops answering."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from services.agents.adapter import PlacementSpec, RunRequest
from services.agents.run_as import RunAs, UnixIdentity
from services.agents.slurm.adapter import SlurmAdapter
from services.agents.slurm.commands import SlurmError
from services.agents.slurm.parse import RunTag, job_name

NODE0, NODE1 = "c1-node-00", "c1-node-01"
CLUSTER = "c1"


@dataclass
class FakeNode:
    name: str
    gpus: int
    state: str = "idle"
    reason: str = ""
    reason_time: str = ""
    gres: str = ""


@dataclass
class FakeJob:
    job_id: str
    name: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    gpus_per_job: int
    state: str = "RUNNING"
    wait_status: int = 0
    reason: str = "None"
    script: str = ""
    argv: tuple[str, ...] = ()

    def holds(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "SUSPENDED")

    def gpus_on(self, node: str) -> int:
        if node not in self.nodes:
            return 0
        return self.gpus_per_node or -(-self.gpus_per_job // len(self.nodes))


class FakeSlurm:
    """A Slurm in memory, read through the same text the real commands print. Jobs run when
    their nodes have the GPUs free and take no new job while drained; a SIGTERM ends a job at
    once unless ``ignore_term``; ``reachable = False`` plays a controller that does not answer."""

    def __init__(self, nodes: dict[str, int] | None = None) -> None:
        sizes = nodes if nodes is not None else {NODE0: 4, NODE1: 4}
        self.nodes = {name: FakeNode(name, gpus) for name, gpus in sizes.items()}
        self.jobs: dict[str, FakeJob] = {}
        self.calls: list[tuple[str, ...]] = []
        self.reachable = True
        self.ignore_term = False
        self.completions: str | None = None
        self.refuse_submit: str | None = None
        #: What ``scontrol show topology`` answers ("" without a topology plugin).
        self.topology = ""
        self._next_id = 100

    # -- SlurmControl ---------------------------------------------------------------------
    def _check(self) -> None:
        if not self.reachable:
            raise SlurmError("sinfo exited 1: Unable to contact slurm controller")

    def list_nodes(self, partition: str | None) -> str:
        self._check()
        lines = []
        for node in self.nodes.values():
            used = sum(job.gpus_on(node.name) for job in self.jobs.values() if job.holds())
            gres = node.gres or (f"gpu:{node.gpus}" if node.gpus else "(null)")
            lines.append(
                f"{node.name}|{node.state}|{gres}|gpu:{used}|{node.reason_time or 'Unknown'}|"
                f"{node.reason or 'none'}"
            )
        return "\n".join(lines) + "\n"

    def list_jobs(self) -> str:
        self._check()
        lines = []
        for job in self.jobs.values():
            nodes = ",".join(job.nodes) if job.state != "PENDING" else ""
            per_node = f"gres:gpu:{job.gpus_per_node}" if job.gpus_per_node else "N/A"
            per_job = f"gres:gpu:{job.gpus_per_job}" if job.gpus_per_job else "N/A"
            lines.append(
                f"{job.job_id}|{job.state}|{job.wait_status}|{nodes}|{per_node}|{per_job}|"
                f"{job.reason}|{job.name}"
            )
        return "\n".join(lines) + "\n"

    def submit(self, argv: Sequence[str], script: str) -> str:
        self._check()
        self.calls.append(("sbatch", *argv))
        if self.refuse_submit:
            raise SlurmError(f"sbatch exited 1: {self.refuse_submit}")
        options = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        gres = options.get("--gres", "gpu:0").split(":")[-1]
        self._next_id += 1
        job = FakeJob(
            job_id=str(self._next_id),
            name=options["--job-name"],
            nodes=tuple(options["--nodelist"].split(",")),
            gpus_per_node=int(gres),
            gpus_per_job=int(options.get("--gpus", "0")),
            script=script,
            argv=tuple(argv),
            state="PENDING",
            reason="Resources",
        )
        self.jobs[job.job_id] = job
        self.schedule()
        return job.job_id

    def signal(self, job_id: str, signal_name: str) -> None:
        self._check()
        self.calls.append(("signal", signal_name, job_id))
        job = self.jobs[job_id]
        if not job.holds():
            raise SlurmError("scancel: error: Job is not running")
        if signal_name == "KILL" or not self.ignore_term:
            self.end(job_id, 9 if signal_name == "KILL" else 15, "FAILED")

    def cancel(self, job_id: str) -> None:
        self._check()
        self.calls.append(("cancel", job_id))
        job = self.jobs[job_id]
        if job.state == "PENDING":
            self.end(job_id, 0, "CANCELLED")
        elif job.holds():
            self.end(job_id, 15, "CANCELLED")

    def set_node_state(self, node: str, state: str, reason: str | None) -> None:
        self._check()
        self.calls.append(("scontrol", node, state, reason or ""))
        if state == "DRAIN":
            self.drain(node, reason or "")
        elif state == "RESUME":
            self.nodes[node].state, self.nodes[node].reason = "idle", ""

    def read_completions(self) -> str | None:
        return self.completions

    def show_topology(self) -> str:
        return self.topology

    # -- playing the cluster ----------------------------------------------------------------
    def free(self, node: str) -> int:
        held = sum(job.gpus_on(node) for job in self.jobs.values() if job.holds())
        return self.nodes[node].gpus - held

    def schedule(self) -> None:
        for job in self.jobs.values():
            if job.state != "PENDING":
                continue
            ready = all(
                self.free(node) >= job.gpus_on(node)
                and "drain" not in self.nodes[node].state
                and "down" not in self.nodes[node].state
                for node in job.nodes
            )
            if ready:
                job.state, job.reason = "RUNNING", "None"

    def end(self, job_id: str, wait_status: int, state: str | None = None) -> None:
        job = self.jobs[job_id]
        job.wait_status = wait_status
        job.state = state or ("COMPLETED" if wait_status == 0 else "FAILED")
        job.reason = "None" if wait_status == 0 else "NonZeroExitCode"
        self.schedule()

    def exit(self, name: str, code: int) -> None:
        """The job of this name exits by itself with ``code``."""
        self.end(self.job_named(name).job_id, code << 8)

    def job_named(self, name: str) -> FakeJob:
        [job] = [j for j in self.jobs.values() if j.name == name]
        return job

    def foreign(self, node: str, gpus: int, name: str = "someone's job") -> str:
        self._next_id += 1
        job = FakeJob(str(self._next_id), name, (node,), gpus, 0)
        self.jobs[job.job_id] = job
        return job.job_id

    def drain(self, node: str, reason: str, at: str = "2026-12-01T05:41:54") -> None:
        self.nodes[node].state = "mixed+drain"
        self.nodes[node].reason, self.nodes[node].reason_time = reason, at

    def submissions(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[0] == "sbatch"]


class Tick:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(
    wid: str = "w1",
    attempt: int = 1,
    placement: PlacementSpec = ((NODE0, (0, 1)),),
    **spec: object,
) -> RunRequest:
    spec.setdefault("command", ["true"])
    return RunRequest(wid, attempt, placement, spec, submitter="bo")


def adapter(slurm: FakeSlurm, clock: Tick | None = None, **kwargs: object) -> SlurmAdapter:
    return SlurmAdapter(
        slurm,
        cluster=CLUSTER,
        refresh_s=0.0,
        clock=clock or Tick(),
        **kwargs,  # type: ignore[arg-type]
    )


def name(wid: str = "w1", attempt: int = 1) -> str:
    return job_name(RunTag(wid, attempt, CLUSTER))


# -- nodes -----------------------------------------------------------------------------------


def test_nodes_with_gpus_are_offered_with_their_gres_type() -> None:
    slurm = FakeSlurm({NODE0: 4, NODE1: 8, "cpu-only": 0, "bad name!": 2})
    slurm.nodes[NODE1].gres = "gpu:h100:8(S:0-1)"
    specs = adapter(slurm).nodes()
    assert [(s.name, s.gpus, s.gpu_type) for s in specs] == [
        (NODE0, 4, "gpu"),
        (NODE1, 8, "h100"),
    ]
    forced = SlurmAdapter(slurm, cluster=CLUSTER, gpu_type="a100").nodes()
    assert {s.gpu_type for s in forced} == {"a100"}


def test_no_gpu_or_no_answer_refuses_to_start() -> None:
    with pytest.raises(SlurmError, match="no node with GPUs"):
        adapter(FakeSlurm({"cpu": 0}))
    silent = FakeSlurm()
    silent.reachable = False
    with pytest.raises(SlurmError, match="Unable to contact"):
        adapter(silent)


# -- runs ------------------------------------------------------------------------------------


def test_a_run_is_submitted_once_and_ends_once_with_its_exit_code() -> None:
    slurm = FakeSlurm()
    a = adapter(slurm)
    a.start(request())
    [call] = slurm.submissions()
    assert f"--job-name={name()}" in call
    assert a.poll_ended() == []
    slurm.exit(name(), 3)
    [ended] = a.poll_ended()
    assert (ended.workload_id, ended.attempt, ended.exit_code) == ("w1", 1, 3)
    assert "exited with status 3" in ended.message
    assert a.poll_ended() == []


def test_a_restarted_agent_neither_submits_again_nor_loses_the_job() -> None:
    slurm = FakeSlurm()
    adapter(slurm).start(request())
    again = adapter(slurm)  # a new incarnation
    again.start(request())  # its start never reached the log: started again
    assert len(slurm.submissions()) == 1
    assert again.adopt(request(wid="w1"))
    slurm.exit(name(), 0)
    assert [e.exit_code for e in again.poll_ended()] == [0]


def test_adopt_finds_a_job_by_name_or_its_completion_or_says_it_is_gone() -> None:
    slurm = FakeSlurm()
    a = adapter(slurm)
    assert not a.adopt(request("ghost"))
    slurm.completions = (
        f"JobId=7 UserId=root(0) GroupId=root(0) Name={name('done')} JobState=COMPLETED "
        "Partition=gpu DerivedExitCode=0:0 ExitCode=2:0\n"
    )
    assert a.adopt(request("done"))
    assert [(e.workload_id, e.exit_code) for e in a.poll_ended()] == [("done", 2)]


def test_a_stop_is_sigterm_then_a_kill_once_the_grace_is_over() -> None:
    slurm, clock = FakeSlurm(), Tick()
    slurm.ignore_term = True
    a = adapter(slurm, clock)
    a.start(request())
    job_id = slurm.job_named(name()).job_id
    a.stop("w1", 1, 30.0)
    a.stop("w1", 1, 30.0)  # repeated: nothing more
    a.stop("w1", 2, 30.0)  # another attempt: not this job
    assert [c for c in slurm.calls if c[0] != "sbatch"] == [("signal", "TERM", job_id)]
    clock.now += 29
    assert a.poll_ended() == []
    clock.now += 1
    assert a.poll_ended() == [], "the kill is sent; the end is read on the next listing"
    assert ("signal", "KILL", job_id) in slurm.calls
    [ended] = a.poll_ended()
    assert ended.exit_code == 137


def test_a_pending_job_is_cancelled_rather_than_signalled() -> None:
    slurm = FakeSlurm()
    slurm.foreign(NODE0, 4)
    a = adapter(slurm)
    a.start(request())
    assert slurm.job_named(name()).state == "PENDING"
    a.poll_ended()  # a listing with it pending
    a.stop("w1", 1, 30.0)
    assert ("cancel", slurm.job_named(name()).job_id) in slurm.calls
    [ended] = a.poll_ended()
    assert ended.exit_code is None
    assert "CANCELLED before it ran" in ended.message


def test_a_job_pending_too_long_is_cancelled_with_slurms_reason() -> None:
    slurm, clock = FakeSlurm(), Tick()
    slurm.foreign(NODE0, 3)
    a = adapter(slurm, clock, pending_timeout_s=600.0)
    a.start(request())
    clock.now += 599
    assert a.poll_ended() == []
    clock.now += 1
    assert a.poll_ended() == []
    [ended] = a.poll_ended()
    assert ended.exit_code is None
    assert "pending for 600 s (Resources)" in ended.message


def test_a_job_that_vanishes_from_slurm_ends_with_an_unknown_exit() -> None:
    slurm, clock = FakeSlurm(), Tick()
    a = adapter(slurm, clock)
    a.start(request())
    del slurm.jobs[slurm.job_named(name()).job_id]
    assert a.poll_ended() == [], "just submitted: a listing may not show it yet"
    clock.now += 10
    [ended] = a.poll_ended()
    assert ended.exit_code is None
    assert "no longer listed" in ended.message


def test_a_spec_or_a_submission_slurm_refuses_fails_the_run_without_raising() -> None:
    slurm = FakeSlurm()
    a = adapter(slurm)
    a.start(RunRequest("w1", 1, ((NODE0, (0,)),), {}))
    slurm.refuse_submit = "Invalid partition name specified"
    a.start(request("w2"))
    ended = a.poll_ended()
    assert [(e.workload_id, e.exit_code) for e in ended] == [("w1", None), ("w2", None)]
    assert "spec.command" in ended[0].message
    assert "Invalid partition name specified" in ended[1].message
    assert len(slurm.submissions()) == 1


def test_run_as_submits_as_the_mapped_user_and_refuses_the_unmapped() -> None:
    ana = UnixIdentity("ana", 1001, 1001, (1001,), "/home/ana", "/bin/sh")
    slurm = FakeSlurm()
    a = adapter(slurm, run_as=RunAs({"bo": ana}))
    a.start(request("w1"))
    a.start(RunRequest("w2", 1, ((NODE0, (2,)),), {"command": "true"}, submitter="eve"))
    [call] = slurm.submissions()
    assert "--uid=1001" in call
    [refused] = a.poll_ended()
    assert (refused.workload_id, refused.exit_code) == ("w2", None)
    assert "no unix user" in refused.message


def test_while_slurm_does_not_answer_nodes_are_unreachable_and_nothing_ends() -> None:
    slurm, clock = FakeSlurm(), Tick()
    a = adapter(slurm, clock)
    a.start(request())
    slurm.exit(name(), 0)
    slurm.reachable = False
    assert a.poll_ended() == []
    assert not a.reachable(NODE0)
    slurm.reachable = True
    clock.now += 60
    assert [e.exit_code for e in a.poll_ended()] == [0]
    assert a.reachable(NODE0)


def test_down_nodes_are_unreachable_and_readings_are_one_idle_sample_per_gpu() -> None:
    slurm = FakeSlurm()
    slurm.nodes[NODE1].state = "down+not_responding"
    a = adapter(slurm)
    a.poll_ended()
    assert a.reachable(NODE0)
    assert not a.reachable(NODE1)
    assert not a.reachable("elsewhere")
    assert [s.index for s in a.readings(NODE0)] == [0, 1, 2, 3]
    assert {s.utilisation_pct for s in a.readings(NODE0)} == {0.0}


def test_foreign_gpus_leave_out_this_clusters_own_jobs() -> None:
    slurm = FakeSlurm()
    a = adapter(slurm)
    a.start(request(placement=((NODE0, (0, 1)),)))
    slurm.foreign(NODE0, 1)
    slurm.foreign(NODE0, 1, name=job_name(RunTag("w9", 1, "another-cluster")))
    a.poll_ended()
    assert a.foreign_gpus(NODE0) == 2
    assert a.foreign_gpus(NODE1) == 0


def test_close_leaves_the_jobs_to_slurm() -> None:
    slurm = FakeSlurm()
    a = adapter(slurm)
    a.start(request())
    a.close()
    assert slurm.job_named(name()).state == "RUNNING"
    assert [c[0] for c in slurm.calls] == ["sbatch"]
    assert a.poll_ended() == []
