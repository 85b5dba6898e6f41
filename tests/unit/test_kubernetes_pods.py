"""A run as pods and pods read back (``services.agents.kubernetes.pods``), without a cluster:
one pod per node of a placement asking its GPUs as requests = limits; names and labels valid
for Kubernetes whatever the ids; a spec's problems named at submit; a run's outcome from its
pods; GPUs held by pods Fairshare did not create."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.types import ID_PATTERN
from scheduling.spec_checks import pod_spec_problems
from services.agents.adapter import RunRequest
from services.agents.kubernetes.pods import (
    CLUSTER_LABEL,
    MANAGED_BY,
    MANAGER,
    PodOptions,
    PodSpecError,
    PodView,
    foreign_gpus,
    label_value,
    pod_manifests,
    pod_name,
    run_outcome,
    untolerated,
)

OPTIONS = PodOptions(cluster="k8s", namespace="runs")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
IDS = st.from_regex(ID_PATTERN.replace("+$", "{1,128}$").replace("^", "^", 1), fullmatch=True)


def _run(spec: dict[str, object] | None = None, nodes: int = 2) -> RunRequest:
    placement = tuple((f"node-{i}", (0, 1, 2, 3)) for i in range(nodes))
    return RunRequest("w/1", 2, placement, spec or {})


def test_one_pod_per_node_bound_asking_its_gpus_as_requests_and_limits() -> None:
    pods = pod_manifests(_run({"image": "x:1", "command": "echo hi", "cpu": "2"}), OPTIONS)
    assert [p["spec"]["nodeName"] for p in pods] == ["node-0", "node-1"]
    for index, pod in enumerate(pods):
        container = pod["spec"]["containers"][0]
        assert container["resources"]["requests"] == container["resources"]["limits"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "4", "cpu": "2"}
        assert container["command"] == ["/bin/sh", "-c", "echo hi"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["FAIRSHARE_ATTEMPT"] == "2"
        assert env["FAIRSHARE_GANG_INDEX"] == str(index)
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["metadata"]["labels"][MANAGED_BY] == MANAGER
        assert pod["metadata"]["namespace"] == "runs"
    assert len({p["metadata"]["name"] for p in pods}) == 2


def test_names_are_the_same_for_the_same_run_and_differ_between_attempts() -> None:
    first = [p["metadata"]["name"] for p in pod_manifests(_run(), OPTIONS)]
    again = [p["metadata"]["name"] for p in pod_manifests(_run(), OPTIONS)]
    assert first == again, "a restarted agent creates the same names: never twice"
    assert pod_name("k8s", "w/1", 1, 0) != pod_name("k8s", "w/1", 2, 0)
    assert pod_name("k8s", "W.1", 1, 0) != pod_name("k8s", "w-1", 1, 0), "alike once made safe"


@given(IDS, IDS, st.integers(1, 10**6), st.integers(0, 4096))
def test_names_and_labels_are_valid_for_kubernetes_whatever_the_ids(
    cluster: str, workload: str, attempt: int, index: int
) -> None:
    name = pod_name(cluster, workload, attempt, index)
    assert len(name) <= 63, name
    assert DNS_LABEL.match(name), name
    for value in (label_value(cluster), label_value(workload)):
        assert len(value) <= 63, value
        assert LABEL_VALUE.match(value), value


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"image": "has space"}, "spec.image"),
        ({"command": 3}, "spec.command"),
        ({"command": ""}, "spec.command"),
        ({"args": "a b"}, "spec.args"),
        ({"env": {"1X": "a"}}, "spec.env.1X"),
        ({"env": {"FAIRSHARE_ATTEMPT": "9"}}, "spec.env.FAIRSHARE_ATTEMPT"),
        ({"env": {"A": 1}}, "spec.env.A"),
        ({"cpu": "lots"}, "spec.cpu"),
        ({"memory": "-1Gi"}, "spec.memory"),
        ({"memory": 0}, "spec.memory"),
        ({"annotations": {"bad key!": "x"}}, "spec.annotations.bad key!"),
        ({"annotations": {"fairshare.dev/workload-id": "x"}}, "fairshare.dev/workload-id"),
    ],
)
def test_a_spec_that_cannot_make_a_pod_names_its_key(spec: dict[str, object], key: str) -> None:
    problems = pod_spec_problems(spec)
    assert problems, spec
    assert key in problems[0], problems
    with pytest.raises(PodSpecError, match=re.escape(key)):
        pod_manifests(_run(spec), OPTIONS)


def test_a_spec_for_pods_and_other_executors_keys_are_fine() -> None:
    spec = {"image": "repo/x:1", "command": ["python", "-m", "x"], "args": ["--n", "1"],
            "env": {"A_B": "1"}, "cpu": 4, "memory": "16Gi",
            "annotations": {"example.com/team": "ml"}, "duration_s": 60, "cwd": "/tmp"}  # fmt: skip
    assert pod_spec_problems(spec) == []


def _pod(name: str, phase: str, **fields: object) -> PodView:
    return PodView(name=name, namespace="runs", node="n", phase=phase, **fields)  # type: ignore[arg-type]


def test_a_run_is_over_when_a_pod_failed_all_succeeded_or_one_was_deleted_around_it() -> None:
    running = [_pod("a", "Running"), _pod("b", "Running")]
    assert run_outcome(running, 2) == run_outcome(running, 2)
    assert not run_outcome(running, 2).ended
    assert run_outcome(running, 2).running
    failed = [_pod("a", "Running"), _pod("b", "Failed", exit_code=137, reason="OOMKilled")]
    outcome = run_outcome(failed, 2)
    assert outcome.ended
    assert outcome.exit_code == 137
    assert "OOMKilled" in outcome.message
    done = run_outcome([_pod("a", "Succeeded"), _pod("b", "Succeeded")], 2)
    assert done.ended
    assert done.exit_code == 0
    gone = run_outcome([_pod("a", "Running")], 2)
    assert gone.ended
    assert gone.exit_code is None
    assert "deleted" in gone.message
    assert not run_outcome([_pod("a", "Pending")], 1).running


def test_a_stopping_run_is_over_once_its_pods_are_gone_or_finished() -> None:
    assert not run_outcome([_pod("a", "Running", deleting=True)], 1, stopping=True).ended
    assert run_outcome([], 1, stopping=True).ended
    ended = run_outcome([_pod("a", "Failed", exit_code=143)], 1, stopping=True)
    assert ended.ended
    assert ended.exit_code == 143


def test_gpus_of_pods_around_fairshare_count_as_foreign_unless_finished() -> None:
    ours = {MANAGED_BY: MANAGER, CLUSTER_LABEL: "k8s", "fairshare.dev/attempt": "1"}
    pods = [
        _pod("mine", "Running", gpus=4, labels=ours,
             annotations={"fairshare.dev/workload-id": "w"}),
        _pod("theirs", "Running", gpus=2),
        _pod("done", "Succeeded", gpus=8),
        PodView(name="elsewhere", namespace="x", node="m", phase="Running", gpus=8),
    ]  # fmt: skip
    assert foreign_gpus(pods, "n", "k8s") == 2
    assert foreign_gpus(pods, "n", "other-cluster") == 6, "another cluster's runs are foreign"


def test_taints_that_forbid_the_pods_and_those_the_agent_follows_otherwise() -> None:
    taints = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "maintenance", "value": "bios", "effect": "NoExecute"},
        {"key": "soft", "effect": "PreferNoSchedule"},
    ]
    assert untolerated(taints, "nvidia.com/gpu") == ("maintenance=bios:NoExecute",)
