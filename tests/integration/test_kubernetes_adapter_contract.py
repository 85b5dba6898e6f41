"""The Kubernetes adapter honours the adapter contract (tests/agent_adapter_contract.py) over a
real API server with KWOK's fake GPU nodes (``bash .ci/start-kubernetes``): each case has nodes
selected by a label of its own and a namespace of its own for the runs' pods, and KWOK ends the
pods as their annotations say (``.ci/kwok/stages.yaml``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from services.agents.kubernetes import KubernetesAdapter
from services.agents.kubernetes.pods import PodOptions
from tests import agent_adapter_contract as contract
from tests.integration.kubernetes_fixtures import (
    EXIT_CODE,
    FINISH_AFTER,
    IGNORE_SIGTERM,
    POOL_LABEL,
    KubernetesCluster,
    NodeFactory,
    api_client,
    fake_gpu_nodes,
    kube_core,
    kube_namespace,
    kubernetes_cluster,
)

pytestmark = [pytest.mark.kubernetes]

# the fixtures this module uses, imported from kubernetes_fixtures (pytest finds them here)
__all__ = ["fake_gpu_nodes", "kube_core", "kube_namespace", "kubernetes_cluster"]


class RealKubernetes(contract.WallClock):
    """The API server of ``.ci/start-kubernetes``: fake nodes of this case, its namespace."""

    executor = "kubernetes"
    adopts: contract.Adopts = "found"
    timeout_s = 30.0
    poll_s = 0.2
    settle_s = 2.0
    grace_s = 3.0
    # a stopped pod ends with 143 (137 past the grace) and is removed: the run's end is the
    # code when the watch saw the pod end, or none when it saw it gone first
    term_exit = None
    kill_exit = None

    def __init__(self, kubernetes: KubernetesCluster, namespace: str, selector: str) -> None:
        self.kubernetes = kubernetes
        self.namespace = namespace
        self.selector = selector
        self.cluster = f"contract-{uuid.uuid4().hex[:8]}"

    def adapter(self) -> KubernetesAdapter:
        return KubernetesAdapter(
            api_client(self.kubernetes.kubeconfig),
            PodOptions(self.cluster, self.namespace),
            node_selector=f"{POOL_LABEL}={self.selector}",
            pending_timeout_s=60.0,
        )

    def spec(
        self, *, seconds: float | None = None, exit_code: int = 0, ignores_sigterm: bool = False
    ) -> dict[str, object]:
        annotations = {EXIT_CODE: str(exit_code)}
        if seconds is not None:
            annotations[FINISH_AFTER] = f"{seconds:g}s"
        if ignores_sigterm:
            annotations[IGNORE_SIGTERM] = "true"
        return {"annotations": annotations}

    def unrunnable(self) -> dict[str, object] | None:
        return {"image": "no spaces in an image name"}


@pytest.fixture
def real_kubernetes(
    kubernetes_cluster: KubernetesCluster, kube_namespace: str, fake_gpu_nodes: NodeFactory
) -> RealKubernetes:
    selector = f"contract-{uuid.uuid4().hex[:8]}"
    fake_gpu_nodes(1, gpus=4, pool=selector)
    return RealKubernetes(kubernetes_cluster, kube_namespace, selector)


@pytest.mark.parametrize("case", contract.CASES, ids=lambda c: c.__name__)
def test_the_kubernetes_adapter_honours_the_contract(
    case: Callable[[contract.Cluster], None], real_kubernetes: RealKubernetes
) -> None:
    case(real_kubernetes)
