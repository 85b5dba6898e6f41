"""Reading Slurm's output: host lists, GRES, node states, job listings, exit statuses and the
job-completion log. The outputs marked "recorded" were printed by Debian's Slurm 22.05 with the
agent's formats (``.ci/start-slurm``); the others are the documented forms of other setups."""

from __future__ import annotations

import pytest

from services.agents.slurm.parse import (
    RunTag,
    SlurmParseError,
    exit_of,
    expand_hostlist,
    foreign_gpus,
    job_comment,
    job_name,
    parse_gpu_gres,
    parse_job_name,
    parse_jobcomp,
    parse_sinfo,
    parse_squeue,
)

# recorded: a foreign job holds 3 GPUs of node 0, node 1 set down by an admin
SINFO_DOWN = """\
fs-node-0|mixed|gpu:8|gpu:3|Unknown|none
fs-node-1|down|gpu:8|gpu:0|2026-12-01T05:41:53|PSU failure
"""
# recorded: node 0 drained while a job runs, with a reason holding the separator
SINFO_DRAIN = """\
fs-node-0|allocated+drain|gpu:8|gpu:3|2026-12-01T05:41:54|fix the fans; x|y
fs-node-1|idle+not_responding|gpu:8|gpu:0|Unknown|none
"""
# recorded: finished, failed, cancelled and pending jobs, one spread over two nodes, and job
# names holding the separator and spaces
SQUEUE = """\
1|FAILED|768|fs-node-0|gres:gpu:2|N/A|NonZeroExitCode|t1
2|COMPLETED|0|fs-node-1|gres:gpu:3|N/A|None|a b|c
5|FAILED|1792|fs-node-0|gres:gpu:1|N/A|NonZeroExitCode|sig
6|FAILED|15|fs-node-0|gres:gpu:1|N/A|JobLaunchFailure|sig2
11|FAILED|15|fs-node-[0-1]|N/A|gres:gpu:8|JobLaunchFailure|w2+3+smoke
12|RUNNING|0|fs-node-0|gres:gpu:3|N/A|None|foreign job
13|PENDING|0||gres:gpu:8|N/A|Resources|w-1+2+c1
"""
# recorded (jobcomp/filetxt)
JOBCOMP = """\
JobId=4 UserId=root(0) GroupId=root(0) Name=envt JobState=COMPLETED Partition=gpu TimeLimit=UNLIMITED StartTime=2026-12-01T05:36:44 EndTime=2026-12-01T05:36:46 NodeList=fs-node-1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/sl ReservationName= Tres=cpu=1,mem=4G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-12-01T05:36:44 EligibleTime=2026-12-01T05:36:44 DerivedExitCode=0:0 ExitCode=0:0
JobId=5 UserId=root(0) GroupId=root(0) Name=sig JobState=FAILED Partition=gpu TimeLimit=UNLIMITED StartTime=2026-12-01T05:36:58 EndTime=2026-12-01T05:37:00 NodeList=fs-node-0 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/sl ReservationName= Tres=cpu=1,mem=4G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-12-01T05:36:57 EligibleTime=2026-12-01T05:36:57 DerivedExitCode=0:0 ExitCode=7:0
JobId=6 UserId=root(0) GroupId=root(0) Name=sig2 JobState=FAILED Partition=gpu TimeLimit=UNLIMITED StartTime=2026-12-01T05:36:58 EndTime=2026-12-01T05:37:00 NodeList=fs-node-0 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/sl ReservationName= Tres=cpu=1,mem=4G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-12-01T05:36:57 EligibleTime=2026-12-01T05:36:57 DerivedExitCode=0:0 ExitCode=0:15
a line that is not a completion record
"""  # noqa: E501


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("fs-node-0", ["fs-node-0"]),
        ("fs-node-[0-1]", ["fs-node-0", "fs-node-1"]),
        ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
        ("rack[1-2]-n[0-1]", ["rack1-n0", "rack1-n1", "rack2-n0", "rack2-n1"]),
        ("n[008-010]", ["n008", "n009", "n010"]),
        ("", []),
    ],
)
def test_host_lists_expand_as_slurm_writes_them(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["n[1-2", "n1-2]", "n[a-b]", "n[5-3]"])
def test_a_malformed_host_list_is_refused(text: str) -> None:
    with pytest.raises(SlurmParseError):
        expand_hostlist(text)


@pytest.mark.parametrize(
    ("text", "count", "gpu_type"),
    [
        ("gpu:8", 8, None),
        ("gpu:h100:4(S:0-1)", 4, "h100"),
        ("gpu:a100:2,gpu:h100:2", 4, None),
        ("gpu:h100:2,gpu:h100:2(S:1)", 4, "h100"),
        ("gpu:2(IDX:0-1)", 2, None),
        ("gres:gpu:2", 2, None),
        ("gres/gpu:3", 3, None),
        ("gpu:h100:8,nic:1,shard:8", 8, "h100"),
        ("(null)", 0, None),
        ("N/A", 0, None),
        ("gpu:0", 0, None),
    ],
)
def test_gpus_are_counted_from_gres(text: str, count: int, gpu_type: str | None) -> None:
    parsed = parse_gpu_gres(text)
    assert (parsed.count, parsed.gpu_type) == (count, gpu_type)


def test_down_nodes_are_unreachable_and_keep_their_reason() -> None:
    nodes = parse_sinfo(SINFO_DOWN)
    assert sorted(nodes) == ["fs-node-0", "fs-node-1"]
    up, down = nodes["fs-node-0"], nodes["fs-node-1"]
    assert (up.gpus, up.gpus_used, up.unreachable, up.drained) == (8, 3, False, False)
    assert (up.reason, up.reason_time) == ("", "")
    assert down.unreachable
    assert not down.drained
    assert (down.reason, down.reason_time) == ("PSU failure", "2026-12-01T05:41:53")


def test_a_drained_node_is_drained_with_its_whole_reason() -> None:
    nodes = parse_sinfo(SINFO_DRAIN)
    drained = nodes["fs-node-0"]
    assert drained.drained
    assert not drained.unreachable
    assert drained.reason == "fix the fans; x|y"
    assert not drained.drained_by_fairshare
    assert nodes["fs-node-1"].unreachable, "not_responding: slurmd does not answer"


@pytest.mark.parametrize(
    ("state", "unreachable", "drained"),
    [
        ("idle", False, False),
        ("mixed", False, False),
        ("allocated", False, False),
        ("completing", False, False),
        ("planned", False, False),
        ("reserved", False, False),
        ("drained", False, True),
        ("draining", False, True),
        ("mixed+drain", False, True),
        ("idle+fail", False, True),
        ("idle+maint", False, True),
        ("down", True, False),
        ("down+drain", True, True),
        ("idle+not_responding", True, False),
        ("down*", True, False),
        ("idle*", True, False),
        ("idle+powered_down", True, False),
        ("future", True, False),
        ("unknown", True, False),
    ],
)
def test_node_states_map_to_fairshare(state: str, unreachable: bool, drained: bool) -> None:
    node = parse_sinfo(f"n1|{state}|gpu:4|gpu:0|Unknown|none\n")["n1"]
    assert (node.unreachable, node.drained) == (unreachable, drained)


def test_a_drain_the_agent_asked_for_is_recognised_as_its_own() -> None:
    node = parse_sinfo("n1|idle+drain|gpu:4|gpu:0|Unknown|fairshare: cordoned by ops\n")["n1"]
    assert node.drained_by_fairshare


def test_a_node_in_two_partitions_is_listed_once() -> None:
    text = "n1|idle|gpu:4|gpu:0|Unknown|none\nn1|idle|gpu:4|gpu:0|Unknown|none\n"
    assert list(parse_sinfo(text)) == ["n1"]


@pytest.mark.parametrize("text", ["n1|idle|gpu:4\n", "just words\n"])
def test_output_of_another_shape_is_refused(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sinfo(text)
    with pytest.raises(SlurmParseError):
        parse_squeue(text)


def test_job_listings_keep_states_nodes_gpus_and_whole_names() -> None:
    jobs = {job.job_id: job for job in parse_squeue(SQUEUE)}
    assert jobs["2"].name == "a b|c", "the name is last: a separator in it shifts nothing"
    spread = jobs["11"]
    assert spread.nodes == ("fs-node-0", "fs-node-1")
    assert (spread.gpus_per_node, spread.gpus_per_job) == (0, 8)
    assert spread.gpus_on("fs-node-1") == 4
    assert spread.tag == RunTag("w2", 3, "smoke")
    pending = jobs["13"]
    assert pending.waiting
    assert not pending.holds_nodes
    assert pending.nodes == ()
    assert pending.reason == "Resources"
    running = jobs["12"]
    assert running.holds_nodes
    assert not running.ended
    assert running.tag is None
    assert running.gpus_on("fs-node-0") == 3
    assert running.gpus_on("fs-node-1") == 0
    assert all(jobs[i].ended for i in ("1", "2", "5", "6", "11"))


@pytest.mark.parametrize(
    ("job_id", "exit_code", "message"),
    [
        ("1", 3, "Slurm job FAILED: exited with status 3"),
        ("2", 0, "Slurm job COMPLETED: exited with status 0"),
        ("5", 7, "Slurm job FAILED: exited with status 7"),
        ("6", 143, "Slurm job FAILED: killed by SIGTERM"),
    ],
)
def test_exit_statuses_read_as_a_shell_would(job_id: str, exit_code: int, message: str) -> None:
    job = next(j for j in parse_squeue(SQUEUE) if j.job_id == job_id)
    end = job.end()
    assert (end.exit_code, end.message) == (exit_code, message)


@pytest.mark.parametrize(
    ("state", "status", "exit_code"),
    [
        ("CANCELLED", 0, None),  # cancelled while pending
        ("CANCELLED", 9, 137),
        ("BOOT_FAIL", 0, None),
        ("NODE_FAIL", 0, 0),
        ("TIMEOUT", 15, 143),
        ("COMPLETED", None, None),
    ],
)
def test_jobs_that_never_ran_have_no_exit_code(
    state: str, status: int | None, exit_code: int | None
) -> None:
    assert exit_of(state, status)[0] == exit_code


def test_completion_log_gives_ends_by_job_name() -> None:
    ends = parse_jobcomp(JOBCOMP)
    assert sorted(ends) == ["envt", "sig", "sig2"]
    assert (ends["envt"].exit_code, ends["envt"].job_id) == (0, "4")
    assert ends["sig"].exit_code == 7
    assert ends["sig2"].exit_code == 143
    assert ends["sig2"].state == "FAILED"


@pytest.mark.parametrize(
    "tag",
    [
        RunTag("w1", 1, "slurm"),
        RunTag("a/b:c@d.e-f", 12, "c:1"),
        RunTag("x" * 128, 3, "y" * 128),
    ],
)
def test_job_names_parse_back_exactly(tag: RunTag) -> None:
    assert parse_job_name(job_name(tag)) == tag
    assert f"workload={tag.workload_id} attempt={tag.attempt}" in job_comment(tag)


@pytest.mark.parametrize(
    "name",
    ["t1", "a b|c", "w+0+c", "w+x+c", "w+1", "w+1+c+d", "w 1+1+c", "+1+c", "w+1+", "w+\u0661+c"],
)
def test_names_of_other_jobs_are_not_runs(name: str) -> None:
    assert parse_job_name(name) is None


def test_foreign_gpus_are_slurms_count_less_this_clusters_jobs() -> None:
    node = parse_sinfo("n1|mixed|gpu:8|gpu:7|Unknown|none\n")["n1"]
    jobs = parse_squeue(
        "1|RUNNING|0|n1|gres:gpu:2|N/A|None|w1+1+mine\n"
        "2|RUNNING|0|n1|gres:gpu:1|N/A|None|w2+1+other-cluster\n"
        "3|RUNNING|0|n1|gres:gpu:4|N/A|None|someone's job\n"
        "4|COMPLETED|0|n1|gres:gpu:8|N/A|None|w3+1+mine\n"
        "5|COMPLETING|0|n1|gres:gpu:0|N/A|None|w4+1+mine\n"
    )
    assert foreign_gpus(node, jobs, "mine") == 5  # the other cluster's job and someone's
    assert foreign_gpus(node, jobs, "mine", ours={"1": 3}) == 4, "the placement's count wins"
    assert foreign_gpus(node, jobs, "other-cluster") == 6
