"""The Kubernetes test cluster itself (``bash .ci/start-kubernetes``), as the Kubernetes agent's
tests use it: a fake GPU node goes Ready with its GPUs; a pod pinned to it runs, then ends as
its KWOK annotations say; a deleted running pod ends as a kubelet would end it and is gone."""

from __future__ import annotations

import time

import pytest
from kubernetes.client import CoreV1Api, V1Pod

from tests.integration.kubernetes_fixtures import (
    GPU,
    POOL_LABEL,
    KubernetesCluster,
    NodeFactory,
    fake_gpu_nodes,
    kube_core,
    kube_namespace,
    kubernetes_cluster,
    pinned_gpu_pod,
    terminated_state,
    watch_pod,
)

pytestmark = pytest.mark.kubernetes

# the fixtures this module uses, imported from kubernetes_fixtures (pytest finds them here)
__all__ = ["fake_gpu_nodes", "kube_core", "kube_namespace", "kubernetes_cluster"]


def _ended(kind: str, pod: V1Pod) -> bool:
    return pod.status.phase in ("Succeeded", "Failed")


def _gone(kind: str, pod: V1Pod) -> bool:
    return kind == "DELETED"


def _phases(events: list[tuple[str, V1Pod]]) -> list[str]:
    """The phases in the order seen, each once."""
    phases: list[str] = []
    for _, pod in events:
        if not phases or phases[-1] != pod.status.phase:
            phases.append(pod.status.phase)
    return phases


def test_a_fake_gpu_node_is_ready_with_its_gpus(
    kubernetes_cluster: KubernetesCluster, kube_core: CoreV1Api, fake_gpu_nodes: NodeFactory
) -> None:
    assert kubernetes_cluster.version.startswith("v1.")
    names = fake_gpu_nodes(2, gpus=8, pool="train")
    nodes = kube_core.list_node(label_selector=f"{POOL_LABEL}=train").items
    ours = {node.metadata.name: node for node in nodes if node.metadata.name in names}
    assert sorted(ours) == sorted(names)
    for node in ours.values():
        assert node.status.allocatable[GPU] == "8"
        assert node.status.capacity[GPU] == "8"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]


def test_pinned_pods_run_then_end_as_their_annotations_say(
    kube_core: CoreV1Api, kube_namespace: str, fake_gpu_nodes: NodeFactory
) -> None:
    [node] = fake_gpu_nodes(1)
    since = kube_core.list_namespaced_pod(kube_namespace).metadata.resource_version
    pods = {
        "fails": pinned_gpu_pod("fails", node, 4, finish_after="1s", exit_code=3),
        "oom": pinned_gpu_pod("oom", node, 2, finish_after="1s", exit_code=137, reason="OOMKilled"),
        "succeeds": pinned_gpu_pod("succeeds", node, 1, finish_after="1s"),
        "runs": pinned_gpu_pod("runs", node, 1),
    }
    for pod in pods.values():
        kube_core.create_namespaced_pod(kube_namespace, pod)
    ended = {
        name: watch_pod(kube_core, kube_namespace, name, since, _ended)
        for name in ("fails", "oom", "succeeds")
    }
    expected = {
        "fails": ("Failed", 3, "Error"),
        "oom": ("Failed", 137, "OOMKilled"),
        "succeeds": ("Succeeded", 0, "Completed"),
    }
    for name, (phase, code, reason) in expected.items():
        assert _phases(ended[name]) == ["Pending", "Running", phase], name
        pod = kube_core.read_namespaced_pod(name, kube_namespace)
        state = terminated_state(pod)
        assert state is not None, name
        assert (pod.status.phase, state.exit_code, state.reason) == (phase, code, reason)
        assert state.started_at <= state.finished_at

    # without the annotation a pod runs until deleted
    time.sleep(1.5)
    running = kube_core.read_namespaced_pod("runs", kube_namespace)
    assert running.status.phase == "Running"
    assert running.status.container_statuses[0].state.running is not None


@pytest.mark.parametrize(
    ("ignore_sigterm", "grace_s", "exit_code"), [(False, 30, 143), (True, 2, 137)]
)
def test_a_deleted_running_pod_ends_then_is_gone(
    kube_core: CoreV1Api,
    kube_namespace: str,
    fake_gpu_nodes: NodeFactory,
    ignore_sigterm: bool,
    grace_s: int,
    exit_code: int,
) -> None:
    [node] = fake_gpu_nodes(1)
    since = kube_core.list_namespaced_pod(kube_namespace).metadata.resource_version
    pod = pinned_gpu_pod("doomed", node, 8, ignore_sigterm=ignore_sigterm)
    kube_core.create_namespaced_pod(kube_namespace, pod)
    events = watch_pod(
        kube_core, kube_namespace, "doomed", since, lambda _, p: p.status.phase == "Running"
    )
    since = events[-1][1].metadata.resource_version

    deleted_at = time.monotonic()
    kube_core.delete_namespaced_pod("doomed", kube_namespace, grace_period_seconds=grace_s)
    events = watch_pod(kube_core, kube_namespace, "doomed", since, _gone)
    took_s = time.monotonic() - deleted_at
    last_state = events[-1][1]
    state = terminated_state(last_state)
    assert state is not None
    assert (last_state.status.phase, state.exit_code) == ("Failed", exit_code)
    if ignore_sigterm:  # killed when its grace period is over, not before
        assert took_s >= grace_s - 0.5
    else:  # ends at once on SIGTERM, not at the end of its 30 s of grace
        assert took_s < 10
    assert kube_core.list_namespaced_pod(kube_namespace).items == []
