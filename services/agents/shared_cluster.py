"""What an agent over a cluster that others use too (Slurm, Kubernetes) adds to the generic
loop, whatever the cluster: the rules are one, the cluster's words for them differ.

* **Cordons both ways.** A node the cluster takes out of service (drained in Slurm,
  unschedulable or tainted in Kubernetes) is cordoned in Fairshare by the cluster's actor
  (``slurm``, ``kubernetes``) with the cluster's reason, once per such decision (the event id
  derives from it, so a Fairshare admin who uncordons the node is not overruled by the same
  drain); when the cluster puts it back, the agent lifts its own cordon, never one a Fairshare
  admin set. The other way (opt-in) is the subclass's: it hands Fairshare's cordons to the
  cluster.
* **GPUs held around Fairshare.** GPUs the cluster gave to work the agent did not start are
  stated per node when that changes (``NodeForeignGpus``: how many, and what holds them), so
  the scheduler places around them; they are reported in liveness signals and heartbeats
  with the cluster's foreign occupant (``slurm:foreign``, ``kubernetes:foreign``), and a
  placement that needs them anyway (decided before the fact was read) waits.
* **Strays.** Work of this Fairshare cluster whose run the log no longer has active (lost and
  placed again elsewhere while the agent was away, cancelled, failed to publish, or simply
  over and reported) is removed after ``stray_grace_s``, so a run never holds GPUs twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

from events.envelope import Envelope, derived_event_id
from events.models import (
    EventData,
    ForeignHolder,
    GpuReading,
    NodeCordoned,
    NodeForeignGpus,
    NodeUncordoned,
)
from events.models.cluster import MAX_FOREIGN_HOLDERS
from projections.cluster_types import ACTIVE, WorkloadState
from services.agents.adapter import ClusterAdapter
from services.agents.agent import AgentSettings, ClusterAgent
from services.bus.port import EventPublisher

log = logging.getLogger(__name__)


class SharedClusterAdapter(Protocol):
    def foreign_gpus(self, node: str) -> int:
        """GPUs of ``node`` held by work this agent did not start."""

    def foreign_holders(self, node: str) -> tuple[ForeignHolder, ...]:
        """What holds them, as the cluster names it (at most ``MAX_FOREIGN_HOLDERS``)."""


class SharedClusterAgent(ClusterAgent):
    """A :class:`ClusterAgent` over a cluster shared with work submitted around Fairshare."""

    #: Who cordons a node the cluster took out of service, and lifts that cordon.
    actor: ClassVar[str]
    #: The occupant of a GPU held around Fairshare, in heartbeats.
    foreign_occupant: ClassVar[str]

    def __init__(
        self,
        adapter: ClusterAdapter,
        publisher: EventPublisher,
        settings: AgentSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(adapter, publisher, settings, clock=clock)
        self.stray_grace_s = settings.stray_grace_s
        #: The standing Fairshare cordon of each node: (event id, by whom, reason).
        self.cordons: dict[str, tuple[str, str, str]] = {}
        #: Fairshare's cordon events already handed to the cluster (the subclass's opt-in).
        self.handed: set[str] = set()
        #: Strays by their cluster id, with when they were first seen stray.
        self._strays: dict[str, float] = {}
        self.cancelled_strays = 0

    def foreign_gpus(self, node: str) -> int:
        adapter: SharedClusterAdapter = self.adapter  # type: ignore[assignment]
        return adapter.foreign_gpus(node)

    def foreign_holders(self, node: str) -> tuple[ForeignHolder, ...]:
        adapter: SharedClusterAdapter = self.adapter  # type: ignore[assignment]
        return adapter.foreign_holders(node)[:MAX_FOREIGN_HOLDERS]

    def foreign_holdings(self) -> dict[str, tuple[int, tuple[ForeignHolder, ...]]]:
        """Per node of this agent, the GPUs foreign work holds and what holds them (a family
        may find them all in one pass over its cluster's listing)."""
        return {
            name: (count, self.foreign_holders(name) if count else ())
            for name in self.node_specs
            if (count := self.foreign_gpus(name))
        }

    def state_foreign(self, now: float) -> None:
        """State ``NodeForeignGpus`` for each of its nodes whose foreign holding (how many
        GPUs, what holds them) differs from what the log has: on a change, not every round.
        The id derives from the node's count of such changes and the holding stated, so a
        fact in flight is not stated twice, and a holding that comes back is a new fact."""
        holdings = self.foreign_holdings()
        for name in sorted(self.node_specs):
            node = self.state.cluster.nodes.get(name)
            if node is None:
                continue
            count, holders = holdings.get(name, (0, ()))
            count = min(count, node.gpus)
            holders = holders[:MAX_FOREIGN_HOLDERS] if count else ()
            if (count, holders) == (node.foreign, node.foreign_holders):
                continue
            event_id = derived_event_id(
                "agent", "foreign-gpus", self.cluster, name, str(node.foreign_changes),
                str(count), *(f"{h.name}={h.gpus}" for h in holders),
            )  # fmt: skip
            if event_id in self.in_flight or event_id in self.state.event_ids:
                continue
            data = NodeForeignGpus(node=name, cluster=self.cluster, gpus=count, holders=holders)
            self._publish("foreign-gpus", data, now, event_id)

    # -- reading the log -------------------------------------------------------------------
    def observe(self, envelope: Envelope[Any]) -> None:
        fresh = envelope.id not in self.state.event_ids
        super().observe(envelope)
        data = envelope.data
        if not fresh:
            return
        if isinstance(data, NodeCordoned):
            self.cordons[data.node] = (envelope.id, data.cordoned_by, data.reason)
        elif isinstance(data, NodeUncordoned):
            self.cordons.pop(data.node, None)

    # -- cordons decided by the cluster ----------------------------------------------------
    def standing_cordon(self, node: str) -> tuple[str, str, str] | None:
        """The Fairshare cordon the node has now (None when it has none)."""
        known = self.state.cluster.nodes.get(node)
        return self.cordons.get(node) if known is not None and known.cordoned else None

    def cordoned(self, node: str) -> bool:
        """Whether Fairshare has ``node`` cordoned now (by anyone)."""
        known = self.state.cluster.nodes.get(node)
        return known is not None and known.cordoned

    def follow_cluster(
        self, node: str, out: bool, reason: str, decision: tuple[str, ...], now: float
    ) -> None:
        """The cluster has ``node`` out of service (``out``, for ``reason``; ``decision``
        names that decision: one decision is one cordon) or back in it."""
        known = self.state.cluster.nodes.get(node)
        if known is None:
            return
        standing = self.standing_cordon(node)
        if out and not known.cordoned:
            event_id = derived_event_id("agent", f"{self.actor}-drain", node, *decision)
            self.publish_node(
                NodeCordoned(node=node, cordoned_by=self.actor, reason=reason), now, event_id
            )
        elif not out and standing is not None and standing[1] == self.actor:
            event_id = derived_event_id("agent", f"{self.actor}-resume", node, standing[0])
            self.publish_node(NodeUncordoned(node=node, uncordoned_by=self.actor), now, event_id)

    def publish_node(self, data: EventData, now: float, event_id: str) -> None:
        if event_id in self.in_flight or event_id in self.state.event_ids:
            return
        kind = "cordoned" if isinstance(data, NodeCordoned) else "uncordoned"
        self._publish(kind, data, now, event_id)

    # -- strays ----------------------------------------------------------------------------
    def sweep_strays(
        self,
        now: float,
        found: Iterable[tuple[tuple[str, int], str]],
        remove: Callable[[str], bool],
    ) -> None:
        """Remove (``remove(id)``) each piece of work ``found`` ((workload, attempt), its
        cluster id) whose run the log does not have active, once stray for the grace."""
        seen: dict[str, float] = {}
        for (workload_id, attempt), ident in found:
            workload = self.state.cluster.workloads.get(workload_id)
            if workload is not None and workload.attempt == attempt and workload.status in ACTIVE:
                continue
            first = self._strays.get(ident, now)
            seen[ident] = first
            if now - first < self.stray_grace_s:
                continue
            log.warning(
                "removing work whose run the log no longer has active",
                extra={
                    "workload_id": workload_id,
                    "attempt": attempt,
                    "id": ident,
                    "status": None if workload is None else workload.status,
                },
            )
            if remove(ident):
                self.cancelled_strays += 1
            seen[ident] = now  # again after another grace if it is still there
        self._strays = seen

    # -- GPUs held around Fairshare --------------------------------------------------------
    def _gpus_busy(self, workload: WorkloadState) -> bool:
        if super()._gpus_busy(workload):
            return True
        for node_name, _gpus in workload.placement:
            foreign = self.foreign_gpus(node_name)
            node = self.state.cluster.nodes[node_name]
            if foreign and foreign + len(node.assigned) > node.gpus:
                self._warn_once(
                    f"foreign:{workload.workload_id}:{workload.attempt}:{node_name}",
                    f"GPUs held in {self.actor} by work Fairshare did not start; the run waits",
                    workload_id=workload.workload_id,
                    node=node_name,
                    foreign_gpus=foreign,
                )
                return True
        return False

    def _readings(
        self, name: str, occupants: dict[tuple[str, int], tuple[str, int]]
    ) -> tuple[GpuReading, ...]:
        """The readings with the GPUs that foreign work holds named by the foreign occupant
        (in the liveness signal and the heartbeat alike): the cluster does not say which
        indices those are, so the highest ones Fairshare has not assigned (Fairshare's indices
        are its own bookkeeping; the cluster picks the devices)."""
        readings = super()._readings(name, occupants)
        count = self.foreign_gpus(name)
        if not count:
            return readings
        node = self.state.cluster.nodes.get(name)
        assigned = set(node.assigned) if node is not None else set()
        free = [g.index for g in readings if g.occupant is None and g.index not in assigned]
        marked = set(sorted(free, reverse=True)[:count])
        return tuple(
            g.model_copy(update={"occupant": self.foreign_occupant}) if g.index in marked else g
            for g in readings
        )
