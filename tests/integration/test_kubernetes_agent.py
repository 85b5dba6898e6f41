"""Fairshare over a real Kubernetes API server with KWOK's simulated kubelets
(``bash .ci/start-kubernetes``): a workload submitted through the API runs as a pod on a
simulated GPU node, is preempted for an under-served budget (its pod deleted with the grace
period, the run requeued and placed again) and finishes with its exit code; a gang of four
pods spans four nodes, all or nothing; cordons pass both ways; GPUs held by pods Fairshare did
not create are waited for; a spec that cannot make a pod is refused at submit."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from events import TopicKind
from events.models import GpuHeartbeat, NodeAlive
from services.agents.kubernetes.agent import FOREIGN_OCCUPANT
from services.agents.serve import read_history
from tests.integration.cluster_stack import ADMIN, ANA, BO, wait_until
from tests.integration.kafka_bus import KafkaBus
from tests.integration.kubernetes_fixtures import (
    EXIT_CODE,
    FINISH_AFTER,
    KubernetesCluster,
    NodeFactory,
    fake_gpu_nodes,
    kube_core,
    kube_namespace,
    kubernetes_cluster,
    pinned_gpu_pod,
)
from tests.integration.kubernetes_stack import KubernetesStack, kubernetes_stack, view

pytestmark = [pytest.mark.broker, pytest.mark.kubernetes]

# the fixtures this module uses, imported from kubernetes_fixtures (pytest finds them here)
__all__ = ["fake_gpu_nodes", "kube_core", "kube_namespace", "kubernetes_cluster"]


def _kwok(finish_after: str, exit_code: int = 0) -> dict[str, Any]:
    """A spec whose pods KWOK ends after ``finish_after`` with ``exit_code``."""
    return {"annotations": {FINISH_AFTER: finish_after, EXIT_CODE: str(exit_code)}}


def _submit(stack: KubernetesStack, who: dict[str, str], **body: Any) -> None:
    body.setdefault("pools", [stack.pool])
    response = stack.api().post("/workloads", json=body, headers=who)
    assert response.status_code in (200, 201, 202), response.text


def _status(stack: KubernetesStack, workload_id: str) -> str | None:
    return stack.workload(workload_id).get("status")


@pytest.fixture
def stack(
    bus: KafkaBus,
    kubernetes_cluster: KubernetesCluster,
    kube_namespace: str,
    fake_gpu_nodes: NodeFactory,
) -> Any:
    with kubernetes_stack(bus, kubernetes_cluster, kube_namespace, fake_gpu_nodes) as running:
        running.seed_lab()
        yield running


def _running(stack: KubernetesStack) -> None:
    stack.start_scheduler()
    stack.start_api()
    wait_until(lambda: stack.api().get("/nodes", headers=ADMIN).json()["nodes"], "nodes")


def test_a_pod_is_preempted_for_an_underserved_budget_requeued_and_finishes(
    stack: KubernetesStack,
) -> None:
    nodes = stack.nodes(2)
    stack.start_agent()
    _running(stack)
    # lab/a takes both nodes with two one-node runs funded for 3 s; they end after 20 s
    for workload_id in ("wa1", "wa2"):
        _submit(
            stack, ANA, workload_id=workload_id, budget="lab/a", gpus=8, min_runtime_s=3,
            spec=_kwok("20s"),
        )  # fmt: skip
    for workload_id in ("wa1", "wa2"):
        wait_until(lambda w=workload_id: _status(stack, w) == "running", f"{workload_id} runs")
    pods = stack.pods()
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes), "one pod per node, bound"
    assert all(p.status.phase == "Running" for p in pods)
    gpus = {p.spec.containers[0].resources.limits["nvidia.com/gpu"] for p in pods}
    assert gpus == {"8"}
    assert all(p.spec.containers[0].resources.requests["nvidia.com/gpu"] == "8" for p in pods)

    # lab/b asks for a node and ends with exit code 3
    _submit(stack, BO, workload_id="wb", budget="lab/b", gpus=8, min_runtime_s=3,
            spec=_kwok("2s", exit_code=3))  # fmt: skip
    wait_until(lambda: _status(stack, "wb") == "failed", "wb to end with its exit code", 90)
    assert stack.workload("wb")["exit_code"] == 3
    attempts = {w: stack.workload(w)["attempt"] for w in ("wa1", "wa2")}
    [victim] = [w for w, attempt in attempts.items() if attempt == 2]
    wait_until(lambda: _status(stack, victim) == "succeeded", "the victim's second run", 120)
    assert stack.workload(victim)["exit_code"] == 0
    assert stack.agent is not None
    assert stack.agent.published["preempted"] == 1
    assert stack.agent.fenced_commands == 0


def test_a_gang_of_four_pods_spans_four_nodes_all_or_nothing(
    stack: KubernetesStack, kube_core: CoreV1Api
) -> None:
    nodes = stack.nodes(4)
    stack.start_agent()
    _running(stack)
    _submit(stack, ANA, workload_id="gang", budget="lab/a", gpus=32, gang="whole-nodes",
            min_runtime_s=60, spec=_kwok("3s"))  # fmt: skip
    wait_until(lambda: len(stack.pods_of("gang")) == 4, "four pods")
    pods = stack.pods_of("gang")
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    assert sorted(p.metadata.annotations["fairshare.dev/gang"] for p in pods) == [
        "0/4", "1/4", "2/4", "3/4",
    ]  # fmt: skip
    wait_until(lambda: _status(stack, "gang") == "succeeded", "the gang to finish", 60)

    # a quota of three pods: the fourth cannot be created, the three are deleted, the run fails
    _limit_pods(kube_core, stack.namespace, 3)
    _submit(stack, ANA, workload_id="capped", budget="lab/a", gpus=32, gang="whole-nodes",
            min_runtime_s=60, spec=_kwok("30s"))  # fmt: skip
    wait_until(lambda: stack.workload("capped").get("attempt", 0) >= 1, "the capped gang placed")
    # its run's end, stated by the agent (a placed gang is "pending" too until it starts: the
    # status alone cannot tell the end from the moment before the pods are made)
    wait_until(
        lambda: "could not be created" in (stack.workload("capped").get("end_message") or ""),
        "the capped gang's run to end as not created",
        60,
    )
    wait_until(
        lambda: (
            _status(stack, "capped") in ("failed", "pending", "requeued")
            and not [p for p in stack.pods_of("capped") if view(p).phase == "Running"]
        ),
        "the capped gang to fail with no pod left running",
        60,
    )
    wait_until(lambda: stack.pods_of("capped") == [], "the three pods created to be deleted")


def _limit_pods(core: CoreV1Api, namespace: str, pods: int) -> None:
    """A ResourceQuota of ``pods`` pods, its status set by hand (no controller manager)."""
    from kubernetes.client import V1ObjectMeta, V1ResourceQuota, V1ResourceQuotaSpec

    body = V1ResourceQuota(
        metadata=V1ObjectMeta(name="pods"), spec=V1ResourceQuotaSpec(hard={"pods": str(pods)})
    )
    core.create_namespaced_resource_quota(namespace, body)
    used = len(
        [p for p in core.list_namespaced_pod(namespace).items if p.status.phase not in
         ("Succeeded", "Failed")]
    )  # fmt: skip
    core.patch_namespaced_resource_quota_status(
        "pods", namespace, {"status": {"hard": {"pods": str(pods)}, "used": {"pods": str(used)}}}
    )


def test_cordons_pass_both_ways(stack: KubernetesStack, kube_core: CoreV1Api) -> None:
    [first, second] = stack.nodes(2)
    stack.start_agent(cordon_in_kubernetes=True)
    _running(stack)

    kube_core.patch_node(first, {"spec": {"unschedulable": True}})  # kubectl cordon
    wait_until(lambda: stack.node(first)["cordoned"], "Kubernetes' cordon in Fairshare")
    assert stack.node(first)["cordoned_by"] == "kubernetes"
    kube_core.patch_node(first, {"spec": {"unschedulable": False}})
    wait_until(lambda: not stack.node(first)["cordoned"], "Kubernetes' uncordon in Fairshare")

    response = stack.api().post(
        f"/nodes/{second}/cordon", json={"reason": "firmware"}, headers=ADMIN
    )
    assert response.status_code in (200, 202), response.text
    wait_until(lambda: bool(kube_core.read_node(second).spec.unschedulable), "cordon in k8s")
    assert "fairshare.dev/cordoned-by-fairshare" in kube_core.read_node(second).metadata.annotations
    assert stack.node(second)["cordoned_by"] == "admin", "not taken over by kubernetes"
    response = stack.api().post(f"/nodes/{second}/uncordon", headers=ADMIN)
    assert response.status_code in (200, 202), response.text
    wait_until(lambda: not kube_core.read_node(second).spec.unschedulable, "uncordon in k8s")


def test_gpus_held_by_a_foreign_pod_are_reported_and_waited_for(
    stack: KubernetesStack, kube_core: CoreV1Api, kube_namespace: str
) -> None:
    [node] = stack.nodes(1)
    foreign = pinned_gpu_pod("foreign", node, 8)  # no finish: runs until deleted
    kube_core.create_namespaced_pod(kube_namespace, foreign)
    stack.start_agent()
    _running(stack)
    _submit(stack, ANA, workload_id="w", budget="lab/a", gpus=8, min_runtime_s=60,
            spec=_kwok("2s"))  # fmt: skip
    wait_until(lambda: stack.workload("w").get("attempt", 0) >= 1, "w placed")

    def foreign_reported() -> bool:
        for envelope in read_history(
            stack.bus.broker.bootstrap, stack.bus.topics, (TopicKind.HEARTBEATS,)
        ):
            data = envelope.data
            if (
                isinstance(data, GpuHeartbeat | NodeAlive)
                and data.node == node
                and sum(g.occupant == FOREIGN_OCCUPANT for g in data.gpus) == 8
            ):
                return True
        return False

    wait_until(foreign_reported, "the foreign pod's GPUs in a heartbeat")
    # stated as a fact (NodeForeignGpus): the API's node view shows them and their holder
    wait_until(lambda: stack.node(node).get("foreign_gpus") == 8, "the foreign GPUs in /nodes")
    [holder] = stack.node(node)["foreign_holders"]
    assert (holder["name"], holder["gpus"]) == (f"{kube_namespace}/foreign", 8)
    assert stack.node(node)["free_gpus"] == 0
    assert stack.pods_of("w") == [], "no pod while the foreign pod holds the GPUs"
    assert _status(stack, "w") != "running"
    kube_core.delete_namespaced_pod("foreign", kube_namespace, grace_period_seconds=0)
    wait_until(lambda: stack.node(node).get("foreign_gpus") == 0, "the foreign GPUs gone")
    wait_until(lambda: _status(stack, "w") == "succeeded", "w to run once the GPUs are free", 60)
    names = [p.metadata.name for p in kube_core.list_namespaced_pod(kube_namespace).items]
    assert "foreign" not in names


def test_the_evict_policy_deletes_a_foreign_gpu_pod_after_the_grace(
    stack: KubernetesStack, kube_core: CoreV1Api, kube_namespace: str
) -> None:
    [node] = stack.nodes(1)
    kube_core.create_namespaced_pod(kube_namespace, pinned_gpu_pod("squatter", node, 4))
    agent = stack.start_agent(foreign_gpu_policy="evict", foreign_grace_s=3.0)
    _running(stack)

    def gone() -> bool:
        names = [p.metadata.name for p in kube_core.list_namespaced_pod(kube_namespace).items]
        return "squatter" not in names

    wait_until(gone, "the foreign pod evicted after the grace", 60)
    assert agent.evicted_foreign >= 1
    wait_until(lambda: stack.node(node).get("foreign_gpus") == 0, "no foreign GPUs left")


def test_a_spec_that_cannot_make_a_pod_is_refused_at_submit(stack: KubernetesStack) -> None:
    stack.nodes(1)
    stack.start_agent()
    _running(stack)
    for spec, word in (
        ({"cpu": "lots"}, "spec.cpu"),
        ({"env": {"FAIRSHARE_ATTEMPT": "9"}}, "spec.env.FAIRSHARE_ATTEMPT"),
        ({"command": 3}, "spec.command"),
    ):
        response = stack.api().post(
            "/workloads",
            json={"workload_id": "bad", "budget": "lab/a", "pools": [stack.pool], "gpus": 1,
                  "min_runtime_s": 60, "spec": spec},
            headers=ANA,
        )  # fmt: skip
        assert response.status_code == 422, response.text
        assert word in response.text, response.text


def test_a_node_that_loses_gpus_or_gains_a_taint_is_cordoned_and_a_new_node_registered(
    stack: KubernetesStack, kube_core: CoreV1Api
) -> None:
    [first, second] = stack.nodes(2)
    stack.start_agent()
    _running(stack)
    status = kube_core.read_node_status(first).status
    allocatable = {**status.allocatable, "nvidia.com/gpu": "4"}
    kube_core.patch_node_status(first, {"status": {"allocatable": allocatable}})
    wait_until(lambda: stack.node(first)["cordoned"], "a shrunk node cordoned")
    assert "4 of its 8 GPUs" in stack.node(first)["cordon_reason"], stack.node(first)
    kube_core.patch_node(
        second, {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}}
    )
    wait_until(lambda: stack.node(second)["cordoned"], "a tainted node cordoned")
    assert "maintenance:NoSchedule" in stack.node(second)["cordon_reason"]
    kube_core.patch_node(second, {"spec": {"taints": []}})
    wait_until(lambda: not stack.node(second)["cordoned"], "the taint lifted, the cordon too")
    [third] = stack.nodes(1)
    wait_until(
        lambda: (
            third in {n["node"] for n in stack.api().get("/nodes", headers=ADMIN).json()["nodes"]}
        ),
        "a node selected later registered",
    )
