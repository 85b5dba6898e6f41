"""``--run-as``: the mapping's syntax, its refusal of root and of unmapped submitters, and
(when the tests run as root) commands really running as the mapped user."""

from __future__ import annotations

import dataclasses
import os
import pwd
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.models import WorkloadFinished
from services.agents import LocalAdapter, RunEnded, RunRequest
from services.agents.adapter import run_label
from services.agents.cli import agent_app
from services.agents.run_as import (
    RunAs,
    RunAsError,
    UnixIdentity,
    parse_pairs,
    read_pairs,
    resolve_user,
)
from tests.unit.test_agents import NODE0, Harness, place, submit
from tests.unit.test_agents_local import RealClock, until

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@dataclasses.dataclass(frozen=True)
class SubmittedRun(RunRequest):
    """A request that says who submitted it (what the agent loop is to pass on)."""

    submitter: str = ""


def entry(name: str, uid: int, gid: int) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, gid, "", f"/home/{name}", "/bin/sh"))


USERS = {
    "ana": entry("ana", 1001, 1001),
    "robotics": entry("robotics", 1002, 1002),
    "toor": entry("toor", 0, 0),  # root under another name
    "wheel": entry("wheel", 1003, 1003),
}
GROUPS = {"ana": [1001, 50], "robotics": [1002], "toor": [0], "wheel": [1003, 0]}


def by_name(name: str) -> pwd.struct_passwd:
    return USERS[name]


def by_uid(uid: int) -> pwd.struct_passwd:
    for user in USERS.values():
        if user.pw_uid == uid:
            return user
    raise KeyError(uid)


def group_list(name: str, gid: int) -> list[int]:
    return GROUPS[name]


def resolve(text: str) -> RunAs:
    return RunAs.resolve(parse_pairs(text), by_name=by_name, by_uid=by_uid, group_list=group_list)


def test_pairs_map_submitters_to_unix_users() -> None:
    run_as = resolve("ana=ana, bo = robotics,")
    assert run_as.submitters == {"ana": "ana", "bo": "robotics"}
    ana = run_as.identity_for("ana")
    assert ana == UnixIdentity("ana", 1001, 1001, (1001, 50), "/home/ana", "/bin/sh")
    assert resolve("bo=1002").submitters == {"bo": "robotics"}  # a numeric uid


def test_a_mapping_file_has_one_pair_per_line(tmp_path: Path) -> None:
    path = tmp_path / "run-as"
    path.write_text("# submitter = unix user\nana = ana\n\nbo=robotics  # the lab's account\n")
    assert read_pairs(path) == [("ana", "ana"), ("bo", "robotics")]
    path.write_text("ana ana\n")
    with pytest.raises(RunAsError, match=r"run-as:1: 'ana ana' is not SUBMITTER=USER"):
        read_pairs(path)
    with pytest.raises(RunAsError, match="--run-as-file"):
        read_pairs(tmp_path / "missing")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bo=root", "never run as root"),
        ("bo=0", "uid 0"),
        ("bo=toor", "uid 0"),  # root by another name
        ("bo=wheel", "group 0"),  # a supplementary group of root
        ("bo=nosuchuser", "no such unix user"),
        ("bo=ana,bo=robotics", "mapped twice"),
        ("bo", "not SUBMITTER=USER"),
        ("=ana", "not SUBMITTER=USER"),
        ("b o=ana", "has a space"),
        (",", "no SUBMITTER=USER given"),
    ],
)
def test_mappings_the_agent_refuses_to_start_with(text: str, message: str) -> None:
    with pytest.raises(RunAsError, match=message):
        resolve(text)


def test_root_is_refused_by_the_real_user_database() -> None:
    with pytest.raises(RunAsError, match="never run as root"):
        resolve_user("root")
    with pytest.raises(RunAsError, match="uid 0"):
        resolve_user("0")
    with pytest.raises(RunAsError, match="no such unix user"):
        resolve_user("bo\x00")


def test_an_identity_of_root_cannot_be_built_by_hand() -> None:
    with pytest.raises(RunAsError, match="never run as root"):
        RunAs({"bo": UnixIdentity("x", 0, 5, (5,), "/", "/bin/sh")})
    with pytest.raises(RunAsError, match="never run as root"):
        RunAs({"bo": UnixIdentity("x", 5, 5, (5, 0), "/", "/bin/sh")})


def test_a_run_environment_keeps_nothing_of_the_agents_but_the_neutral_variables() -> None:
    ana = resolve("ana=ana").identity_for("ana")
    assert ana is not None
    agent_env = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "HOME": "/root",
        "FAIRSHARE_TOKEN": "admin-token",
        "KAFKA_PASSWORD": "secret",
    }
    assert ana.environment(agent_env) == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "HOME": "/home/ana",
        "USER": "ana",
        "LOGNAME": "ana",
        "SHELL": "/bin/sh",
    }


def wait_ended(adapter: LocalAdapter, timeout_s: float = 10.0) -> RunEnded:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ended = adapter.poll_ended()
        if ended:
            [one] = ended
            return one
        time.sleep(0.02)
    raise AssertionError("timed out")


def adapter_as(tmp_path: Path, run_as: RunAs) -> LocalAdapter:
    return LocalAdapter(
        NODE0, virtual_gpus=1, use_nvml=False, log_dir=tmp_path / "logs", run_as=run_as
    )


def run(command: str, submitter: str, **spec: object) -> SubmittedRun:
    return SubmittedRun(
        "w1", 1, ((NODE0, (0,)),), spec={"command": command, **spec}, submitter=submitter
    )


@pytest.mark.parametrize("submitter", ["chen", ""])
def test_a_submitter_without_a_mapping_is_refused_and_nothing_runs(
    tmp_path: Path, submitter: str
) -> None:
    """Never the agent's own identity as a fallback; "" is a request that names nobody."""
    marker = tmp_path / "ran"
    adapter = adapter_as(tmp_path, resolve("ana=ana"))
    adapter.start(run(f"touch {marker}", submitter))
    ended = wait_ended(adapter)
    assert ended.exit_code is None
    assert ended.message == f"refused: submitter {submitter!r} has no unix user in --run-as"
    time.sleep(0.1)
    assert not marker.exists()


def test_a_request_that_does_not_say_who_submitted_it_is_refused(tmp_path: Path) -> None:
    adapter = adapter_as(tmp_path, resolve("ana=ana"))
    adapter.start(RunRequest("w1", 1, ((NODE0, (0,)),), spec={"command": "true"}))
    assert "has no unix user" in wait_ended(adapter).message


def nobody() -> RunAs:
    return RunAs.resolve([("bo", "nobody")])


@as_root
def test_a_mapped_submitter_runs_as_that_user_with_a_scrubbed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRSHARE_TOKEN", "admin-token")
    user = pwd.getpwnam("nobody")
    adapter = adapter_as(tmp_path, nobody())
    adapter.start(
        run(
            'id -u; id -g; id -G; echo "$USER $HOME ${FAIRSHARE_TOKEN-unset} $X"; pwd',
            "bo",
            env={"X": "from-spec"},
        )
    )
    ended = wait_ended(adapter)
    assert ended.exit_code == 0, ended.message
    log = tmp_path / "logs" / run_label("w1") / "attempt-1.log"
    uid, gid, groups, env, cwd = log.read_text().splitlines()
    assert (int(uid), int(gid)) == (user.pw_uid, user.pw_gid)
    assert "0" not in groups.split()
    assert env == f"nobody {user.pw_dir} unset from-spec"
    assert cwd == (user.pw_dir if os.path.isdir(user.pw_dir) else "/")
    assert log.stat().st_uid == user.pw_uid  # the user may read their own output


@as_root
def test_a_run_as_another_user_enters_its_cwd_as_that_user(tmp_path: Path) -> None:
    """A chdir made by root before dropping privileges would let the user work inside a
    directory they may not enter (and reach its files by relative paths)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "secret").write_text("root's")
    (private / "secret").chmod(0o644)
    adapter = adapter_as(tmp_path, nobody())
    adapter.start(run("cat secret", "bo", cwd=str(private)))
    ended = wait_ended(adapter)
    assert ended.exit_code == 126
    log = tmp_path / "logs" / run_label("w1") / "attempt-1.log"
    assert "root's" not in log.read_text()


@as_root
def test_the_agent_runs_a_workload_as_its_submitters_user(tmp_path: Path) -> None:
    h = Harness(adapter_as(tmp_path, nobody()), clock=RealClock())
    submit(h, "w1", command="id -u")  # submitted by bo
    place(h, "w1")
    until(h, lambda: h.facts(WorkloadFinished))
    [finished] = h.facts(WorkloadFinished)
    assert finished.exit_code == 0, finished.message
    log = tmp_path / "logs" / run_label("w1") / "attempt-1.log"
    assert log.read_text().strip() == str(pwd.getpwnam("nobody").pw_uid)


cli = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run-as", "bo=root"], "never run as root"),
        (["--run-as", "ana=nobody", "--run-as", "bo=0"], "uid 0"),
        (["--run-as", "bo=no-such-user-here"], "no such unix user"),
        (["--run-as-file", "/nonexistent/run-as"], "--run-as-file"),
    ],
)
def test_the_agent_refuses_to_start_with_a_bad_mapping(args: list[str], message: str) -> None:
    """It stops before reaching for Kafka (there is none here)."""
    result = cli.invoke(agent_app, ["local", "--virtual-gpus", "1", *args])
    assert result.exit_code == 2
    assert "refusing to start" in result.output
    assert message in result.output


def test_the_agent_refuses_run_as_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = cli.invoke(agent_app, ["local", "--virtual-gpus", "1", "--run-as", "bo=nobody"])
    assert result.exit_code == 2
    assert "--run-as needs root" in result.output
