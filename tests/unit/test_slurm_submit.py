"""A run as an sbatch call: the pinning options, the names, and a batch script that passes
every value through /bin/sh unchanged (the scripts really run here, without Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.agents.adapter import PlacementSpec, RunRequest
from services.agents.run_as import UnixIdentity
from services.agents.slurm.parse import RunTag, parse_job_name
from services.agents.slurm.submit import (
    SpecError,
    SubmitOptions,
    batch_script,
    gpu_request,
    submission,
)

HOSTILE = 'it\'s $(touch /tmp/pwned) `id` "q" \\ ; | & * ~ \n\t end'


def run(
    spec: dict[str, object],
    placement: PlacementSpec = (("n1", (0, 1)),),
    wid: str = "w/1:x@y",
) -> RunRequest:
    return RunRequest(wid, 2, placement, spec)


def option(argv: tuple[str, ...], name: str) -> list[str]:
    return [a.split("=", 1)[1] for a in argv if a.startswith(f"{name}=")]


def test_the_job_is_pinned_to_its_placement_and_named_after_its_run() -> None:
    call = submission(run({"command": "true"}), "slurm-a", SubmitOptions(partition="gpu"))
    assert call.argv[0] == "sbatch"
    assert option(call.argv, "--nodelist") == ["n1"]
    assert option(call.argv, "--nodes") == ["1"]
    assert option(call.argv, "--gres") == ["gpu:2"]
    assert option(call.argv, "--partition") == ["gpu"]
    assert "--no-requeue" in call.argv, "Fairshare requeues, never Slurm"
    assert "--export=NIL" in call.argv, "the agent's environment stays with the agent"
    assert "--parsable" in call.argv
    assert parse_job_name(option(call.argv, "--job-name")[0]) == RunTag("w/1:x@y", 2, "slurm-a")
    assert option(call.argv, "--comment") == [
        "fairshare workload=w/1:x@y attempt=2 cluster=slurm-a"
    ]
    assert not option(call.argv, "--uid")


def test_a_gang_over_nodes_asks_per_node_or_in_total() -> None:
    even = gpu_request((("a", (0, 1, 2, 3)), ("b", (0, 1, 2, 3))))
    assert even == ["--nodes=2", "--nodelist=a,b", "--gres=gpu:4"]
    uneven = gpu_request((("a", tuple(range(8))), ("b", (0, 1, 2, 3))))
    assert uneven == ["--nodes=2", "--nodelist=a,b", "--gpus=12"]


def test_operator_options_come_first_so_the_agents_pinning_wins() -> None:
    options = SubmitOptions(extra=("--account=lab", "--nodelist=elsewhere"), output_dir="/logs/")
    call = submission(run({"command": "true"}), "c", options)
    assert call.argv[1] == "--account=lab"
    assert option(call.argv, "--nodelist") == ["elsewhere", "n1"], "sbatch takes the last one"
    [output] = option(call.argv, "--output")
    assert output.startswith("/logs/w_1_x_y-")
    assert output.endswith("-attempt-2.log")
    assert "%" not in output, "no Slurm filename pattern can come from an id"


def test_a_run_as_identity_becomes_uid_and_gid() -> None:
    who = UnixIdentity("ana", 1001, 1002, (1002,), "/home/ana", "/bin/sh")
    call = submission(run({"command": "true"}), "c", SubmitOptions(), who)
    assert (option(call.argv, "--uid"), option(call.argv, "--gid")) == (["1001"], ["1002"])


def _run_script(script: str, tmp_path: Path) -> dict[str, object]:
    """Run the batch script as Slurm would (``/bin/sh``), in a clean environment."""
    path = tmp_path / "job.sh"
    path.write_text(script)
    done = subprocess.run(
        ["/bin/sh", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


PROBE = [
    sys.executable,
    "-c",
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(),"
    " 'env': {k: v for k, v in os.environ.items() if k.startswith(('FAIRSHARE_', 'X_'))}}))",
]


def test_argv_env_and_ids_reach_the_command_unchanged(tmp_path: Path) -> None:
    spec: dict[str, object] = {
        "command": [*PROBE, HOSTILE, "", "$HOME"],
        "env": {"X_HOSTILE": HOSTILE, "X_NUMBER": 3},
        "cwd": str(tmp_path),
    }
    seen = _run_script(batch_script(run(spec, wid="w'$(id)`x`")), tmp_path)
    assert seen["argv"] == [HOSTILE, "", "$HOME"]
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"] == {
        "X_HOSTILE": HOSTILE,
        "X_NUMBER": "3",
        "FAIRSHARE_WORKLOAD_ID": "w'$(id)`x`",
        "FAIRSHARE_ATTEMPT": "2",
    }
    assert not Path("/tmp/pwned").exists()


def test_a_string_command_runs_with_sh_c(tmp_path: Path) -> None:
    command = f"{sys.executable} -c 'import json; print(json.dumps({{\"argv\": 1}}))'"
    assert _run_script(batch_script(run({"command": command})), tmp_path) == {"argv": 1}


def test_the_command_is_execed_so_signals_and_status_are_its_own() -> None:
    script = batch_script(run({"command": ["sleep", "1"]}))
    assert script.splitlines()[-1] == "exec sleep 1"


def test_a_directory_that_cannot_be_entered_fails_the_job_with_126(tmp_path: Path) -> None:
    script = batch_script(run({"command": ["true"], "cwd": str(tmp_path / "missing")}))
    path = tmp_path / "job.sh"
    path.write_text(script)
    done = subprocess.run(["/bin/sh", str(path)], capture_output=True, check=False, timeout=30)
    assert done.returncode == 126


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec.command"),
        ({"command": ""}, "spec.command"),
        ({"command": []}, "spec.command"),
        ({"command": ["ls", 3]}, "spec.command"),
        ({"command": ["a\x00b"]}, "NUL"),
        ({"command": "true", "env": ["A=1"]}, "spec.env"),
        ({"command": "true", "env": {"1A": "x"}}, "not a valid environment variable"),
        ({"command": "true", "env": {"A B": "x"}}, "not a valid environment variable"),
        ({"command": "true", "env": {"FAIRSHARE_ATTEMPT": "9"}}, "set by the agent"),
        ({"command": "true", "env": {"A": "\x00"}}, "NUL"),
        ({"command": "true", "cwd": 3}, "spec.cwd"),
        ({"command": "true", "cwd": ""}, "spec.cwd"),
    ],
)
def test_a_spec_that_cannot_run_is_refused_with_the_field(
    spec: dict[str, object], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        submission(run(spec), "c", SubmitOptions())
