"""The local adapter really runs commands: CUDA_VISIBLE_DEVICES, exit codes, SIGTERM then
SIGKILL, virtual GPU slots without NVML, lost runs after a restart, and log paths that no
workload id can steer out of the log directory. (What every adapter does, it does too:
tests/unit/test_agent_adapter_contract.py.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from events.models import GpuHeartbeat, WorkloadFinished, WorkloadLost, WorkloadPreempted
from services.agents import GpuSample, LocalAdapter, RunEnded, RunRequest, open_nvml
from services.agents.adapter import run_label
from tests.unit.test_agents import (
    NODE0,
    FakeClock,
    Harness,
    place,
    preempt,
    submit,
    utc,
)
from tests.waiting import wait_until

NODE = NODE0  # the local node takes the simulated cluster's first name, for the helpers


class RealClock(FakeClock):
    """Wall time: real processes take real time."""

    def __call__(self) -> float:
        return time.time()

    def advance(self, seconds: float) -> None:
        return None


def local(tmp_path: Path, gpus: int = 4) -> LocalAdapter:
    return LocalAdapter(NODE, virtual_gpus=gpus, use_nvml=False, log_dir=tmp_path / "logs")


def until(h: Harness, condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Run the agent's rounds until ``condition()`` holds."""

    def after_a_round() -> object:
        h.tick()
        return condition()

    wait_until(after_a_round, "the agent's rounds to get there", timeout_s)


def wait_ended(adapter: LocalAdapter, timeout_s: float = 10.0) -> RunEnded:
    """The one run end the adapter reports next."""
    ended: list[RunEnded] = []

    def reported() -> bool:
        ended.extend(adapter.poll_ended())
        return bool(ended)

    wait_until(reported, "the run to end", timeout_s)
    [one] = ended
    return one


def request(command: object, gpus: tuple[int, ...] = (0,), **spec: object) -> RunRequest:
    return RunRequest("w1", 1, ((NODE, gpus),), spec={"command": command, **spec})


def test_the_command_sees_its_gpus_and_exit_0_is_success(tmp_path: Path) -> None:
    h = Harness(local(tmp_path), clock=RealClock(), heartbeat_s=0.05)
    out = tmp_path / "visible"
    submit(h, "w1", gpus=2, command=f"echo $CUDA_VISIBLE_DEVICES > {out}")
    place(h, "w1", gpus=(1, 3))
    until(h, lambda: h.facts(WorkloadFinished))
    assert out.read_text().strip() == "1,3"
    [finished] = h.facts(WorkloadFinished)
    assert (finished.outcome, finished.exit_code) == ("succeeded", 0)
    assert h.status("w1") == "succeeded"
    beats = h.facts(GpuHeartbeat)
    assert beats
    assert all(len(b.gpus) == 4 for b in beats)


def test_a_nonzero_exit_is_a_failure_with_its_code(tmp_path: Path) -> None:
    h = Harness(local(tmp_path), clock=RealClock())
    submit(h, "w1", command=["/bin/sh", "-c", "echo oops; exit 3"])
    place(h, "w1")
    until(h, lambda: h.facts(WorkloadFinished))
    [finished] = h.facts(WorkloadFinished)
    assert (finished.outcome, finished.exit_code) == ("failed", 3)
    assert "oops" in (tmp_path / "logs" / run_label("w1") / "attempt-1.log").read_text()


def test_a_spec_without_a_command_fails_without_running(tmp_path: Path) -> None:
    h = Harness(local(tmp_path), clock=RealClock())
    submit(h, "w1", duration_s=5)
    place(h, "w1")
    until(h, lambda: h.facts(WorkloadFinished))
    [finished] = h.facts(WorkloadFinished)
    assert (finished.outcome, finished.exit_code) == ("failed", None)
    assert "spec.command" in finished.message


def test_stop_kills_a_run_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    adapter = local(tmp_path)
    marker, trapping = tmp_path / "trapped", tmp_path / "trapping"
    adapter.start(
        request(
            f"trap 'echo term > {marker}' TERM; touch {trapping}; while true; do sleep 0.05; done"
        )
    )
    wait_until(trapping.exists, "the shell to install its trap")
    adapter.stop("w1", 1, grace_period_s=0.5)
    began = time.monotonic()
    ended = wait_ended(adapter)
    took = time.monotonic() - began
    assert 0.5 <= took < 5
    assert (ended.exit_code, ended.message) == (137, "killed by SIGKILL")
    assert marker.read_text().strip() == "term"  # it did get the SIGTERM first
    adapter.stop("w1", 1, grace_period_s=0)  # already over: nothing happens
    assert adapter.poll_ended() == []


def test_a_preempted_local_run_is_reported_with_its_command(tmp_path: Path) -> None:
    h = Harness(local(tmp_path), clock=RealClock())
    submit(h, "w1", command="trap '' TERM; sleep 30")
    place(h, "w1")
    h.tick()
    command_id = preempt(h, "w1", grace_s=0)
    until(h, lambda: h.facts(WorkloadPreempted))
    [preempted] = h.facts(WorkloadPreempted)
    assert preempted.command_id == command_id
    assert 0 <= preempted.ran_s < 5
    assert h.status("w1") == "preempted"
    assert h.facts(WorkloadFinished) == []


def test_virtual_gpu_slots_without_nvml(tmp_path: Path) -> None:
    adapter = LocalAdapter("box", virtual_gpus=3, use_nvml=False)
    assert adapter.virtual
    [node] = adapter.nodes()
    assert (node.name, node.gpus, node.gpu_type) == ("box", 3, "virtual")
    assert list(adapter.readings("box")) == [GpuSample(index=i) for i in range(3)]
    h = Harness(local(tmp_path, gpus=3), clock=RealClock())
    submit(h, "w1", command="sleep 30")
    place(h, "w1", gpus=(2,))
    h.tick()
    h.tick()
    beats = [b for b in h.facts(GpuHeartbeat) if b.node == NODE]
    assert [
        (g.index, g.occupant, g.utilisation_pct, g.memory_used_bytes) for g in beats[-1].gpus
    ] == [
        (0, None, 0.0, 0),
        (1, None, 0.0, 0),
        (2, "w1", 0.0, 0),
    ]
    h.adapter.close()


def test_a_failing_nvml_never_crashes_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml  # type: ignore[import-untyped]

    def broken() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    assert open_nvml() is None
    adapter = LocalAdapter("box", virtual_gpus=2)
    assert adapter.virtual
    assert len(adapter.readings("box")) == 2


class FakeNvml:
    count = 2

    def __init__(self) -> None:
        self.calls = 0

    def gpu_type(self) -> str:
        return "NVIDIA-H200"

    def sample(self, index: int) -> GpuSample:
        self.calls += 1
        if index == 1:
            raise RuntimeError("GPU fell off the bus")
        return GpuSample(index, 42.0, 1 << 30, 141 << 30)

    def shutdown(self) -> None:
        return None


def test_nvml_readings_are_reported_per_gpu() -> None:
    adapter = LocalAdapter("box", nvml=FakeNvml())
    assert not adapter.virtual
    [node] = adapter.nodes()
    assert (node.gpus, node.gpu_type) == (2, "NVIDIA-H200")
    assert list(adapter.readings("box")) == [
        GpuSample(0, 42.0, 1 << 30, 141 << 30),
        GpuSample(1),  # a failed reading is an idle one, not a crash
    ]


def test_a_restarted_local_agent_reports_its_old_runs_lost(tmp_path: Path) -> None:
    clock = FakeClock()
    first = Harness(local(tmp_path), clock=clock, heartbeat_s=10)
    try:
        submit(first, "w1", command="sleep 30")
        place(first, "w1")
        first.tick()
        first.tick(10)
        first.tick(10)  # the last heartbeat at +20 s
        clock.advance(25)
        again = Harness(local(tmp_path), broker=first.broker, clock=clock)
        again.tick()
        again.tick(1)
        [lost] = again.facts(WorkloadLost)
        assert (lost.workload_id, lost.attempt, lost.node) == ("w1", 1, NODE)
        assert lost.last_heartbeat == utc(clock.now - 26)
        assert again.status("w1") == "lost"
        assert again.agent.runs == {}
    finally:
        first.adapter.close()


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize(
    "workload_id",
    [
        "../../escaped/ESCAPED",  # the finding: a relative climb out of the log dir
        "{tmp}/escaped/absolute",  # an absolute path replaces the log dir altogether
        "..",
        "x" * 300,  # longer than a file name may be
        "-rf *",
        "\x1b[31m\u202eevil",
    ],
)
def test_no_workload_id_steers_the_log_out_of_the_log_dir(tmp_path: Path, workload_id: str) -> None:
    workload_id = workload_id.replace("{tmp}", str(tmp_path))
    (tmp_path / "escaped").mkdir()
    logs = tmp_path / "agent" / "logs"
    adapter = LocalAdapter(NODE, virtual_gpus=1, use_nvml=False, log_dir=logs)
    adapter.start(RunRequest(workload_id, 1, ((NODE, (0,)),), spec={"command": "echo hello"}))
    ended = wait_ended(adapter)
    assert (ended.workload_id, ended.exit_code) == (workload_id, 0), ended.message
    log = logs / run_label(workload_id) / "attempt-1.log"
    assert log.read_text() == "hello\n"
    assert files_under(tmp_path) == {log}


@pytest.mark.parametrize("workload_id", ["a\x00b", "evil\ud800"])
def test_an_id_no_environment_can_hold_fails_the_run_cleanly(
    tmp_path: Path, workload_id: str
) -> None:
    """FAIRSHARE_WORKLOAD_ID cannot hold a NUL or a lone surrogate: the run fails with the
    reason (it used to raise out of ``start``, leaking the open log), and writes nowhere else."""
    logs = tmp_path / "logs"
    adapter = LocalAdapter(NODE, virtual_gpus=1, use_nvml=False, log_dir=logs)
    adapter.start(RunRequest(workload_id, 1, ((NODE, (0,)),), spec={"command": "echo hello"}))
    ended = wait_ended(adapter)
    assert (ended.workload_id, ended.exit_code) == (workload_id, None)
    assert ended.message.startswith("could not start: ")
    assert files_under(tmp_path) <= {logs / run_label(workload_id) / "attempt-1.log"}


def test_the_run_label_is_a_hash_with_a_readable_hint() -> None:
    label = run_label("lab/vision: train #7")
    assert label.startswith("lab_vision_train_7-")
    assert len(label.rsplit("-", 1)[1]) == 64
    # stable: every attempt, every restart (a fixed value: equal to itself would prove nothing)
    assert run_label("../..") == "0cfd1c96cbc0c0e025888750a8b75d7d507ab83eaef58650f1023579f03ca306"
    assert run_label("a/b") != run_label("a_b")  # the hint may collide; the hash does not
    assert run_label("-rf").startswith("rf-")  # never read as an option in a shell
    assert set(run_label("\x00/..")) <= set("0123456789abcdef")


def test_a_symlinked_run_dir_is_refused(tmp_path: Path) -> None:
    """A run (as the agent's user) could plant a symlink for the next attempt's log."""
    outside = tmp_path / "outside"
    outside.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / run_label("w1")).symlink_to(outside, target_is_directory=True)
    adapter = LocalAdapter(NODE, virtual_gpus=1, use_nvml=False, log_dir=logs)
    adapter.start(request("echo ran"))
    ended = wait_ended(adapter)
    assert ended.exit_code is None
    assert "is not inside" in ended.message
    assert list(outside.iterdir()) == []


def test_a_symlinked_log_file_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    logs = tmp_path / "logs"
    (logs / run_label("w1")).mkdir(parents=True)
    (logs / run_label("w1") / "attempt-1.log").symlink_to(victim)
    adapter = LocalAdapter(NODE, virtual_gpus=1, use_nvml=False, log_dir=logs)
    adapter.start(request("echo ran"))
    ended = wait_ended(adapter)
    assert ended.exit_code is None
    assert "could not start" in ended.message
    assert victim.read_text() == "untouched"


def test_a_nul_in_the_spec_env_fails_the_run_and_leaks_no_log_handle(tmp_path: Path) -> None:
    adapter = local(tmp_path)
    adapter.start(request("true", env={"X": "a\x00b"}))
    ended = wait_ended(adapter)
    assert ended.exit_code is None
    assert "could not start" in ended.message
    assert adapter.poll_ended() == []
