"""The running system around the Kubernetes agent under test: scheduler, agent and API over
the session's Kafka (``cluster_stack``), the agent over the real API server and KWOK
(``bash .ci/start-kubernetes``). Each test has its own Fairshare cluster, fake nodes selected
by a label of its own, and a namespace of its own for the runs' pods."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client import CoreV1Api

from services.agents.agent import AgentSettings
from services.agents.kubernetes import KubernetesAdapter, KubernetesAgent
from services.agents.kubernetes.pods import PodOptions, PodView, run_selector
from tests.integration.cluster_stack import ClusterStack, wait_until
from tests.integration.kafka_bus import KafkaBus
from tests.integration.kubernetes_fixtures import (
    POOL_LABEL,
    KubernetesCluster,
    NodeFactory,
    api_client,
)


class KubernetesStack(ClusterStack):
    def __init__(
        self,
        bus: KafkaBus,
        cluster: KubernetesCluster,
        namespace: str,
        nodes: NodeFactory,
    ) -> None:
        super().__init__(bus, f"k8s-{uuid.uuid4().hex[:8]}")
        self.kubernetes = cluster
        self.core: CoreV1Api = cluster.core()
        self.namespace = namespace
        self._make_nodes = nodes
        #: The label value that selects this test's nodes.
        self.selector_value = self.cluster
        self.agent: KubernetesAgent | None = None

    def nodes(self, count: int, gpus: int = 8) -> list[str]:
        """Fake GPU nodes this test's agent selects (made before the agent starts, or
        registered by it when they appear)."""
        return self._make_nodes(count, gpus=gpus, pool=self.selector_value)

    def adapter(self, **options: Any) -> KubernetesAdapter:
        return KubernetesAdapter(
            api_client(self.kubernetes.kubeconfig),
            PodOptions(self.cluster, self.namespace),
            node_selector=f"{POOL_LABEL}={self.selector_value}",
            pending_timeout_s=60.0,
            **options,
        )

    def start_agent(self, **options: Any) -> KubernetesAgent:
        settings = AgentSettings(self.cluster, self.pool, heartbeat_s=1.0, stray_grace_s=2.0)
        agent = KubernetesAgent(self.adapter(**options), self.bus.publisher(), settings)
        self.agent = agent
        self.run_agent(agent)
        return agent

    def agent_died_of(self, kind: type[BaseException]) -> None:
        """The agent's loop died of ``kind`` (a test's stand-in for kill -9): forget it, so a
        new incarnation can start."""
        thread = self._agent_thread
        assert thread is not None
        wait_until(lambda: not thread.alive, "the agent to die", 30)
        assert len(thread.errors) == 1, thread.errors
        assert isinstance(thread.errors[0], kind), thread.errors
        self._agent_thread = None

    def pods(self) -> list[Any]:
        """This cluster's run pods in Kubernetes now (read from the API, not the agent)."""
        return list(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=run_selector(self.cluster)
            ).items
        )

    def pods_of(self, workload_id: str) -> list[Any]:
        return [
            pod
            for pod in self.pods()
            if (pod.metadata.annotations or {}).get("fairshare.dev/workload-id") == workload_id
        ]


def view(pod: Any) -> PodView:
    from services.agents.kubernetes.adapter import _pod_view

    return _pod_view(pod, "nvidia.com/gpu")


@contextmanager
def kubernetes_stack(
    bus: KafkaBus, cluster: KubernetesCluster, namespace: str, nodes: NodeFactory
) -> Iterator[KubernetesStack]:
    stack = KubernetesStack(bus, cluster, namespace, nodes)
    try:
        yield stack
    finally:
        stack.close()
