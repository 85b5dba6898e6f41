"""The cluster agent over Kubernetes: the generic loop, plus what a shared cluster has
(:mod:`services.agents.shared_cluster`), read from the adapter's watches.

* **Nodes out of service in Kubernetes**: unschedulable (``kubectl cordon``), tainted against
  the runs' pods (NoSchedule, NoExecute), or with fewer allocatable GPUs than registered (a
  node's capacity is part of its registration, so a shrunk node is taken out of service until
  it has them again) are cordoned in Fairshare by ``kubernetes``, and uncordoned when that
  ends. A node that is not Ready goes silent (no signals of life): the scheduler declares it
  down. A node newly selected is registered.
* **Fairshare's cordons in Kubernetes** (opt-in, the adapter's ``cordon_in_kubernetes``): a
  node cordoned in Fairshare is made unschedulable, annotated as Fairshare's doing, so nothing
  submitted around Fairshare starts there either; uncordoned when Fairshare uncordons it.
* **Pods around Fairshare** holding GPUs (of other schedulers, or bound by hand) are stated
  per node when they change (``NodeForeignGpus``: how many GPUs, ``namespace/pod`` and its
  scheduler), so the scheduler places around them; in readings they are
  ``kubernetes:foreign``, and a placement needing them anyway waits. Under the ``tolerate``
  policy (the default) that is all; under ``evict`` (the adapter's ``foreign_gpu_policy``)
  such a pod is deleted once it has held GPUs on a node of this agent for
  ``foreign_grace_s``, with a log line (no Kubernetes Event), which needs the optional rule of
  ``deploy/kubernetes/agent.yaml``.
* **Strays**: this cluster's pods whose run the log no longer has active (finished and
  reported, lost, cancelled) are deleted after ``stray_grace_s``.
* **Native work**: Jobs and pods its users applied unchanged but for
  ``schedulerName: fairshare`` are submitted, bound, preempted and cancelled as Fairshare
  work (:mod:`~services.agents.kubernetes.native_door`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from events.envelope import derived_event_id
from events.models import ForeignHolder, NodeRegistered
from projections.cluster_types import WorkloadState
from services.agents.adapter import NodeSpec
from services.agents.agent import AgentSettings
from services.agents.kubernetes.adapter import KubernetesAdapter
from services.agents.kubernetes.native import Origin
from services.agents.kubernetes.native_door import KubernetesNative
from services.agents.kubernetes.pods import NodeView, holders_of
from services.agents.native_door import NativeDoor
from services.agents.shared_cluster import SharedClusterAgent
from services.bus.port import EventPublisher

log = logging.getLogger(__name__)

KUBERNETES_ACTOR = "kubernetes"
FOREIGN_OCCUPANT = "kubernetes:foreign"


class KubernetesAgent(SharedClusterAgent):
    """The agent of one Kubernetes cluster (see the module's docstring)."""

    adapter: KubernetesAdapter
    actor = KUBERNETES_ACTOR
    foreign_occupant = FOREIGN_OCCUPANT

    def __init__(
        self,
        adapter: KubernetesAdapter,
        publisher: EventPublisher,
        settings: AgentSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(adapter, publisher, settings, clock=clock)
        #: Foreign GPU pods by (namespace, name), with when this agent first saw them (the
        #: ``evict`` policy's grace), and how many it deleted.
        self._foreign_seen: dict[tuple[str, str], float] = {}
        self.evicted_foreign = 0
        #: Native work: the cluster's users' own Jobs and pods (``native_door``).
        self.door = NativeDoor(self, KubernetesNative(adapter, self.cluster))

    def step(self) -> None:
        if self.started and self.adapter.healthy():
            now = self.clock()
            views = self.adapter.node_views()
            self._register_new(views, now)
            for name in sorted(self.node_specs):
                view = views.get(name)
                if view is not None and name in self.state.cluster.nodes:
                    self._sync_node(view, now)
            self.sweep_strays(
                now,
                [
                    (tag, pod.name)
                    for tag, pod in self.adapter.our_pods()
                    if not self.adapter.tracked(*tag)
                ],
                self._delete_pod,
            )
            self.state_foreign(now)
            if self.adapter.foreign_gpu_policy == "evict":
                self.evict_foreign(now)
            if self.adapter.scheduler_name:
                self.door.step(now)
        super().step()

    def limit_kept_by_cluster(self, workload: WorkloadState) -> bool:
        """A native Job's time limit is its ``activeDeadlineSeconds``, which its Job controller
        keeps (failing it ``DeadlineExceeded``, which ends the run): stopped here too, the Job
        would be suspended and left so."""
        origin = Origin.of(workload.spec)
        return origin is not None and origin.kind == "Job"

    def foreign_holdings(self) -> dict[str, tuple[int, tuple[ForeignHolder, ...]]]:
        """One pass over the pods for every node (not one per node)."""
        found = {}
        for name, pods in self.adapter.foreign_pods_by_node().items():
            if name in self.node_specs:
                found[name] = (sum(p.gpus for p in pods), holders_of(pods))
        return found

    def evict_foreign(self, now: float) -> None:
        """The ``evict`` policy: delete each pod of another scheduler holding GPUs on a node of
        this agent once it has held them for ``foreign_grace_s`` (counted from when this
        agent first saw it there; a restart counts afresh, so never early)."""
        seen: dict[tuple[str, str], float] = {}
        by_node = self.adapter.foreign_pods_by_node()
        for name in sorted(set(by_node) & set(self.node_specs)):
            for pod in by_node[name]:
                key = (pod.namespace, pod.name)
                first = self._foreign_seen.get(key, now)
                seen[key] = first
                if pod.deleting or now - first < self.adapter.foreign_grace_s:
                    continue
                log.warning(
                    "evicting a pod Fairshare did not place: it holds GPUs on a Fairshare node "
                    "past the grace (--foreign-gpu-policy evict)",
                    extra={
                        "pod": f"{pod.namespace}/{pod.name}",
                        "node": name,
                        "gpus": pod.gpus,
                        "scheduler": pod.scheduler,
                        "held_s": round(now - first, 1),
                    },
                )
                if self.adapter.evict_foreign_pod(pod.namespace, pod.name):
                    self.evicted_foreign += 1
        self._foreign_seen = seen

    def _delete_pod(self, name: str) -> bool:
        self.adapter.delete_pod(name)
        return True

    def _register_new(self, views: dict[str, NodeView], now: float) -> None:
        """Nodes selected since the agent started (or since a node was first seen with GPUs)."""
        for view in sorted(views.values(), key=lambda v: v.name):
            if view.name in self.node_specs or view.gpus < 1:
                continue
            spec = NodeSpec(
                view.name, view.gpus, view.gpu_type, executor="kubernetes", block=view.block,
                rack=view.rack,
            )  # fmt: skip
            self.node_specs[view.name] = spec
            data = NodeRegistered(
                node=view.name,
                cluster=self.cluster,
                pool=self.pool,
                gpus=view.gpus,
                gpu_type=view.gpu_type,
                executor="kubernetes",
                block=view.block,
                rack=view.rack,
            )
            where = (view.block, view.rack) if view.block or view.rack else ()
            event_id = derived_event_id(
                "agent", "registered", self.cluster, view.name, self.pool, str(view.gpus),
                view.gpu_type, *where,
            )  # fmt: skip
            self._publish("registered", data, now, event_id)

    def _sync_node(self, view: NodeView, now: float) -> None:
        name = view.name
        registered = self.node_specs[name].gpus
        reasons = []
        if view.unschedulable and not view.cordoned_by_fairshare:
            reasons.append("unschedulable in Kubernetes")
        if view.taints:
            reasons.append("tainted in Kubernetes: " + ", ".join(view.taints))
        if view.gpus < registered:
            reasons.append(f"{view.gpus} of its {registered} GPUs allocatable in Kubernetes")
        reason = "; ".join(reasons)[:500]
        standing, cordoned = self.standing_cordon(name), self.cordoned(name)
        self.follow_cluster(name, bool(reasons), reason, (reason,), now)
        if self.adapter.cordon_in_kubernetes:
            self._hand_to_kubernetes(view, standing, cordoned)

    def _hand_to_kubernetes(
        self, view: NodeView, standing: tuple[str, str, str] | None, cordoned: bool
    ) -> None:
        if standing is not None and standing[1] != KUBERNETES_ACTOR:
            event_id, by, why = standing
            if view.unschedulable or event_id in self.handed:
                return
            reason = f"cordoned in Fairshare by {by}" + (f": {why}" if why else "")
            if self.adapter.set_unschedulable(view.name, True, reason[:200]):
                self.handed.add(event_id)
        elif not cordoned and view.cordoned_by_fairshare:
            self.adapter.set_unschedulable(view.name, False)
