"""The door of native work: what the Kubernetes agent does, each round, for its cluster's
users' own Jobs and pods (``native.py`` reads them; ``native_runs.py`` binds and stops them).

* **Submit.** A native workload the log does not have yet is checked (its labels, its shape
  against the pool's nodes, its budget by ``projections.bindings.namespace_budget``) and, if
  it passes, stated as a ``WorkloadSubmitted`` signed by this agent (the trust rule lets an
  agent state only its own cluster's native work): one queue and one fair share with what
  ``fairshare submit`` sends. Refused work gets a Warning Event saying why and is never bound;
  it is looked at again every round, so binding its namespace later lets it in.
* **Cancel.** A native workload whose Job (or pod, or every pod of its gang) its user deleted
  is cancelled (``WorkloadCancelled``): the scheduler stops what runs and charging ends there.
  A lone pod or gang preempted and requeued is cancelled too: no controller makes it again.
* **Resume.** A Job Fairshare suspended to preempt it is resumed once its workload is queued
  again: its controller makes new pods, which wait unbound for the next placement.
* **Tell.** An Event on the Job (or pod) for each decision (queued, placed, preempted, with
  the decision's reason), and on a pending one the one-sentence why-pending, the queue
  position and the start estimate as annotations (``kubectl describe job``; a
  ``kubectl get`` column), computed by the same functions as the API's answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from events.envelope import derived_event_id
from events.models import EventData, PlaceCommand, PreemptCommand, WorkloadCancelled
from events.native_work import native_cluster
from events.times import DEFAULT_WINDOW_S, utc_iso
from projections.bindings import namespace_budget
from projections.cluster_types import WorkloadState
from projections.live_state import LiveState
from services.agents.kubernetes.adapter import KubernetesAdapter
from services.agents.kubernetes.native import (
    ESTIMATE_ANNOTATION,
    POSITION_ANNOTATION,
    SUSPENDED_ANNOTATION,
    WHY_ANNOTATION,
    WORKLOAD_ID_ANNOTATION,
    NativeWorkload,
    Origin,
    native_workload_id,
    native_workloads,
    shape_problem,
    submission,
)
from services.agents.kubernetes.notices import ObjectRef
from services.api.estimates import start_estimates
from services.api.models import PendingInPool
from services.api.waiting import why_view


class DoorHost(Protocol):
    """What the door needs of its agent (the Kubernetes agent)."""

    adapter: KubernetesAdapter
    state: LiveState
    cluster: str
    pool: str
    in_flight: set[str]

    def publish_fact(self, kind: str, data: EventData, at: float, event_id: str) -> bool: ...


log = logging.getLogger(__name__)

#: Seconds between two refreshes of the pending work's why-pending annotations.
ANNOTATE_S = 10.0


@dataclass(frozen=True)
class Refused:
    workload_id: str
    reason: str


class NativeDoor:
    """Native work of one Kubernetes agent (see the module's docstring)."""

    def __init__(self, agent: DoorHost) -> None:
        self.agent = agent
        #: What was last told per workload: (status, attempt) of its last Event.
        self._told: dict[str, tuple[str, int]] = {}
        #: The why-pending annotations last written per workload.
        self._annotated: dict[str, tuple[str, str, str]] = {}
        #: The (status, attempt) each workload's annotations were last computed at.
        self._annotated_phase: dict[str, tuple[str, int]] = {}
        #: The Pending Event last said per workload (attempt and the reason that decides).
        self._pending_said: dict[str, str] = {}
        self._next_annotation = 0.0
        #: Refusals said (workload id -> reason), so each is said once while it stands.
        self.refused: dict[str, str] = {}
        self.submitted = 0
        self.cancelled = 0

    @property
    def scheduler(self) -> str:
        return self.agent.adapter.scheduler_name

    def step(self, now: float) -> None:
        if not self.scheduler:
            return
        adapter = self.agent.adapter
        jobs, pods = adapter.job_views(), adapter.pod_views()
        seen = native_workloads(jobs, pods, self.scheduler, adapter.options.gpu_resource)
        self._submit(seen, now)
        mine = self._mine()
        self._cancel_gone(mine, now)
        self._resume(mine)
        self._tell(mine)
        full = now >= self._next_annotation
        if full:
            self._next_annotation = now + ANNOTATE_S
        self._annotate(mine, now, full)

    # -- submitting ------------------------------------------------------------------------
    def _submit(self, seen: list[NativeWorkload], now: float) -> None:
        agent = self.agent
        state = agent.state
        sizes = [
            node.gpus
            for node in state.cluster.nodes.values()
            if node.pool == agent.pool and node.cluster == agent.cluster
        ]
        for workload in seen:
            workload_id = native_workload_id(agent.cluster, workload)
            event_id = derived_event_id("agent", "submitted", workload_id)
            if workload_id in state.cluster.workloads or event_id in agent.in_flight:
                continue
            problems = list(workload.problems)
            shape = shape_problem(workload, sizes)
            if shape is not None:
                problems.append(shape)
            if problems:
                self._refuse(workload, workload_id, "; ".join(problems))
                continue
            decision = namespace_budget(
                state.bindings, state.tree, agent.cluster, workload.namespace,
                workload.budget_label,
            )  # fmt: skip
            if not decision.ok:
                self._refuse(workload, workload_id, decision.reason)
                continue
            data = submission(
                workload,
                cluster=agent.cluster,
                pool=agent.pool,
                budget=decision.budget,
                workload_id=workload_id,
            )
            if agent.publish_fact("submitted", data, now, event_id):
                self.refused.pop(workload_id, None)
                self.submitted += 1

    def _refuse(self, workload: NativeWorkload, workload_id: str, reason: str) -> None:
        if self.refused.get(workload_id) == reason:
            return
        self.refused[workload_id] = reason
        log.warning(
            "native work refused",
            extra={"object": f"{workload.namespace}/{workload.name}", "reason": reason},
        )
        origin = Origin(workload.kind, workload.namespace, workload.name, workload.uid, 1)
        ref = self._ref_of(origin)
        if ref is not None:
            self.agent.adapter.notices.event(
                ref, "Refused", f"Fairshare will not place it: {reason}", key=reason, warning=True
            )

    # -- the log's native work of this cluster ----------------------------------------------
    def _mine(self) -> list[tuple[WorkloadState, Origin]]:
        found = []
        for workload in self.agent.state.cluster.workloads.values():
            if native_cluster(workload.spec) != self.agent.cluster:
                continue
            origin = Origin.of(workload.spec)
            if origin is not None:
                found.append((workload, origin))
        return found

    def _exists(self, origin: Origin) -> bool:
        adapter = self.agent.adapter
        if origin.kind == "Job":
            job = adapter.native.job(origin)
            return job is not None and not job.deleting
        return any(not p.deleting for p in adapter.native.pods_of(origin))

    def _cancel_gone(self, mine: list[tuple[WorkloadState, Origin]], now: float) -> None:
        for workload, origin in mine:
            if workload.status in ("succeeded", "failed", "cancelled") or workload.cancel_requested:
                continue
            requeued_lone = (
                origin.kind != "Job" and workload.attempt > 1 and workload.status == "pending"
            )
            if self._exists(origin) and not requeued_lone:
                continue
            if requeued_lone:
                reason = (
                    f"{origin.describes} was preempted and has no controller to make it again "
                    "(use a Job for work that may be preempted)"
                )
            else:
                reason = f"{origin.describes} was deleted by its user"
            data = WorkloadCancelled(
                workload_id=workload.workload_id,
                cancelled_by=f"k8s:{self.agent.cluster}/{origin.namespace}",
                reason=reason[:500],
            )
            event_id = derived_event_id("agent", "cancelled", workload.workload_id)
            if event_id in self.agent.in_flight or event_id in self.agent.state.event_ids:
                continue
            if self.agent.publish_fact("cancelled", data, now, event_id):
                self.cancelled += 1

    def _resume(self, mine: list[tuple[WorkloadState, Origin]]) -> None:
        adapter = self.agent.adapter
        for workload, origin in mine:
            if origin.kind != "Job" or workload.status != "pending":
                continue
            job = adapter.native.job(origin)
            if job is not None and job.suspended and SUSPENDED_ANNOTATION in job.annotations:
                adapter.native.resume(job)

    # -- telling ---------------------------------------------------------------------------
    def _ref_of(self, origin: Origin) -> ObjectRef | None:
        if origin.kind == "Job":
            return ObjectRef("Job", origin.namespace, origin.name, origin.uid)
        if origin.kind == "Pod":
            return ObjectRef("Pod", origin.namespace, origin.name, origin.uid)
        pods = sorted(self.agent.adapter.native.pods_of(origin), key=lambda p: p.name)
        if not pods:
            return None
        return ObjectRef("Pod", origin.namespace, pods[0].name, pods[0].uid)

    def _tell(self, mine: list[tuple[WorkloadState, Origin]]) -> None:
        for workload, origin in mine:
            # placed and running are one decision to tell (a run starts at once)
            phase = "placed" if workload.status == "running" else workload.status
            told = (phase, workload.attempt)
            if self._told.get(workload.workload_id) == told:
                continue
            said = self._say(workload, origin)
            if said is None or said:
                self._told[workload.workload_id] = told
        live = {workload.workload_id for workload, _origin in mine}
        for gone in set(self._told) - live:
            del self._told[gone]

    def _say(self, workload: WorkloadState, origin: Origin) -> bool | None:
        """The Event of the workload's status (None: none to say)."""
        ref = self._ref_of(origin)
        if ref is None:
            return None
        notices = self.agent.adapter.notices
        status, attempt = workload.status, workload.attempt
        if status == "running":
            status = "placed"
        key = f"{status}:{attempt}"
        if status == "pending":
            again = f" again (attempt {attempt})" if attempt > 1 else ""
            message = (
                f"queued{again} by Fairshare as {workload.workload_id}, charging budget "
                f"{workload.budget} ({workload.gpus} GPUs"
                + (f", contract {workload.min_runtime_s} s)" if workload.allocated else ", burst)")
            )
            return notices.event(ref, "Queued", message, key=key)
        if status == "placed":
            command = self._command(workload, PlaceCommand)
            why = f": {command.decision.reason}" if command is not None else ""
            where = ", ".join(f"{node} ({len(gpus)} GPUs)" for node, gpus in workload.placement)
            return notices.event(ref, "Placed", f"placed by Fairshare on {where}{why}", key=key)
        if status == "preempted":
            command = self._command(workload, PreemptCommand)
            why = f": {command.decision.reason}" if command is not None else ""
            return notices.event(ref, "Preempted", f"preempted by Fairshare{why}", key=key)
        if status == "lost":
            return notices.event(ref, "Lost", "its pods were lost; requeued", key=key, warning=True)
        if status == "cancelled":
            return notices.event(ref, "Cancelled", "cancelled in Fairshare", key=key)
        if status in ("succeeded", "failed"):
            charged = self.agent.state.charged_gpu_s.get(workload.workload_id, 0)
            free = self.agent.state.free_gpu_s.get(workload.workload_id, 0)
            return notices.event(
                ref,
                "Finished",
                f"{status} in Fairshare; charged {charged / 3600:.2f} GPU-hours to "
                f"{workload.budget} ({free / 3600:.2f} GPU-hours of free burst)",
                key=key,
            )
        return None

    def _command(
        self, workload: WorkloadState, kind: type[PlaceCommand] | type[PreemptCommand]
    ) -> PlaceCommand | PreemptCommand | None:
        for record in reversed(self.agent.state.commands.get(workload.workload_id, ())):
            if record.attempt == workload.attempt and isinstance(record.command, kind):
                return record.command
        return None

    def _say_pending(
        self, workload: WorkloadState, origin: Origin, summary: str, pending: list[PendingInPool]
    ) -> None:
        """A Pending Event with the whole sentence (``kubectl describe`` cuts annotations at
        140 characters, not Events) once per reason that decides, per attempt."""
        code = pending[0].reason if pending else None
        key = f"pending:{workload.attempt}:{code}"
        if code is None or self._pending_said.get(workload.workload_id) == key:
            return
        ref = self._ref_of(origin)
        if ref is not None and self.agent.adapter.notices.event(ref, "Pending", summary, key=key):
            self._pending_said[workload.workload_id] = key

    def _annotate(self, mine: list[tuple[WorkloadState, Origin]], now: float, full: bool) -> None:
        """Every ``ANNOTATE_S`` all of them; in between, those whose status changed."""
        if not full:
            mine = [
                (w, o)
                for w, o in mine
                if self._annotated_phase.get(w.workload_id) != (w.status, w.attempt)
            ]
            if not mine:
                return
        state = self.agent.state
        window_s = state.settings.window_s if state.settings is not None else DEFAULT_WINDOW_S
        pending = [w.workload_id for w, _o in mine if w.status == "pending"]
        estimates = start_estimates(state, now, window_s, pending) if pending else {}
        for workload, origin in mine:
            self._annotated_phase[workload.workload_id] = (workload.status, workload.attempt)
            if workload.status in ("succeeded", "failed", "cancelled"):
                self._annotated.pop(workload.workload_id, None)
                self._pending_said.pop(workload.workload_id, None)
                self._annotated_phase.pop(workload.workload_id, None)
                continue
            if workload.status == "pending":
                view = why_view(state, workload.workload_id, now, window_s)
                self._say_pending(workload, origin, view.summary, view.pending)
                position = (
                    f"{view.pending[0].position} of {view.pending[0].queue_length}"
                    if view.pending
                    else ""
                )
                at = estimates.get(workload.workload_id)
                estimate = utc_iso(at) if at is not None else "beyond the horizon"
                wanted = (view.summary, position, estimate)
            else:
                wanted = ("", "", "")
            if self._annotated.get(workload.workload_id) == wanted:
                continue
            ref = self._ref_of(origin)
            if ref is None:
                continue
            values: dict[str, str | None] = {
                WHY_ANNOTATION: wanted[0][:1000] or None,
                POSITION_ANNOTATION: wanted[1] or None,
                ESTIMATE_ANNOTATION: wanted[2] or None,
                WORKLOAD_ID_ANNOTATION: workload.workload_id,
            }
            if self.agent.adapter.notices.annotate(ref, values):
                self._annotated[workload.workload_id] = wanted
