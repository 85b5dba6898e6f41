"""Native work over a real Kubernetes control plane (``bash .ci/start-kubernetes``: the API
server, the controller manager's Job controller and garbage collector, KWOK's nodes): Jobs
created through the Kubernetes API as ``kubectl apply`` would, unchanged but for their
``schedulerName``, are submitted, bound as one gang, charged, preempted by suspending them and
resumed, refused when their namespace may not charge the budget they name, cancelled when
deleted; a restarted agent binds nothing twice. Scheduler, agent and API run over the session's
Kafka (``kubernetes_stack``)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import BatchV1Api

from events.models import GroupBound
from services.agents.kubernetes.native_runs import NativeRuns
from tests.integration.cluster_stack import ADMIN, ANA, BO, wait_until
from tests.integration.kafka_bus import KafkaBus
from tests.integration.kubernetes_fixtures import (
    FINISH_AFTER,
    KubernetesCluster,
    NodeFactory,
    fake_gpu_nodes,
    kube_core,
    kube_namespace,
    kubectl_binary,
    kubernetes_cluster,
)
from tests.integration.kubernetes_stack import KubernetesStack, kubernetes_stack

pytestmark = [pytest.mark.broker, pytest.mark.kubernetes]

__all__ = ["fake_gpu_nodes", "kube_core", "kube_namespace", "kubernetes_cluster"]


@pytest.fixture
def stack(
    bus: KafkaBus,
    kubernetes_cluster: KubernetesCluster,
    kube_namespace: str,
    fake_gpu_nodes: NodeFactory,
) -> Iterator[KubernetesStack]:
    with kubernetes_stack(bus, kubernetes_cluster, kube_namespace, fake_gpu_nodes) as running:
        running.seed_lab()
        yield running


def _scheduler_name(stack: KubernetesStack) -> str:
    """A scheduler name of this test's own: other tests' agents leave its Jobs alone."""
    return f"fs-{stack.cluster}"


def _bind(stack: KubernetesStack, budget: str, *, default: bool = False) -> None:
    stack.seed(
        GroupBound(
            budget=budget,
            cluster=stack.cluster,
            group=stack.namespace,
            default=default,
            bound_by="admin",
        )
    )


def _job(
    stack: KubernetesStack,
    name: str,
    *,
    pods: int,
    gpus: int,
    budget: str | None,
    min_runtime: str = "3",
    finish_after: str = "20s",
    backoff_limit: int = 6,
) -> dict[str, Any]:
    """An indexed Job as a user writes it: only ``schedulerName`` and the labels name
    Fairshare."""
    labels = {"fairshare.dev/min-runtime": min_runtime}
    if budget is not None:
        labels["fairshare.dev/budget"] = budget
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": stack.namespace, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"annotations": {FINISH_AFTER: finish_after}},
                "spec": {
                    "schedulerName": _scheduler_name(stack),
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox:1.36",
                            "command": ["sh", "-c", "sleep 3600"],
                            "resources": {
                                "requests": {"nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def _batch(stack: KubernetesStack) -> BatchV1Api:
    return BatchV1Api(stack.core.api_client)


def _job_pods(stack: KubernetesStack, name: str) -> list[Any]:
    return list(
        stack.core.list_namespaced_pod(stack.namespace, label_selector=f"job-name={name}").items
    )


def _native_id(stack: KubernetesStack, name: str) -> str | None:
    """The workload id the agent gave the Job (its annotation, else the API's list)."""
    body = stack.api().get("/workloads", headers=ADMIN).json()
    for item in body["workloads"]:
        if item.get("name") == f"{stack.namespace}/{name}":
            return str(item["workload_id"])
    return None


def _start(stack: KubernetesStack, **options: Any) -> None:
    stack.start_agent(scheduler_name=_scheduler_name(stack), **options)
    stack.start_scheduler()
    stack.start_api()
    wait_until(lambda: stack.api().get("/nodes", headers=ADMIN).json()["nodes"], "nodes")


def _events(stack: KubernetesStack, name: str) -> list[Any]:
    return [
        event
        for event in stack.core.list_namespaced_event(stack.namespace).items
        if event.involved_object.name == name and event.source.component == "fairshare"
    ]


def _status(stack: KubernetesStack, workload_id: str) -> str | None:
    return stack.workload(workload_id).get("status")


@pytest.mark.timeout(420)
def test_a_native_job_is_one_gang_charged_preempted_three_times_and_completes(
    stack: KubernetesStack,
) -> None:
    stack.nodes(2, gpus=8)
    _bind(stack, "lab/a")
    _start(stack)
    batch = _batch(stack)
    # lab/a also holds the other node, with work inside a long contract: the Job is the one
    # preemptible run of the budget that has more than its share
    response = stack.api().post(
        "/workloads",
        json={
            "workload_id": "wa", "budget": "lab/a", "gpus": 8, "min_runtime_s": 3600,
            "pools": [stack.pool], "spec": {"annotations": {FINISH_AFTER: "30m"}},
        },
        headers=ANA,
    )  # fmt: skip
    assert response.status_code in (200, 201, 202), response.text
    wait_until(lambda: _status(stack, "wa") == "running", "wa runs", 60)
    # an indexed Job of 4 pods x 2 GPUs, funded for 3 s, backoffLimit 1: preempted three times,
    # it must still complete
    batch.create_namespaced_job(
        stack.namespace,
        _job(stack, "train", pods=4, gpus=2, budget="lab.a", backoff_limit=1,
             finish_after="25s"),
    )  # fmt: skip
    wait_until(lambda: _native_id(stack, "train") is not None, "the Job submitted", 60)
    workload_id = _native_id(stack, "train")
    assert workload_id is not None
    first = stack.workload(workload_id)
    assert first["budget"] == "lab/a"
    assert first["gpus"] == 8
    wait_until(lambda: _status(stack, workload_id) == "running", "the Job placed", 60)
    pods = _job_pods(stack, "train")
    (node,) = {p.spec.node_name for p in pods}
    assert len(pods) == 4
    assert node is not None, "one gang, bound to one node"
    assert [n["node"] for n in stack.workload(workload_id)["placement"]] == [node]
    assert all(p.spec.scheduler_name == _scheduler_name(stack) for p in pods)

    # lab/b (through `fairshare submit`, one queue with the Job) preempts it three times
    for round_ in (1, 2, 3):
        wait_until(
            lambda r=round_: (
                stack.workload(workload_id).get("attempt") == r
                and _status(stack, workload_id) == "running"
            ),
            f"attempt {round_} running",
            90,
        )
        response = stack.api().post(
            "/workloads",
            json={
                "workload_id": f"wb{round_}", "budget": "lab/b", "gpus": 8, "min_runtime_s": 1,
                "pools": [stack.pool], "spec": {"annotations": {FINISH_AFTER: "2s"}},
            },
            headers=BO,
        )  # fmt: skip
        assert response.status_code in (200, 201, 202), response.text
        wait_until(lambda r=round_: _status(stack, f"wb{r}") == "succeeded", f"wb{round_} ran", 90)
        if round_ == 1:
            # while wb1 ran, the Job waited: its Job is suspended by Fairshare, and says why
            job = batch.read_namespaced_job("train", stack.namespace)
            assert job.status.failed in (None, 0), job.status
    wait_until(lambda: _status(stack, workload_id) == "succeeded", "the Job completes", 120)
    done = stack.workload(workload_id)
    assert done["attempt"] == 4
    job = batch.read_namespaced_job("train", stack.namespace)
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    assert job.status.failed in (None, 0), "preemptions spent none of the backoffLimit"
    reasons = [e.reason for e in _events(stack, "train")]
    assert reasons.count("Preempted") == 3, reasons
    assert reasons.count("Placed") == 4, reasons
    assert "Queued" in reasons, reasons
    assert "Finished" in reasons, reasons
    assert stack.agent is not None
    assert stack.agent.fenced_commands == 0


@pytest.mark.timeout(300)
def test_describe_shows_why_a_native_job_waits(stack: KubernetesStack) -> None:
    kubectl = kubectl_binary()
    stack.nodes(1, gpus=8)
    _bind(stack, "lab/a", default=True)
    _start(stack)
    batch = _batch(stack)
    batch.create_namespaced_job(
        stack.namespace, _job(stack, "first", pods=1, gpus=8, budget=None, min_runtime="600")
    )
    wait_until(lambda: _native_id(stack, "first") is not None, "the first Job submitted", 60)
    first = _native_id(stack, "first")
    assert first is not None
    wait_until(lambda: _status(stack, first) == "running", "the first Job runs", 60)
    batch.create_namespaced_job(stack.namespace, _job(stack, "second", pods=2, gpus=4, budget=None))

    def described() -> str:
        return subprocess.run(
            [kubectl, "--kubeconfig", str(stack.kubernetes.kubeconfig), "-n", stack.namespace,
             "describe", "job", "second"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout  # fmt: skip

    wait_until(lambda: "fairshare.dev/why-pending" in described(), "the why-pending", 60)
    text = described()
    second = _native_id(stack, "second")
    assert second is not None

    def pending() -> list[dict[str, Any]]:
        why = stack.api().get(f"/workloads/{second}/why", headers=ADMIN).json()
        return list(why.get("pending") or [])

    # the agent annotates from the decision it read; the API's view folds the same decision on
    # its own reader, so it may answer a moment later
    wait_until(lambda: bool(pending()), "the API's why-pending", 30)
    sentence = pending()[0]["summary"]
    # the sentence in full, as an Event (describe cuts annotations at 140 characters); its
    # relative times may have moved on since
    wait_until(lambda: sentence.split(" (in ")[0] in described(), "the Pending Event", 30)
    text = described()
    assert "fairshare.dev/queue-position: 1 of 1" in text
    assert "Queued" in text, "the Event of the decision"
    assert "Pending" in text
    # nothing of it is bound while it waits
    assert all(p.spec.node_name is None for p in _job_pods(stack, "second"))


@pytest.mark.timeout(240)
def test_a_job_naming_a_budget_its_namespace_is_not_bound_to_is_refused(
    stack: KubernetesStack,
) -> None:
    stack.nodes(1, gpus=8)
    _bind(stack, "lab/a")
    _start(stack)
    _batch(stack).create_namespaced_job(
        stack.namespace, _job(stack, "sneaky", pods=1, gpus=1, budget="lab.b")
    )
    wait_until(
        lambda: any(e.reason == "Refused" for e in _events(stack, "sneaky")), "the refusal", 60
    )
    (event,) = [e for e in _events(stack, "sneaky") if e.reason == "Refused"]
    assert event.type == "Warning"
    assert "lab.b" in event.message, event.message
    assert "not bound" in event.message, event.message
    time.sleep(3)
    assert _native_id(stack, "sneaky") is None, "never submitted"
    pods = _job_pods(stack, "sneaky")
    assert pods
    assert all(p.spec.node_name is None for p in pods), "never bound"


@pytest.mark.timeout(240)
def test_a_job_deleted_mid_run_is_cancelled_and_charged_to_its_end(
    stack: KubernetesStack,
) -> None:
    stack.nodes(1, gpus=8)
    _bind(stack, "lab/a")
    _start(stack)
    batch = _batch(stack)
    batch.create_namespaced_job(
        stack.namespace, _job(stack, "gone", pods=2, gpus=2, budget="lab.a", finish_after="10m")
    )
    wait_until(lambda: _native_id(stack, "gone") is not None, "submitted", 60)
    workload_id = _native_id(stack, "gone")
    assert workload_id is not None
    wait_until(lambda: _status(stack, workload_id) == "running", "running", 60)
    time.sleep(4)
    batch.delete_namespaced_job("gone", stack.namespace, propagation_policy="Background")
    wait_until(lambda: _status(stack, workload_id) == "cancelled", "cancelled", 90)
    wait_until(lambda: not _job_pods(stack, "gone"), "its pods collected", 60)
    assert stack.agent is not None
    assert stack.agent.door.cancelled == 1


class _Killed(BaseException):
    """Stands for kill -9: nothing after it runs, nothing is cleaned up."""


@pytest.mark.timeout(300)
def test_an_agent_killed_mid_placement_binds_nothing_twice(
    stack: KubernetesStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    (node,) = stack.nodes(1, gpus=8)
    _bind(stack, "lab/a")
    original = NativeRuns.bind
    calls: list[str] = []

    lock = threading.Lock()

    def bind_two_then_die(self: NativeRuns, pod: Any, target: str) -> str | None:
        with lock:  # bindings go out from several threads: exactly two, then the kill
            if len(calls) >= 2:
                raise _Killed
            calls.append(pod.name)
        return original(self, pod, target)

    monkeypatch.setattr(NativeRuns, "bind", bind_two_then_die)
    _start(stack)
    _batch(stack).create_namespaced_job(
        stack.namespace, _job(stack, "half", pods=4, gpus=2, budget="lab.a", finish_after="30s")
    )
    wait_until(lambda: len(calls) == 2, "two pods bound", 60)
    time.sleep(1)
    bound = {p.metadata.name for p in _job_pods(stack, "half") if p.spec.node_name}
    assert bound == set(calls)
    monkeypatch.setattr(NativeRuns, "bind", original)
    stack.agent_died_of(_Killed)
    agent = stack.start_agent(scheduler_name=_scheduler_name(stack))
    workload_id = _native_id(stack, "half")
    assert workload_id is not None
    wait_until(
        lambda: all(p.spec.node_name == node for p in _job_pods(stack, "half")),
        "the rest bound",
        60,
    )
    # (its bindings are counted when their outcome is read, on its next round)
    wait_until(lambda: agent.adapter.native.bound_total >= 2, "the bindings counted", 10)
    time.sleep(1)
    assert agent.adapter.native.bound_total == 2, "only the two not bound before"
    wait_until(lambda: _status(stack, workload_id) == "succeeded", "it completes", 120)


def _bare_pod(
    stack: KubernetesStack, name: str, gpus: int, annotations: dict[str, str]
) -> dict[str, Any]:
    """A pod of a custom controller (or of nobody): no Job owns it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": stack.namespace,
            "labels": {"fairshare.dev/budget": "lab.a"},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": _scheduler_name(stack),
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


@pytest.mark.timeout(300)
def test_a_custom_controllers_gang_is_bound_whole_and_a_lone_pod_alone(
    stack: KubernetesStack,
) -> None:
    stack.nodes(2, gpus=4)
    _bind(stack, "lab/a")
    _start(stack)
    ring = {"fairshare.dev/gang": "ring/3", FINISH_AFTER: "5s"}
    # two of the gang's three pods: nothing is taken until it can be bound whole
    for index in (0, 1):
        stack.core.create_namespaced_pod(
            stack.namespace, _bare_pod(stack, f"ring-{index}", 2, ring)
        )
    stack.core.create_namespaced_pod(
        stack.namespace, _bare_pod(stack, "solo", 1, {FINISH_AFTER: "5s"})
    )
    wait_until(lambda: _native_id(stack, "solo") is not None, "the lone pod submitted", 60)
    solo = _native_id(stack, "solo")
    assert solo is not None
    wait_until(lambda: _status(stack, solo) == "succeeded", "the lone pod ran", 60)
    assert _native_id(stack, "ring") is None, "not taken before it is whole"
    stack.core.create_namespaced_pod(stack.namespace, _bare_pod(stack, "ring-2", 2, ring))
    wait_until(lambda: _native_id(stack, "ring") is not None, "the gang submitted", 60)
    gang = _native_id(stack, "ring")
    assert gang is not None
    assert stack.workload(gang)["gpus"] == 6, "3 pods of 2 GPUs, as its annotation says"
    wait_until(lambda: _status(stack, gang) == "succeeded", "the gang ran, whole", 90)
    nodes = {
        p.spec.node_name
        for p in stack.core.list_namespaced_pod(stack.namespace).items
        if p.metadata.name.startswith("ring-")
    }
    assert len(nodes) == 2, "6 GPUs span two nodes of 4: whole pods of 2 on each"


@pytest.mark.timeout(240)
def test_a_native_jobs_deadline_is_kept_by_its_job_controller(stack: KubernetesStack) -> None:
    stack.nodes(1, gpus=8)
    _bind(stack, "lab/a")
    _start(stack)
    job = _job(stack, "late", pods=1, gpus=1, budget="lab.a", finish_after="10m")
    job["spec"]["activeDeadlineSeconds"] = 5
    _batch(stack).create_namespaced_job(stack.namespace, job)
    wait_until(lambda: _native_id(stack, "late") is not None, "submitted", 60)
    workload_id = _native_id(stack, "late")
    assert workload_id is not None
    assert stack.workload(workload_id)["time_limit_s"] == 5
    wait_until(lambda: _status(stack, workload_id) == "failed", "failed at its deadline", 90)
    ended = stack.workload(workload_id)
    assert "DeadlineExceeded" in ended["end_message"], ended
    late = _batch(stack).read_namespaced_job("late", stack.namespace)
    assert not late.spec.suspend, "ended by its own controller, not left suspended"


@pytest.mark.timeout(240)
def test_a_pod_that_cannot_be_bound_loses_the_run_which_is_requeued_and_runs(
    stack: KubernetesStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.nodes(1, gpus=8)
    _bind(stack, "lab/a")
    original = NativeRuns.bind
    refused: list[str] = []

    def refuse_the_first(self: NativeRuns, pod: Any, target: str) -> str | None:
        if not refused:
            refused.append(pod.name)
            return f'404 nodes "{target}" not found'  # as the API server says it
        return original(self, pod, target)

    monkeypatch.setattr(NativeRuns, "bind", refuse_the_first)
    _start(stack)
    _batch(stack).create_namespaced_job(
        stack.namespace, _job(stack, "again", pods=2, gpus=2, budget="lab.a", finish_after="3s")
    )
    wait_until(lambda: _native_id(stack, "again") is not None, "submitted", 60)
    workload_id = _native_id(stack, "again")
    assert workload_id is not None
    wait_until(lambda: _status(stack, workload_id) == "succeeded", "requeued, run", 120)
    assert stack.workload(workload_id)["attempt"] == 2, "the lost attempt, then the one that ran"
    reasons = [e.reason for e in _events(stack, "again")]
    assert "Lost" in reasons, reasons
    job = _batch(stack).read_namespaced_job("again", stack.namespace)
    assert job.status.failed in (None, 0), "the lost attempt spent none of its backoffLimit"
