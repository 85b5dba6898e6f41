"""The cluster agent over Slurm: the generic loop, plus what only a shared cluster has.

:class:`SlurmAgent` is :class:`~services.agents.agent.ClusterAgent` driving a
:class:`~services.agents.slurm.adapter.SlurmAdapter`, with four things more, each read from the
adapter's latest listing of Slurm:

* **Drains decided in Slurm.** A node Slurm drains (an admin's ``scontrol update
  state=drain``, a health check, ``fail``) is cordoned in Fairshare (``NodeCordoned`` by
  ``slurm``, with Slurm's reason), so the scheduler places nothing there and drains its work
  as contracts end; when Slurm resumes it, the agent lifts its own cordon (never one an admin
  of Fairshare set). One Slurm drain is one cordon: the event id derives from the drain's reason
  and time, so a Fairshare admin who uncordons the node is not overruled by the same drain.
* **Drains decided in Fairshare** (opt-in, the adapter's ``drain_in_slurm``): a node cordoned
  in Fairshare is drained in Slurm (reason ``fairshare: ...``) so that nothing submitted
  around Fairshare starts there either, and resumed when Fairshare uncordons it.
* **Jobs submitted around Fairshare.** GPUs that Slurm gave to jobs the agent did not submit
  are reported in liveness signals and heartbeats with the occupant ``slurm:foreign``, and a
  placement that would need them waits (it is not submitted to pend in Slurm while Fairshare
  counts it running).
* **Stray jobs.** A job of this cluster whose run the log no longer has active (lost and
  placed again elsewhere while the agent was away, cancelled, failed to publish) is cancelled
  after ``stray_grace_s``, so a run never holds GPUs twice.
* **Native work** (the adapter's ``native``): unchanged ``sbatch`` jobs on Fairshare's
  partitions, held by the job_submit plugin, are submitted, pinned and released, requeued and
  held, and cancelled as Fairshare work (``services.agents.native_door`` with
  :mod:`~services.agents.slurm.native_door`); the bindings file the plugin reads is kept
  current.

Down nodes are the adapter's ``reachable``: no liveness signals nor heartbeats, and the
scheduler declares them down (its liveness rule decides down and up from those alone: a
``NodeDown`` from the agent would be undone by the next signal).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import cast

from events.types import TEXT_PATTERN
from projections.cluster_types import WorkloadState
from services.agents.agent import AgentSettings
from services.agents.native_door import NativeDoor
from services.agents.shared_cluster import SharedClusterAgent
from services.agents.slurm.adapter import SlurmAdapter
from services.agents.slurm.commands import NativeControl
from services.agents.slurm.native import SlurmOrigin
from services.agents.slurm.native_door import SlurmNative, bindings_text, write_bindings
from services.agents.slurm.parse import FAIRSHARE_REASON_PREFIX, SlurmNode
from services.bus.port import EventPublisher

log = logging.getLogger(__name__)

#: Who cordons a node that Slurm drained, and lifts that cordon.
SLURM_ACTOR = "slurm"
#: The occupant of a GPU held by a job submitted around Fairshare, in heartbeats.
FOREIGN_OCCUPANT = "slurm:foreign"


def _short_text(text: str, limit: int = 500) -> str:
    """Slurm's free text as a Fairshare ``ShortText``: no control characters, bounded."""
    cleaned = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", text)[:limit]
    return cleaned if re.match(TEXT_PATTERN, cleaned) else ""


class SlurmAgent(SharedClusterAgent):
    """The agent of one Slurm cluster (see the module's docstring for what it adds)."""

    adapter: SlurmAdapter
    actor = SLURM_ACTOR
    foreign_occupant = FOREIGN_OCCUPANT

    def __init__(
        self,
        adapter: SlurmAdapter,
        publisher: EventPublisher,
        settings: AgentSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(adapter, publisher, settings, clock=clock)
        #: Nodes resumed in Slurm, with the listing time it was done at (once per listing).
        self._resumed: dict[str, float] = {}
        options = adapter.native_options
        self.door: NativeDoor | None = None
        if options is not None:
            control = cast("NativeControl", adapter.slurm)
            family = SlurmNative(
                adapter, control, self.cluster, check_members=options.check_members
            )
            self.door = NativeDoor(self, family)
        #: The bindings file's text as last written.
        self._bindings_written: str | None = None

    # -- the loop --------------------------------------------------------------------------
    def step(self) -> None:
        """Nodes and strays against this round's listing of Slurm, then the generic round
        (which reads the same listing: it is read at most every ``refresh_s``)."""
        snapshot = self.adapter.refresh()
        if self.started and snapshot is not None:
            now = self.clock()
            for name in sorted(self.node_specs):
                found = snapshot.nodes.get(name)
                if found is not None and name in self.state.cluster.nodes:
                    self._sync_node(found, now)
            tracked = self.adapter.tracked_job_ids()
            self.sweep_strays(
                now,
                [
                    ((tag.workload_id, tag.attempt), job.job_id)
                    for tag, job in self.adapter.our_jobs()
                    if not job.ended and job.job_id not in tracked
                ],
                self.adapter.cancel_job,
            )
            self.state_foreign(now)
            if self.door is not None:
                self._write_bindings()
                self.door.step(now)
        super().step()

    def limit_kept_by_cluster(self, workload: WorkloadState) -> bool:
        """A native job's time limit is its ``--time``, which Slurm keeps (TIMEOUT ends the
        run)."""
        return SlurmOrigin.of(workload.spec) is not None

    def _write_bindings(self) -> None:
        options = self.adapter.native_options
        if options is None or options.bindings_file is None:
            return
        sizes = [spec.gpus for spec in self.node_specs.values()]
        text = bindings_text(
            cluster=self.cluster,
            partitions=options.partitions,
            node_sizes=sizes,
            agent_uids=options.agent_uids,
            bindings=self.state.bindings,
            tree=self.state.tree,
        )
        if text != self._bindings_written and write_bindings(options.bindings_file, text):
            self._bindings_written = text
            log.info("bindings file written", extra={"path": str(options.bindings_file)})

    def _sync_node(self, slurm: SlurmNode, now: float) -> None:
        name = slurm.name
        standing, cordoned = self.standing_cordon(name), self.cordoned(name)
        if not slurm.drained_by_fairshare:  # Fairshare's own drain is no decision of Slurm's
            reason = _short_text(f"drained in Slurm: {slurm.reason or slurm.state}")
            decision = (slurm.reason_time, slurm.reason)
            self.follow_cluster(name, slurm.drained, reason, decision, now)
        if self.adapter.drain_in_slurm:
            self._hand_to_slurm(slurm, standing, cordoned)

    def _hand_to_slurm(
        self, slurm: SlurmNode, standing: tuple[str, str, str] | None, cordoned: bool
    ) -> None:
        name = slurm.name
        if standing is not None and standing[1] != SLURM_ACTOR:
            event_id, by, why = standing
            if slurm.drained or slurm.unreachable or event_id in self.handed:
                return
            reason = f"{FAIRSHARE_REASON_PREFIX} cordoned by {by}" + (f": {why}" if why else "")
            if self.adapter.drain(name, _short_text(reason, 200).replace("\n", " ")):
                self.handed.add(event_id)
        elif not cordoned and slurm.drained_by_fairshare:
            taken = self.adapter.snapshot.taken_at if self.adapter.snapshot else 0.0
            if self._resumed.get(name) != taken:
                self._resumed[name] = taken
                self.adapter.resume(name)
