"""Native work on Slurm, read purely (services/agents/slurm/native.py): squeue's durations and
lines, which jobs are Fairshare's, the workload id, the shape a job asks for, the work the door
submits and its origin read back, the fields that pin a job to its placement; and the bindings
file the job_submit plugin reads (services/agents/slurm/native_door.py ``bindings_text``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from events.models import BudgetClosed, BudgetCreated, GroupBound
from events.models.budgets import KUBERNETES_NAMESPACE, SLURM_ACCOUNT
from events.native_work import NATIVE_KEY
from events.types import ID_PATTERN
from projections.bindings import GroupBindings
from projections.budget_tree import BudgetTree
from services.agents.slurm.native import (
    NativeJob,
    Shape,
    SlurmOrigin,
    is_native,
    native_work,
    native_workload_id,
    parse_duration,
    parse_native_squeue,
    pin_fields,
    shape_of,
)
from services.agents.slurm.native_door import bindings_text
from services.agents.slurm.parse import NATIVE_SQUEUE_FORMAT, SlurmParseError

T0 = 1_800_000_000.0
CLUSTER = "hpc"


def job(**overrides: Any) -> NativeJob:
    """A held single-node job of 2 GPUs on partition gpu, account vision, user ana."""
    fields: dict[str, Any] = {
        "job_id": "1046",
        "state": "PENDING",
        "reason": "JobHeldUser",
        "account": "vision",
        "user": "ana",
        "partition": "gpu",
        "time_limit_s": 1800,
        "time_min_s": 600,
        "num_nodes": 1,
        "gpus_per_node": 2,
        "gpus_per_job": 0,
        "nodes": (),
        "wait_status": 0,
        "name": "train",
    }
    fields.update(overrides)
    return NativeJob(**fields)


# -- parse_duration ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30:00", 1800),
        ("1-00:00:00", 86400),
        ("10", 600),  # a bare number is minutes, as sbatch's --time
        ("1:02:03", 3723),
        ("0:30", 30),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        (" 30:00 ", 1800),
        ("0", 0),
        ("UNLIMITED", None),
        ("N/A", None),
        ("INVALID", None),
        ("", None),
        ("   ", None),
        ("1:2:3:4", None),
        ("-30:00", None),
        ("1.5", None),
        ("30m", None),
    ],
)
def test_parse_duration(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


@settings(max_examples=150, deadline=None)
@given(
    days=st.integers(0, 400),
    hours=st.integers(0, 23),
    minutes=st.integers(0, 59),
    secs=st.integers(0, 59),
)
def test_parse_duration_reads_what_squeue_writes(
    days: int, hours: int, minutes: int, secs: int
) -> None:
    """squeue writes ``D-HH:MM:SS`` with days, ``H:MM:SS`` with hours, ``M:SS`` otherwise."""
    total = days * 86400 + hours * 3600 + minutes * 60 + secs
    assert parse_duration(f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}") == total
    if days == 0:
        assert parse_duration(f"{hours}:{minutes:02d}:{secs:02d}") == total
        if hours == 0:
            assert parse_duration(f"{minutes}:{secs:02d}") == total


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789-:/ NAULIMTDV\u00b2\u0663"), max_size=12))
@example("1--1")
@example("::")
def test_parse_duration_answers_any_text_without_raising(text: str) -> None:
    seconds = parse_duration(text)
    assert seconds is None or seconds >= 0


# -- parse_native_squeue -------------------------------------------------------------------------
HELD = "1046|PENDING|JobHeldUser|budgetb|fsuser|gpu|30:00|10:00|1|gres:gpu:2|N/A||0|train"
RUNNING = "1047|RUNNING|None|Vision|ana|gpu|1-00:00:00|N/A|2|gres/gpu:8|N/A|gpu[01-02]|0|big run"
ARRAY = "123_[1-3]|PENDING|JobHeldUser|vision|ana|gpu|30:00|0:00|1|gres:gpu:1|N/A||0|sweep"
PIPE_NAME = "1048|PENDING|JobHeldAdmin|vision|bo|gpu|UNLIMITED|0|1|N/A|gres:gpu:4|(null)|0|a|b|c"


def test_the_format_has_as_many_fields_as_a_line() -> None:
    assert NATIVE_SQUEUE_FORMAT.count(",") + 1 == HELD.count("|") + 1 == 14


def test_a_held_job_is_read_whole() -> None:
    [held] = parse_native_squeue(HELD + "\n")
    assert held == NativeJob(
        job_id="1046",
        state="PENDING",
        reason="JobHeldUser",
        account="budgetb",
        user="fsuser",
        partition="gpu",
        time_limit_s=1800,
        time_min_s=600,
        num_nodes=1,
        gpus_per_node=2,
        gpus_per_job=0,
        nodes=(),
        wait_status=0,
        name="train",
    )
    assert held.held
    assert held.waiting
    assert not held.ended
    assert held.gpus == 2


def test_a_running_job_lists_its_nodes_and_its_account_lower_cased() -> None:
    [running] = parse_native_squeue(RUNNING)
    assert running.state == "RUNNING"
    assert running.account == "vision"  # Slurm lower-cases accounts
    assert running.nodes == ("gpu01", "gpu02")
    assert running.time_limit_s == 86400
    assert running.time_min_s == 0  # N/A: burst work
    assert (running.num_nodes, running.gpus_per_node, running.gpus) == (2, 8, 16)
    assert not running.held
    assert not running.waiting
    assert running.name == "big run"


def test_array_elements_are_skipped_and_a_name_may_hold_the_separator() -> None:
    jobs = parse_native_squeue("\n".join([HELD, ARRAY, "", "   ", PIPE_NAME, RUNNING]))
    assert [j.job_id for j in jobs] == ["1046", "1048", "1047"]
    piped = jobs[1]
    assert piped.name == "a|b|c"
    assert piped.reason == "JobHeldAdmin"
    assert piped.held
    assert piped.time_limit_s is None  # UNLIMITED
    assert piped.time_min_s == 0
    assert piped.nodes == ()  # (null)
    assert (piped.gpus_per_node, piped.gpus_per_job, piped.gpus) == (0, 4, 4)


def test_a_state_flag_is_dropped_and_an_unknown_exit_code_is_none() -> None:
    line = "7|completing+|None|vision|ana|gpu|30:00|0|1|gres:gpu:1|N/A|n1|-|x"
    [found] = parse_native_squeue(line)
    assert found.state == "COMPLETING"
    assert found.wait_status is None
    [cancelled] = parse_native_squeue(
        line.replace("completing+", "CANCELLED").replace("|-|", "|15|")
    )
    assert cancelled.ended
    assert cancelled.wait_status == 15


@pytest.mark.parametrize(
    "line",
    [
        "1046|PENDING|JobHeldUser",
        HELD.rsplit("|", 1)[0],  # the name missing
        "1046",
    ],
)
def test_a_line_short_of_fields_is_a_parse_error(line: str) -> None:
    with pytest.raises(SlurmParseError, match="expected 14 fields"):
        parse_native_squeue(HELD + "\n" + line)


@pytest.mark.parametrize(
    ("state", "reason", "held"),
    [
        ("PENDING", "JobHeldUser", True),
        ("PENDING", "JobHeldAdmin", True),
        ("REQUEUE_HOLD", "JobHeldAdmin", True),
        ("PENDING", "Priority", False),
        ("RUNNING", "JobHeldUser", False),
        ("CANCELLED", "JobHeldUser", False),
    ],
)
def test_held_is_waiting_for_a_hold(state: str, reason: str, held: bool) -> None:
    assert job(state=state, reason=reason).held is held


@pytest.mark.parametrize(
    ("num_nodes", "per_node", "per_job", "gpus"),
    [(1, 2, 0, 2), (0, 2, 0, 2), (3, 8, 0, 24), (1, 0, 6, 6), (2, 0, 16, 16), (1, 0, 0, 0)],
)
def test_gpus_are_per_node_times_nodes_or_per_job(
    num_nodes: int, per_node: int, per_job: int, gpus: int
) -> None:
    assert job(num_nodes=num_nodes, gpus_per_node=per_node, gpus_per_job=per_job).gpus == gpus


# -- is_native, native_workload_id ---------------------------------------------------------------
def test_is_native_takes_users_jobs_on_fairshares_partitions() -> None:
    assert is_native(job(), CLUSTER, ["gpu", "gpu-big"])
    assert is_native(job(partition="gpu-big"), CLUSTER, ["gpu", "gpu-big"])
    assert not is_native(job(partition="debug"), CLUSTER, ["gpu"])
    assert not is_native(job(), CLUSTER, [])


def test_the_agents_own_runs_are_not_native_work_of_its_cluster() -> None:
    own = job(name="w+1+hpc")
    assert not is_native(own, "hpc", ["gpu"])
    # named as another cluster's agent names its runs: nothing of this agent's
    assert is_native(own, "other", ["gpu"])
    # names that only look alike are users' names
    assert is_native(job(name="w+0+hpc"), "hpc", ["gpu"])
    assert is_native(job(name="w+1+hpc+x"), "hpc", ["gpu"])


def test_a_job_sent_to_several_of_fairshares_partitions_is_native() -> None:
    """The job_submit plugin accepts (and holds) a job sent to several partitions when all of
    them are Fairshare's (``sbatch -p gpu,gpu-big``); while it waits squeue lists its
    partition as the list it was sent to. It is Fairshare's work, held for Fairshare: if
    is_native does not take it, it stays held for ever."""
    assert is_native(job(partition="gpu,gpu-big"), CLUSTER, ["gpu", "gpu-big"])


def test_native_workload_id_is_stable_readable_and_unique_per_cluster() -> None:
    first = native_workload_id("hpc", "1046")
    assert first == native_workload_id("hpc", "1046")
    assert first.startswith("slurm.1046-")
    assert re.match(ID_PATTERN, first)
    assert native_workload_id("hpc2", "1046") != first
    assert native_workload_id("hpc", "1047") != first


@settings(max_examples=100, deadline=None)
@given(
    clusters=st.lists(
        st.from_regex(r"[a-z][a-z0-9-]{0,40}", fullmatch=True), min_size=2, max_size=2, unique=True
    ),
    job_id=st.integers(1, 2**32).map(str),
)
def test_native_workload_ids_are_valid_ids_and_differ_across_clusters(
    clusters: list[str], job_id: str
) -> None:
    a, b = (native_workload_id(c, job_id) for c in clusters)
    assert re.match(ID_PATTERN, a)
    assert re.match(ID_PATTERN, b)
    assert a != b


# -- shape_of ------------------------------------------------------------------------------------
def test_one_node_within_the_largest_is_a_single_node_gang() -> None:
    assert shape_of(job(gpus_per_node=4), [8, 8]) == Shape(4, "single-node", 1, 4)
    assert shape_of(job(gpus_per_node=8), [4, 8]) == Shape(8, "single-node", 1, 8)
    assert shape_of(job(gpus_per_node=0, gpus_per_job=3), [8]) == Shape(3, "single-node", 1, 3)


def test_more_than_the_largest_node_on_one_node_is_a_problem() -> None:
    problem = shape_of(job(gpus_per_node=16), [8, 8])
    assert isinstance(problem, str)
    assert "16 GPUs on one node" in problem
    assert "largest node has 8" in problem


def test_several_whole_nodes_are_a_whole_nodes_gang() -> None:
    assert shape_of(job(num_nodes=2, gpus_per_node=8), [8, 8, 8]) == Shape(16, "whole-nodes", 2, 8)


@pytest.mark.parametrize(
    ("num_nodes", "per_node", "sizes", "needle"),
    [
        (2, 4, [8, 8], "whole nodes of 8"),
        (2, 8, [8, 4], "also has nodes of 4"),
    ],
)
def test_several_partial_nodes_are_a_problem(
    num_nodes: int, per_node: int, sizes: list[int], needle: str
) -> None:
    problem = shape_of(job(num_nodes=num_nodes, gpus_per_node=per_node), sizes)
    assert isinstance(problem, str)
    assert needle in problem


def test_gpus_per_job_beyond_a_node_are_whole_nodes_when_a_multiple() -> None:
    assert shape_of(job(gpus_per_node=0, gpus_per_job=16), [8, 8]) == Shape(16, "whole-nodes", 2, 8)
    assert shape_of(job(gpus_per_node=0, gpus_per_job=24, num_nodes=3), [8]) == Shape(
        24, "whole-nodes", 3, 8
    )
    problem = shape_of(job(gpus_per_node=0, gpus_per_job=12), [8, 8])
    assert isinstance(problem, str)
    assert "a multiple of 8" in problem


def test_no_gpus_is_a_problem() -> None:
    problem = shape_of(job(gpus_per_node=0, gpus_per_job=0), [8])
    assert isinstance(problem, str)
    assert "no GPUs" in problem
    assert isinstance(shape_of(job(gpus_per_node=0, gpus_per_job=0), []), str)


def test_without_node_sizes_no_shape_is_judged() -> None:
    """(The door takes no native work before its pool's nodes are read: a submission is
    final, and its shape depends on them.)"""
    assert shape_of(job(gpus_per_node=4), []) == "no node of the pool is known yet"


@pytest.mark.parametrize(
    ("num_nodes", "per_node", "per_job", "sizes"),
    [
        (2, 0, 8, [8, 8]),  # sbatch --nodes=2 --gpus=8 on nodes of 8: 4 per node, asked
        (4, 0, 16, [8, 8]),  # sbatch --nodes=4 --gpus=16: four nodes, not two
        (2, 8, 0, []),  # sbatch --nodes=2 --gres=gpu:8 before any node is known
    ],
    ids=["2-nodes-8-gpus", "4-nodes-16-gpus", "2-nodes-before-sizes"],
)
def test_a_shape_keeps_the_node_count_a_multi_node_job_asks(
    num_nodes: int, per_node: int, per_job: int, sizes: list[int]
) -> None:
    """A job that asks several nodes is placed on that many nodes or refused: a Shape of
    another node count would be pinned (``NumNodes=n-n``) to fewer nodes than its script
    starts tasks on."""
    asked = job(num_nodes=num_nodes, gpus_per_node=per_node, gpus_per_job=per_job)
    shape = shape_of(asked, sizes)
    assert isinstance(shape, str) or shape.nodes == num_nodes, shape


job_strategy = st.builds(
    job,
    num_nodes=st.integers(0, 5),
    gpus_per_node=st.sampled_from([0, 0, 1, 2, 3, 4, 8, 16]),
    gpus_per_job=st.sampled_from([0, 0, 1, 4, 6, 8, 12, 16, 24, 32]),
)
sizes_strategy = st.lists(st.sampled_from([1, 2, 4, 8]), max_size=4)


@settings(max_examples=200, deadline=None)
@given(asked=job_strategy, sizes=sizes_strategy)
def test_a_shape_is_consistent(asked: NativeJob, sizes: list[int]) -> None:
    shape = shape_of(asked, sizes)
    if isinstance(shape, str):
        assert shape
        return
    assert shape.gpus == asked.gpus >= 1
    assert shape.nodes >= 1
    assert shape.gpus_per_node >= 1
    if shape.gang == "whole-nodes":
        assert shape.nodes * shape.gpus_per_node == shape.gpus
        assert set(sizes) == {shape.gpus_per_node}  # every node of the pool is that size
    else:
        assert shape.gang == "single-node"
        assert (shape.nodes, shape.gpus_per_node) == (1, shape.gpus)
        assert not sizes or shape.gpus <= max(sizes)


# -- native_work ---------------------------------------------------------------------------------
def test_native_work_states_the_job_as_a_workload() -> None:
    work = native_work(job(), CLUSTER, [8], check_members=False)
    assert work.workload_id == native_workload_id(CLUSTER, "1046")
    assert (work.group_kind, work.group, work.budget_label) == (SLURM_ACCOUNT, "vision", None)
    assert (work.gpus, work.gang) == (2, "single-node")
    assert (work.min_runtime_s, work.time_limit_s) == (600, 1800)
    assert work.resumable
    assert work.submitter == "ana"
    assert work.name == "slurm job 1046"
    assert work.problems == ()
    assert work.member is None
    assert work.origin == {
        "cluster": CLUSTER,
        "kind": "SlurmJob",
        "job_id": "1046",
        "user": "ana",
        "account": "vision",
        "nodes": 1,
        "gpus_per_node": 2,
    }
    submission = work.submission("lab/vision", "gpu")
    assert submission.spec == {"name": "slurm job 1046", NATIVE_KEY: work.origin}
    assert submission.pools == ("gpu",)
    assert SlurmOrigin.of(submission.spec) == SlurmOrigin("1046", 1, 2)


def test_the_member_is_checked_only_without_slurms_association_checks() -> None:
    assert native_work(job(), CLUSTER, [8], check_members=True).member == "ana"
    assert native_work(job(), CLUSTER, [8], check_members=False).member is None


def test_burst_work_and_no_time_limit() -> None:
    work = native_work(job(time_min_s=0, time_limit_s=None), CLUSTER, [8], check_members=False)
    assert (work.min_runtime_s, work.time_limit_s) == (0, None)


def test_a_whole_nodes_job_states_its_nodes_in_its_origin() -> None:
    work = native_work(job(num_nodes=2, gpus_per_node=8), CLUSTER, [8, 8], check_members=False)
    assert (work.gpus, work.gang) == (16, "whole-nodes")
    assert SlurmOrigin.of({NATIVE_KEY: work.origin}) == SlurmOrigin("1046", 2, 8)


def test_a_job_without_an_account_or_a_shape_has_problems_not_errors() -> None:
    work = native_work(job(account="", gpus_per_node=0), CLUSTER, [8], check_members=False)
    assert len(work.problems) == 2
    assert "no GPUs" in work.problems[0]
    assert "--account" in work.problems[1]
    assert work.group == "-"
    assert work.gpus >= 1  # still a valid submission's shape, never stated while refused
    work = native_work(job(account=""), CLUSTER, [8], check_members=False)
    assert work.problems == ("it names no account (--account): the account names its budget",)


def test_a_job_without_a_user_is_submitted_by_unknown() -> None:
    assert native_work(job(user=""), CLUSTER, [8], check_members=False).submitter == "unknown"


@settings(max_examples=150, deadline=None)
@given(asked=job_strategy, sizes=sizes_strategy, job_id=st.integers(1, 10**9).map(str))
def test_the_origin_of_work_without_problems_reads_back(
    asked: NativeJob, sizes: list[int], job_id: str
) -> None:
    work = native_work(
        dataclasses.replace(asked, job_id=job_id), CLUSTER, sizes, check_members=True
    )
    assert work.gpus >= 1
    if work.problems:
        return
    submission = work.submission("lab/vision", "gpu")
    origin = SlurmOrigin.of(submission.spec)
    assert origin == SlurmOrigin(job_id, work.origin["nodes"], work.origin["gpus_per_node"])
    assert origin.nodes * origin.gpus_per_node == work.gpus


# -- SlurmOrigin.of ------------------------------------------------------------------------------
GOOD = {"cluster": CLUSTER, "kind": "SlurmJob", "job_id": "12", "nodes": 1, "gpus_per_node": 2}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"name": "x"},
        {NATIVE_KEY: "SlurmJob"},
        {NATIVE_KEY: {**GOOD, "kind": "Job"}},
        {NATIVE_KEY: {k: v for k, v in GOOD.items() if k != "kind"}},
        {NATIVE_KEY: {k: v for k, v in GOOD.items() if k != "job_id"}},
        {NATIVE_KEY: {k: v for k, v in GOOD.items() if k != "nodes"}},
        {NATIVE_KEY: {k: v for k, v in GOOD.items() if k != "gpus_per_node"}},
        {NATIVE_KEY: {**GOOD, "job_id": "12_3"}},
        {NATIVE_KEY: {**GOOD, "job_id": ""}},
        {NATIVE_KEY: {**GOOD, "job_id": "12; rm"}},
        {NATIVE_KEY: {**GOOD, "nodes": 0}},
        {NATIVE_KEY: {**GOOD, "nodes": "two"}},
        {NATIVE_KEY: {**GOOD, "nodes": None}},
        {NATIVE_KEY: {**GOOD, "gpus_per_node": 0}},
        {NATIVE_KEY: {**GOOD, "gpus_per_node": -2}},
        {NATIVE_KEY: {**GOOD, "gpus_per_node": [2]}},
    ],
)
def test_a_malformed_origin_is_none(spec: dict[str, Any]) -> None:
    assert SlurmOrigin.of(spec) is None


def test_a_well_formed_origin_is_read() -> None:
    assert SlurmOrigin.of({NATIVE_KEY: GOOD}) == SlurmOrigin("12", 1, 2)
    # numbers written as text, as a JSON reader may hand them back
    assert SlurmOrigin.of(
        {NATIVE_KEY: {**GOOD, "job_id": 12, "nodes": "2", "gpus_per_node": "8"}}
    ) == SlurmOrigin("12", 2, 8)


# -- pin_fields ----------------------------------------------------------------------------------
def test_pin_fields_name_exactly_the_placements_nodes_and_gpus_per_node() -> None:
    origin = SlurmOrigin("12", 2, 8)
    placement = [("gpu01", tuple(range(8))), ("gpu02", tuple(range(8)))]
    assert pin_fields(origin, placement) == ["NumNodes=2-2", "NodeList=gpu01,gpu02", "Gres=gpu:8"]
    single = SlurmOrigin("13", 1, 2)
    assert pin_fields(single, [("gpu03", (4, 5))]) == [
        "NumNodes=1-1",
        "NodeList=gpu03",
        "Gres=gpu:2",
    ]


# -- bindings_text -------------------------------------------------------------------------------
def _bound(budget: str, group: str, *, cluster: str = CLUSTER, kind: str = SLURM_ACCOUNT,
           default: bool = True) -> GroupBound:  # fmt: skip
    return GroupBound(
        budget=budget, cluster=cluster, kind=kind, group=group,  # type: ignore[arg-type]
        default=default, bound_by="chen",
    )  # fmt: skip


def _bindings() -> tuple[GroupBindings, BudgetTree]:
    tree = BudgetTree()
    for path in ("lab", "lab/vision", "lab/audio", "lab/old", "gone", "gone/x"):
        tree.apply(BudgetCreated(budget=path, created_by="admin"), T0)
    bindings = GroupBindings()
    for data in (
        _bound("lab/vision", "vision"),
        _bound("lab/audio", "audio"),
        # rebound: lab/audio stays bound to vision, not as its default
        _bound("lab/audio", "speech"),
        _bound("lab/vision", "speech"),
        _bound("lab/old", "old"),
        _bound("gone/x", "ghost"),
        _bound("lab/vision", "vision", cluster="other"),  # another cluster's account
        _bound("lab/vision", "vision", kind=KUBERNETES_NAMESPACE),  # a namespace
        _bound("lab/audio", "loose", default=False),
    ):
        bindings.apply(data, T0, tree)
    tree.apply(BudgetClosed(budget="lab/old", closed_by="chen"), T0 + 1)
    tree.apply(BudgetClosed(budget="gone", closed_by="admin"), T0 + 1)
    return bindings, tree


def test_bindings_text_lists_this_clusters_accounts_that_count() -> None:
    bindings, tree = _bindings()
    text = bindings_text(
        cluster=CLUSTER,
        partitions=["gpu", "gpu-big"],
        node_sizes=[8, 8, 4],
        agent_uids=[0, 990],
        bindings=bindings,
        tree=tree,
    )
    lines = text.splitlines()
    assert text.endswith("\n")
    assert lines[0].startswith("# ")
    assert lines[1].startswith("# ")
    assert lines[2:] == [
        "cluster=hpc",
        "partition=gpu",
        "partition=gpu-big",
        "largest_node_gpus=8",
        "pool_gpus=20",
        "agent_uid=0",
        "agent_uid=990",
        "account=audio budget=lab/audio",
        "account=speech budget=lab/vision",
        "account=vision budget=lab/vision",
    ]


def test_bindings_text_without_nodes_or_bindings() -> None:
    text = bindings_text(
        cluster="c2",
        partitions=["gpu"],
        node_sizes=[],
        agent_uids=[],
        bindings=GroupBindings(),
        tree=BudgetTree(),
    )
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "cluster=c2",
        "partition=gpu",
        "largest_node_gpus=0",
        "pool_gpus=0",
    ]


def test_bindings_text_has_one_fact_per_line_for_the_plugin() -> None:
    bindings, tree = _bindings()
    text = bindings_text(
        cluster=CLUSTER, partitions=["gpu"], node_sizes=[8], agent_uids=[990],
        bindings=bindings, tree=tree,
    )  # fmt: skip
    for line in text.splitlines():
        assert line.startswith("#") or re.fullmatch(r"[a-z_]+=\S+( budget=\S+)?", line), line
