"""Native work (services/agents/kubernetes/native.py): Jobs and pods that name Fairshare as
their scheduler, read as workloads; their ids, shapes, submissions and binding plans; and the
foreign-pod count that leaves them out (services/agents/kubernetes/pods.py)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from events.models import WorkloadSubmitted
from events.native_work import NATIVE_KEY, native_cluster
from events.types import ID_PATTERN, MAX_ID_LENGTH
from scheduling.spec_checks import WORKLOAD_ANNOTATION
from services.agents.kubernetes.native import (
    BUDGET_LABEL,
    MIN_RUNTIME_KEY,
    NATIVE_GANG_ANNOTATION,
    JobView,
    Kind,
    NativeWorkload,
    Origin,
    binding_plan,
    native_workload_id,
    native_workloads,
    parse_duration,
    shape_problem,
    submission_of,
)
from services.agents.kubernetes.pods import (
    ATTEMPT_LABEL,
    CLUSTER_LABEL,
    MANAGED_BY,
    MANAGER,
    PodView,
    foreign_gpus,
    foreign_pods,
)

SCHEDULER = "fairshare"
CLUSTER = "cluster-a"


def job(name: str = "train", **fields: object) -> JobView:
    given_fields: dict[str, object] = {
        "namespace": "team",
        "name": name,
        "uid": f"uid-{name}",
        "scheduler": SCHEDULER,
        "gpus_per_pod": 2,
    }
    given_fields.update(fields)
    return JobView(**given_fields)  # type: ignore[arg-type]


def pod(name: str, **fields: object) -> PodView:
    given_fields: dict[str, object] = {
        "name": name,
        "namespace": "team",
        "node": None,
        "phase": "Pending",
        "gpus": 1,
        "scheduler": SCHEDULER,
        "uid": f"uid-{name}",
    }
    given_fields.update(fields)
    return PodView(**given_fields)  # type: ignore[arg-type]


def gang_pod(
    name: str, gang: str, annotations: Mapping[str, str] | None = None, **fields: object
) -> PodView:
    return pod(name, annotations={NATIVE_GANG_ANNOTATION: gang, **(annotations or {})}, **fields)


def origin_of(read: NativeWorkload) -> Origin:
    origin = Origin.of({NATIVE_KEY: read.origin(CLUSTER)})
    assert origin is not None
    return origin


def workload(
    kind: Kind = "Job",
    *,
    gang: int = 1,
    gpus_per_pod: int = 1,
    name: str = "train",
    namespace: str = "team",
    uid: str = "uid-1",
    min_runtime_s: int = 0,
    time_limit_s: int | None = None,
    budget_label: str | None = None,
) -> NativeWorkload:
    return NativeWorkload(
        kind=kind,
        namespace=namespace,
        name=name,
        uid=uid,
        gang=gang,
        gpus_per_pod=gpus_per_pod,
        budget_label=budget_label,
        min_runtime_s=min_runtime_s,
        time_limit_s=time_limit_s,
    )


def only(found: list[NativeWorkload]) -> NativeWorkload:
    assert len(found) == 1, found
    return found[0]


# -- Jobs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "gang"),
    [(4, None, 4), (4, 2, 2), (2, 8, 2), (3, 3, 3), (0, None, 1), (4, 0, 1)],
)
def test_a_jobs_gang_is_its_parallelism_or_its_completions_when_fewer(
    parallelism: int, completions: int | None, gang: int
) -> None:
    read = only(
        native_workloads([job(parallelism=parallelism, completions=completions)], [], SCHEDULER)
    )
    assert read.kind == "Job"
    assert read.gang == gang
    assert read.gpus == gang * 2


def test_a_job_is_read_from_itself() -> None:
    read = only(
        native_workloads(
            [
                job(
                    parallelism=2,
                    labels={BUDGET_LABEL: "lab/vision"},
                    annotations={MIN_RUNTIME_KEY: "2h"},
                    active_deadline_s=7200,
                )
            ],
            [],
            SCHEDULER,
        )
    )
    assert read == NativeWorkload(
        kind="Job",
        namespace="team",
        name="train",
        uid="uid-train",
        gang=2,
        gpus_per_pod=2,
        budget_label="lab/vision",
        min_runtime_s=7200,
        time_limit_s=7200,
    )


@pytest.mark.parametrize(
    "skipped",
    [
        job(scheduler="default-scheduler"),
        job(scheduler=""),
        job(finished="Complete"),
        job(finished="Failed"),
        job(deleting=True),
    ],
    ids=["other-scheduler", "no-scheduler", "complete", "failed", "deleting"],
)
def test_jobs_of_another_scheduler_finished_or_being_deleted_are_skipped(skipped: JobView) -> None:
    assert native_workloads([skipped], [], SCHEDULER) == []
    assert len(native_workloads([skipped, job("kept")], [], SCHEDULER)) == 1


def test_a_jobs_pods_are_not_workloads_of_their_own() -> None:
    pods = [pod(f"train-{i}", job_uid="uid-train", gpus=2) for i in range(3)]
    found = native_workloads([job(parallelism=3)], pods, SCHEDULER)
    assert [w.kind for w in found] == ["Job"]
    # even when the Job itself is not seen (finished, or not listed yet)
    assert native_workloads([], pods, SCHEDULER) == []


def test_a_job_without_gpus_or_with_a_bad_contract_is_a_problem() -> None:
    no_gpus = only(native_workloads([job(gpus_per_pod=0)], [], SCHEDULER))
    assert no_gpus.problems
    assert "nvidia.com/gpu" in no_gpus.problems[0]
    assert no_gpus.gpus_per_pod == 1
    bad = only(native_workloads([job(labels={MIN_RUNTIME_KEY: "1d"})], [], SCHEDULER))
    assert len(bad.problems) == 1
    assert MIN_RUNTIME_KEY in bad.problems[0]
    assert bad.min_runtime_s == 0


def test_a_jobs_deadline_is_its_time_limit_when_positive() -> None:
    assert only(native_workloads([job(active_deadline_s=0)], [], SCHEDULER)).time_limit_s is None
    assert only(native_workloads([job()], [], SCHEDULER)).time_limit_s is None
    assert only(native_workloads([job(active_deadline_s=60)], [], SCHEDULER)).time_limit_s == 60


# -- gangs and lone pods ----------------------------------------------------------------


def test_annotated_pods_group_by_namespace_and_name() -> None:
    pods = [
        gang_pod("w-1", "ring/2", gpus=4),
        gang_pod("w-0", "ring/2", gpus=4),
        gang_pod("x-0", "ring/2", gpus=4, namespace="other"),
        gang_pod("x-1", "ring/2", gpus=4, namespace="other"),
        gang_pod("y-0", "mesh/3", gpus=1),
        gang_pod("y-1", "mesh/3", gpus=1),
        gang_pod("y-2", "mesh/3", gpus=1),
    ]
    found = native_workloads([], pods, SCHEDULER)
    assert [(w.kind, w.namespace, w.name, w.gang, w.gpus_per_pod) for w in found] == [
        ("Gang", "other", "ring", 2, 4),
        ("Gang", "team", "mesh", 3, 1),
        ("Gang", "team", "ring", 2, 4),
    ]
    assert all(not w.problems for w in found)
    assert [w.uid for w in found] == ["ring", "mesh", "ring"]


def test_a_gang_is_taken_only_once_all_its_pods_exist() -> None:
    """Bound whole or not at all: a gang missing a pod is not a workload yet."""
    partial = [gang_pod("w-0", "ring/3"), gang_pod("w-1", "ring/3")]
    assert native_workloads([], partial, SCHEDULER) == []
    whole = [*partial, gang_pod("w-2", "ring/3")]
    assert only(native_workloads([], whole, SCHEDULER)).gang == 3


def test_a_gangs_settings_are_read_from_its_first_pod_by_name() -> None:
    pods = [
        gang_pod("b", "ring/2", labels={BUDGET_LABEL: "second"}),
        gang_pod(
            "a", "ring/2", labels={BUDGET_LABEL: "first"}, annotations={MIN_RUNTIME_KEY: "90m"}
        ),
    ]
    read = only(native_workloads([], pods, SCHEDULER))
    assert read.budget_label == "first"
    assert read.min_runtime_s == 5400


def test_any_other_pod_is_a_workload_alone() -> None:
    pods = [
        pod("solo", gpus=3, labels={BUDGET_LABEL: "lab/nlp"}),
        pod("placed-elsewhere", scheduler="default-scheduler", gpus=8),
        pod("done", phase="Succeeded"),
        pod("going", deleting=True),
    ]
    read = only(native_workloads([], pods, SCHEDULER))
    assert (read.kind, read.name, read.uid, read.gang, read.gpus) == (
        "Pod",
        "solo",
        "uid-solo",
        1,
        3,
    )
    assert read.budget_label == "lab/nlp"


@pytest.mark.parametrize("value", ["ring", "ring/", "/2", "Ring/2", "ring/two", "ring/2/3", ""])
def test_a_malformed_gang_annotation_is_a_problem_of_the_pod_alone(value: str) -> None:
    read = only(native_workloads([], [gang_pod("p", value)], SCHEDULER))
    assert read.kind == "Pod"
    assert read.problems
    assert NATIVE_GANG_ANNOTATION in read.problems[0]


def test_a_gang_annotation_of_size_zero_is_a_problem_not_a_guess() -> None:
    """The module: malformed values are problems, "never guessed at"."""
    read = only(native_workloads([], [gang_pod("p", "ring/0")], SCHEDULER))
    assert read.problems, read


@pytest.mark.parametrize(
    ("pods", "words"),
    [
        ([gang_pod("a", "ring/2"), gang_pod("b", "ring/3")], "different sizes"),
        ([gang_pod("a", "ring/2", gpus=1), gang_pod("b", "ring/2", gpus=2)], "different GPU"),
        ([gang_pod("a", "ring/2", gpus=0), gang_pod("b", "ring/2", gpus=0)], "asks for no"),
        ([gang_pod(n, "ring/2") for n in "abc"], "more than its size 2"),
        (
            [
                gang_pod("a", "ring/2", annotations={MIN_RUNTIME_KEY: "forever"}),
                gang_pod("b", "ring/2"),
            ],
            MIN_RUNTIME_KEY,
        ),
    ],
    ids=["sizes", "gpus", "zero-gpus", "too-many", "contract"],
)
def test_a_gang_that_cannot_be_taken_as_it_is_has_problems(pods: list[PodView], words: str) -> None:
    read = only(native_workloads([], pods, SCHEDULER))
    assert read.kind == "Gang"
    assert any(words in problem for problem in read.problems), read.problems


def test_a_lone_pod_without_gpus_or_with_a_bad_contract_is_a_problem() -> None:
    read = only(native_workloads([], [pod("p", gpus=0)], SCHEDULER))
    assert read.problems
    assert read.gpus_per_pod == 1
    bad = only(native_workloads([], [pod("q", labels={MIN_RUNTIME_KEY: "31d"})], SCHEDULER))
    assert bad.problems
    too_long = only(
        native_workloads([], [pod("r", annotations={MIN_RUNTIME_KEY: str(31 * 86400)})], SCHEDULER)
    )
    assert too_long.problems
    at_most = only(
        native_workloads([], [pod("s", annotations={MIN_RUNTIME_KEY: str(30 * 86400)})], SCHEDULER)
    )
    assert at_most.problems == ()
    assert at_most.min_runtime_s == 30 * 86400


def test_workloads_come_in_key_order() -> None:
    found = native_workloads(
        [job("z", namespace="b"), job("y", namespace="a")],
        [pod("p", namespace="a"), gang_pod("g", "g/1", namespace="a")],
        SCHEDULER,
    )
    assert [w.key for w in found] == sorted(w.key for w in found)
    assert len(found) == 4


# -- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3600", 3600),
        ("0", 0),
        ("90m", 5400),
        ("2h", 7200),
        ("1h30m", 5400),
        ("45s", 45),
        ("1h1m1s", 3661),
        (" 2h ", 7200),
        ("", None),
        ("   ", None),
        ("abc", None),
        ("1d", None),
        ("-5", None),
        ("1.5h", None),
        ("30m1h", None),
        ("h", None),
    ],
)
def test_parse_duration(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


@settings(max_examples=300, deadline=None)
@given(hours=st.integers(0, 999), minutes=st.integers(0, 999), secs=st.integers(0, 999))
def test_parse_duration_adds_up_its_parts(hours: int, minutes: int, secs: int) -> None:
    assert parse_duration(f"{hours}h{minutes}m{secs}s") == hours * 3600 + minutes * 60 + secs
    assert parse_duration(f"{hours}h") == hours * 3600
    assert parse_duration(f"{minutes}m{secs}s") == minutes * 60 + secs


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(
        st.sampled_from("0123456789hms \u00b2\u00b9\u2074\u2460\u0663")
        | st.characters(categories=("Nd", "No", "L", "Zs")),
        max_size=8,
    )
)
@example(text="1h30m")
@example(text="\u00b2")
def test_parse_duration_answers_any_text_without_raising(text: str) -> None:
    """A label or annotation any user writes: a number of seconds or None, never an error."""
    seconds = parse_duration(text)
    assert seconds is None or seconds >= 0


def test_parse_duration_of_digits_that_are_not_decimal_is_none() -> None:
    """``str.isdigit`` is true of superscripts, which ``int`` refuses."""
    assert parse_duration("\u00b2") is None


def test_a_contract_nobody_can_read_is_a_problem_not_an_error() -> None:
    read = only(
        native_workloads([], [pod("p", annotations={MIN_RUNTIME_KEY: "\u00b9"})], SCHEDULER)
    )
    assert read.problems


# -- ids ----------------------------------------------------------------------------------


def test_native_workload_id_is_readable_stable_and_distinct() -> None:
    first = workload(uid="1111")
    made = native_workload_id(CLUSTER, first)
    assert "team" in made
    assert "train" in made
    assert "/" not in made, "a path segment of the API's URLs"
    assert native_workload_id(CLUSTER, first) == native_workload_id(CLUSTER, workload(uid="1111"))
    assert native_workload_id(CLUSTER, first) != native_workload_id(CLUSTER, workload(uid="2222"))
    assert native_workload_id(CLUSTER, first) != native_workload_id("cluster-b", first)
    assert native_workload_id(CLUSTER, first) != native_workload_id(
        CLUSTER, workload("Pod", uid="1111")
    )


def test_native_workload_id_of_long_names_is_at_most_the_longest_id() -> None:
    long = workload(namespace="n" * 63, name="j" * 253, uid="u" * 36)
    made = native_workload_id("c" * 128, long)
    assert len(made) <= MAX_ID_LENGTH
    assert re.match(ID_PATTERN, made)
    other = native_workload_id("c" * 128, workload(namespace="n" * 63, name="j" * 253, uid="v"))
    assert made != other


def test_gangs_of_one_name_in_two_namespaces_get_two_ids_however_long_the_cluster() -> None:
    """A gang's uid is its name: only the namespace tells two such gangs apart, however long
    the rest of the id is."""
    cluster = "c" * 120
    a = workload("Gang", namespace="team-a", name="ring", uid="ring")
    b = workload("Gang", namespace="team-b", name="ring", uid="ring")
    assert native_workload_id(cluster, a) != native_workload_id(cluster, b)


_NAME = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,60}[a-z0-9])?", fullmatch=True)
_CLUSTER = st.from_regex(r"[A-Za-z0-9._:@/-]{1,128}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(
    cluster=_CLUSTER,
    kind=st.sampled_from(["Job", "Gang", "Pod"]),
    namespace=_NAME,
    name=st.text("abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=253),
    uid=st.uuids().map(str),
)
def test_native_workload_id_is_always_a_valid_id(
    cluster: str, kind: Kind, namespace: str, name: str, uid: str
) -> None:
    made = native_workload_id(cluster, workload(kind, namespace=namespace, name=name, uid=uid))
    assert 1 <= len(made) <= MAX_ID_LENGTH
    assert re.match(ID_PATTERN, made), made
    assert "/" not in made
    assert made == native_workload_id(
        cluster, workload(kind, namespace=namespace, name=name, uid=uid)
    )


@st.composite
def _objects(draw: st.DrawFn) -> NativeWorkload:
    """A workload as Kubernetes makes them: a Job's or pod's uid is unique, a gang's is its
    name (unique in its namespace only)."""
    kind: Kind = draw(st.sampled_from(["Job", "Gang", "Pod"]))
    name = draw(st.sampled_from(["ring", "r" * 200, "r" * 200 + "x"]))
    namespace = draw(st.sampled_from(["team-a", "team-b", "n" * 63]))
    # a uid is one object's: of one kind and name, in one namespace
    serial = draw(st.sampled_from(["1", "2"]))
    uid = name if kind == "Gang" else f"{kind}-{namespace}-{len(name)}-{serial}"
    return workload(kind, namespace=namespace, name=name, uid=uid)


@settings(max_examples=300, deadline=None)
@given(cluster=st.sampled_from(["a", "c" * 128]), first=_objects(), second=_objects())
def test_two_objects_never_share_an_id(
    cluster: str, first: NativeWorkload, second: NativeWorkload
) -> None:
    same = first.key == second.key
    ids = native_workload_id(cluster, first), native_workload_id(cluster, second)
    assert (ids[0] == ids[1]) == same, (first, second, ids)


# -- shapes -------------------------------------------------------------------------------


def test_shape_problem() -> None:
    assert shape_problem(workload(gang=2, gpus_per_pod=4), [8]) is None  # fits one node
    assert shape_problem(workload(gang=2, gpus_per_pod=4), [8, 6]) is None  # fits the largest
    assert shape_problem(workload(gang=1, gpus_per_pod=4), [6, 8]) is None  # any node
    assert shape_problem(workload(gang=3, gpus_per_pod=4), [8, 4]) is None  # 12 spans nodes
    assert shape_problem(workload(gang=8, gpus_per_pod=2), [8, 8, 8]) is None  # pods of 2 span
    assert shape_problem(workload(gang=12, gpus_per_pod=1), [6, 8]) is None  # pods of 1 always
    assert shape_problem(workload(gang=4, gpus_per_pod=3), []) is None  # no nodes yet


def test_pods_that_spanning_nodes_cannot_divide_are_a_problem_naming_those_nodes() -> None:
    problem = shape_problem(workload(gang=4, gpus_per_pod=4), [6, 8, 6])
    assert problem is not None
    assert "nodes of 6 GPUs" in problem
    assert "8" not in problem.split("nodes of", 1)[1].split("GPUs", 1)[0]
    both = shape_problem(workload(gang=4, gpus_per_pod=4), [6, 10, 8])
    assert both is not None
    assert "nodes of 6, 10 GPUs" in both


def test_pods_larger_than_any_node_are_a_problem() -> None:
    problem = shape_problem(workload(gang=1, gpus_per_pod=16), [8, 4])
    assert problem is not None
    assert "16" in problem
    assert "(8)" in problem


@settings(max_examples=300, deadline=None)
@given(
    gang=st.integers(1, 16),
    per_pod=st.integers(1, 8),
    sizes=st.lists(st.integers(1, 16), min_size=1, max_size=6),
)
def test_a_shape_passed_binds_every_pod_on_whole_nodes(
    gang: int, per_pod: int, sizes: list[int]
) -> None:
    """What shape_problem lets through, the scheduler's placements (one node when the gang
    fits the largest, else whole nodes, the last with the remainder) can hold pod by pod."""
    read = workload(gang=gang, gpus_per_pod=per_pod)
    if shape_problem(read, sizes) is not None:
        return
    total = read.gpus
    largest = max(sizes)
    if total <= largest:
        placements = [[total]]
    else:
        placements = []
        for order in (sorted(sizes), sorted(sizes, reverse=True)):
            left, taken = total, []
            for size in order * (total // min(sizes) + 1):
                if left <= 0:
                    break
                taken.append(min(size, left))
                left -= taken[-1]
            placements.append(taken)
    for taken in placements:
        assert sum(n // per_pod for n in taken) == gang, (taken, per_pod)


# -- submissions and origins -------------------------------------------------------------


def submission(
    read: NativeWorkload, *, cluster: str, pool: str, budget: str, workload_id: str
) -> WorkloadSubmitted:
    """What the door states for ``read`` once its budget is decided."""
    return submission_of(read, cluster, workload_id, ()).submission(budget, pool)


def test_a_submission_states_the_workload_as_its_namespaces() -> None:
    read = workload(gang=4, gpus_per_pod=2, min_runtime_s=600, time_limit_s=3600)
    made = submission(read, cluster=CLUSTER, pool="a100", budget="lab/vision", workload_id="wl-1")
    assert made.workload_id == "wl-1"
    assert made.budget == "lab/vision"
    assert made.pools == ("a100",)
    assert made.gpus == 8
    assert made.min_runtime_s == 600
    assert made.time_limit_s == 3600
    assert made.submitter == "k8s:cluster-a/team"
    assert made.resumable is True
    assert made.spec[NATIVE_KEY] == read.origin(CLUSTER)
    assert read.origin(CLUSTER)["cluster"] == CLUSTER
    assert native_cluster(made.spec) == CLUSTER
    assert made.spec["name"] == "team/train"


@pytest.mark.parametrize(("kind", "resumable"), [("Job", True), ("Gang", True), ("Pod", False)])
def test_only_a_lone_pod_is_not_resumable(kind: Kind, resumable: bool) -> None:
    made = submission(workload(kind), cluster=CLUSTER, pool="p", budget="b", workload_id="wl-1")
    assert made.resumable is resumable


def test_a_submission_of_a_read_job_carries_its_deadline_and_contract() -> None:
    read = only(
        native_workloads(
            [job(parallelism=3, annotations={MIN_RUNTIME_KEY: "1h"}, active_deadline_s=900)],
            [],
            SCHEDULER,
        )
    )
    made = submission(read, cluster=CLUSTER, pool="p", budget="b", workload_id="wl-1")
    assert (made.gpus, made.min_runtime_s, made.time_limit_s) == (6, 3600, 900)


@pytest.mark.parametrize("kind", ["Job", "Gang", "Pod"])
def test_an_origin_is_read_back_from_what_a_workload_states(kind: Kind) -> None:
    read = workload(kind, gpus_per_pod=4, uid="abc")
    made = submission(read, cluster=CLUSTER, pool="p", budget="b", workload_id="wl-1")
    for spec in (made.spec, {NATIVE_KEY: read.origin(CLUSTER)}):
        assert Origin.of(spec) == Origin(kind, "team", "train", "abc", 4)


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {NATIVE_KEY: "cluster-a"},
        {
            NATIVE_KEY: {
                "kind": "Deployment",
                "namespace": "n",
                "name": "x",
                "uid": "u",
                "gpus_per_pod": 1,
            }
        },
        {NATIVE_KEY: {"kind": "Job", "namespace": "n", "name": "x", "uid": "u"}},
        {
            NATIVE_KEY: {
                "kind": "Job",
                "namespace": "n",
                "name": "x",
                "uid": "u",
                "gpus_per_pod": "x",
            }
        },
    ],
    ids=["none", "not-a-mapping", "other-kind", "missing-key", "bad-number"],
)
def test_a_spec_without_a_readable_origin_has_none(spec: Mapping[str, object]) -> None:
    assert Origin.of(spec) is None


def test_a_jobs_origin_owns_the_jobs_pods() -> None:
    origin = Origin("Job", "team", "train", "uid-train", 2)
    assert origin.owns(pod("train-0", job_uid="uid-train"))
    assert not origin.owns(pod("train-0", job_uid="uid-other"))
    assert not origin.owns(pod("train-0"))
    assert not origin.owns(pod("train-0", job_uid="uid-train", namespace="other"))
    assert not origin.owns(pod("x", uid="uid-train"))  # a pod whose own uid it is


def test_a_gangs_origin_owns_the_pods_annotated_with_its_name() -> None:
    origin = Origin("Gang", "team", "ring", "ring", 1)
    assert origin.owns(gang_pod("a", "ring/2"))
    assert origin.owns(gang_pod("b", "ring/3"))  # its size is no part of whose it is
    assert not origin.owns(gang_pod("c", "mesh/2"))
    assert not origin.owns(gang_pod("d", "ring/2", namespace="other"))
    assert not origin.owns(gang_pod("e", "ring/2", job_uid="uid-x"))  # a Job's pod
    assert not origin.owns(pod("ring"))  # named like it, not annotated


def test_a_lone_pods_origin_owns_that_pod_only() -> None:
    origin = Origin("Pod", "team", "solo", "uid-solo", 1)
    assert origin.owns(pod("solo"))
    assert origin.owns(pod("renamed", uid="uid-solo"))
    assert not origin.owns(pod("solo", uid="uid-new"))  # deleted and applied again
    assert not origin.owns(pod("solo", namespace="other"))


def test_each_read_workloads_origin_owns_exactly_its_pods() -> None:
    pods = [
        *(pod(f"train-{i}", job_uid="uid-train", gpus=2) for i in range(2)),
        gang_pod("ring-0", "ring/2"),
        gang_pod("ring-1", "ring/2"),
        pod("solo"),
    ]
    found = native_workloads([job(parallelism=2)], pods, SCHEDULER)
    owned = {w.name: sorted(p.name for p in pods if origin_of(w).owns(p)) for w in found}
    assert owned == {
        "train": ["train-0", "train-1"],
        "ring": ["ring-0", "ring-1"],
        "solo": ["solo"],
    }


# -- binding plans -------------------------------------------------------------------------


def test_a_binding_plan_fills_each_nodes_slots_in_name_order() -> None:
    placement = [("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3, 4, 5, 6, 7))]
    pods = [pod(f"p{i}") for i in (4, 1, 5, 0, 3, 2)]
    plan = binding_plan(placement, pods, 2)
    assert [(p.name, node) for p, node in plan] == [
        ("p0", "n1"),
        ("p1", "n1"),
        ("p2", "n2"),
        ("p3", "n2"),
        ("p4", "n2"),
        ("p5", "n2"),
    ]


def test_a_binding_plan_counts_the_pods_already_bound() -> None:
    placement = [("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3))]
    pods = [
        pod("a", node="n1", phase="Running"),
        pod("b", node="n2", phase="Succeeded"),  # finished: its slot is free again
        pod("c", node="n2", phase="Running", deleting=True),  # going: not counted
        pod("d", node="elsewhere", phase="Running"),  # not on the placement: not counted
        pod("e"),
        pod("f"),
        pod("g"),
        pod("h"),
        pod("i", deleting=True),  # never bound
        pod("j", phase="Failed"),  # never bound
    ]
    plan = binding_plan(placement, pods, 2)
    assert [(p.name, node) for p, node in plan] == [("e", "n1"), ("f", "n2"), ("g", "n2")]


def test_a_binding_plan_binds_no_more_pods_than_slots() -> None:
    placement = [("n1", (0, 1, 2))]  # 3 GPUs: one pod of 2
    plan = binding_plan(placement, [pod("a"), pod("b")], 2)
    assert [(p.name, node) for p, node in plan] == [("a", "n1")]
    full = [pod("x", node="n1", phase="Running"), pod("y", node="n1", phase="Running"), pod("z")]
    assert binding_plan(placement, full, 2) == []
    assert binding_plan([], [pod("a")], 1) == []


_PLACEMENT = st.lists(
    st.tuples(st.sampled_from(["n1", "n2", "n3", "n4"]), st.integers(0, 8)),
    max_size=4,
    unique_by=lambda t: t[0],
).map(lambda nodes: [(node, tuple(range(gpus))) for node, gpus in nodes])
_POD = st.builds(
    lambda name, node, phase, deleting: pod(name, node=node, phase=phase, deleting=deleting),
    name=st.text("abcdef0123", min_size=1, max_size=4),
    node=st.none() | st.sampled_from(["n1", "n2", "n3", "n4", "n9"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    deleting=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    placement=_PLACEMENT,
    pods=st.lists(_POD, max_size=10, unique_by=lambda p: p.name),
    per_pod=st.integers(1, 4),
)
def test_a_binding_plan_binds_each_waiting_pod_once_within_free_slots(
    placement: list[tuple[str, tuple[int, ...]]], pods: list[PodView], per_pod: int
) -> None:
    plan = binding_plan(placement, pods, per_pod)
    bound = [p.name for p, _ in plan]
    assert len(bound) == len(set(bound)), "a pod assigned twice"
    waiting = {p.name for p in pods if p.node is None and not p.deleting and not p.finished}
    assert set(bound) <= waiting, "only unbound pods that are neither going nor finished"
    free = {
        node: len(gpus) // per_pod
        - sum(1 for p in pods if p.node == node and not p.deleting and not p.finished)
        for node, gpus in placement
    }
    per_node = Counter(node for _, node in plan)
    assert set(per_node) <= set(free)
    for node, count in per_node.items():
        assert count <= free[node], (node, count, free)
    # nothing left waiting while a slot is free
    if len(bound) < len(waiting):
        assert all(per_node[node] >= max(0, slots) for node, slots in free.items())
    # in name order
    assert bound == sorted(bound)


# -- foreign pods --------------------------------------------------------------------------


def test_native_pods_are_not_foreign_to_the_scheduler_that_binds_them() -> None:
    pods = [
        pod("native", node="n", phase="Running", gpus=4, scheduler="fairshare"),
        pod("kube", node="n", phase="Running", gpus=2, scheduler="default-scheduler"),
        pod("volcano", node="n", phase="Running", gpus=1, scheduler="volcano"),
        pod("unnamed", node="n", phase="Running", gpus=16, scheduler=""),
        pod(
            "run",
            node="n",
            phase="Running",
            gpus=8,
            scheduler="",
            labels={MANAGED_BY: MANAGER, CLUSTER_LABEL: CLUSTER, ATTEMPT_LABEL: "1"},
            annotations={WORKLOAD_ANNOTATION: "wl-1"},
        ),
    ]
    assert pods[-1].run(CLUSTER) == ("wl-1", 1)
    names = [p.name for p in foreign_pods(pods, "n", CLUSTER, scheduler="fairshare")]
    assert names == ["kube", "unnamed", "volcano"]
    assert foreign_gpus(pods, "n", CLUSTER, scheduler="fairshare") == 19
    # the default "" (native work not taken): the native pod is foreign as before
    assert [p.name for p in foreign_pods(pods, "n", CLUSTER)] == [
        "kube",
        "native",
        "unnamed",
        "volcano",
    ]
    assert foreign_gpus(pods, "n", CLUSTER) == 23
    # another scheduler's name: its pods are the ones left out
    assert [p.name for p in foreign_pods(pods, "n", CLUSTER, scheduler="volcano")] == [
        "kube",
        "native",
        "unnamed",
    ]
