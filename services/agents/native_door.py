"""The door of native work: what an agent does, each round, for the work its cluster's users
send there as they always have (a Kubernetes Job naming Fairshare's scheduler, an ``sbatch``
to Fairshare's partition), whatever the cluster. The family reads its objects and speaks to its
users (:class:`NativeCluster`); the door holds the rules, once for every family.

* **Submit.** Native work the log does not have yet is checked (what the family found wrong
  with it, and its budget by ``projections.bindings.group_budget``: its namespace's or its
  account's binding) and, if it passes, stated as a ``WorkloadSubmitted`` signed by this agent
  (the trust rule lets an agent state only its own cluster's native work, ``events.native_work``):
  one queue and one fair share with what ``fairshare submit`` sends. Refused work is told why
  and never placed; it is looked at again every round, so a binding stated later lets it in.
* **Cancel.** Native work whose object its user deleted (a Job, a cancelled Slurm job) is
  cancelled (``WorkloadCancelled``): the scheduler stops what runs, charging ends there.
* **Queued again.** Work preempted and requeued is handed back to its family (a Kubernetes Job
  Fairshare suspended is resumed; a Slurm job stays held until it is placed again).
* **Tell.** Each decision (queued, placed, preempted, lost, ended, cancelled), with its reason,
  where the cluster's users look; and for pending work the one-sentence why-pending, its queue
  position and start estimate, computed by the same functions as the API's answers
  (``services.api.waiting``, ``services.api.estimates``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from events.envelope import derived_event_id
from events.models import (
    EventData,
    PlaceCommand,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadSubmitted,
)
from events.native_work import NATIVE_KEY, native_cluster
from events.times import DEFAULT_WINDOW_S, utc_iso
from projections.bindings import group_budget
from projections.cluster_types import WorkloadState
from projections.live_state import LiveState
from services.api.auth import Principal, may_submit
from services.api.estimates import start_estimates
from services.api.waiting import why_view

log = logging.getLogger(__name__)

#: Seconds between two refreshes of every pending workload's why-pending.
WAITING_S = 10.0
_ENDED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class NativeWork:
    """One workload of a cluster's users' own, as its family reads it."""

    workload_id: str
    #: The group whose binding picks the budget (``events.models.budgets.GroupKind``).
    group_kind: str
    group: str
    #: The budget its object names (None: the group's default).
    budget_label: str | None
    gpus: int
    gang: str
    min_runtime_s: int
    time_limit_s: int | None
    resumable: bool
    #: Who submitted it, as far as the cluster vouches (a namespace, a Slurm user).
    submitter: str
    #: What users call it (``team/train``, ``slurm job 1042``).
    name: str
    #: Where it came from (``spec.native``); ``cluster`` is the agent's.
    origin: dict[str, Any]
    #: Why it cannot be taken as it is (empty: it can).
    problems: tuple[str, ...] = ()
    #: A user who must be a member of the budget it charges (None: the cluster vouches, as
    #: Slurm's association checks or a namespace's binding do).
    member: str | None = None

    def submission(self, budget: str, pool: str) -> WorkloadSubmitted:
        return WorkloadSubmitted(
            workload_id=self.workload_id,
            budget=budget,
            pools=(pool,),
            gpus=self.gpus,
            gang=self.gang,  # type: ignore[arg-type]  # the family's shapes are GangShape's
            min_runtime_s=self.min_runtime_s,
            resumable=self.resumable,
            submitter=self.submitter,
            spec={"name": self.name, NATIVE_KEY: self.origin},
            time_limit_s=self.time_limit_s,
        )


@dataclass(frozen=True)
class Notice:
    """A decision told to the work's users: a short reason (``Queued``, ``Placed``,
    ``Preempted``...), a sentence, and a key under which it is said once."""

    reason: str
    message: str
    key: str
    warning: bool = False


@dataclass(frozen=True)
class Waiting:
    """Why pending work waits, as ``fairshare why`` says it."""

    summary: str
    #: ``3 of 12`` ("" when it is in no queue yet), the start estimate (ISO, or words).
    position: str
    estimate: str
    #: The reason that decides (a ``PendingCode``), None when there is none yet.
    code: str | None


class NativeCluster(Protocol):
    """What a family does for the door."""

    def native_work(self, node_sizes: Sequence[int]) -> list[NativeWork]:
        """Every native workload there now (submitted or not), checked against the sizes of
        the pool's nodes."""
        ...

    def gone(self, workload: WorkloadState) -> str | None:
        """Why the workload is to be cancelled (its user deleted it); None: it is there."""
        ...

    def queued_again(self, workload: WorkloadState) -> None:
        """The workload is pending again after a run (preempted or lost)."""
        ...

    def refuse(self, work: NativeWork, reason: str) -> None:
        """Tell its users it will not be placed, and why."""
        ...

    def settle(self, workload: WorkloadState) -> bool:
        """The workload was cancelled in Fairshare: cancel its object in the cluster if it is
        still there (never taken again); whether that is done."""
        ...

    def tell(self, workload: WorkloadState, notice: Notice) -> bool | None:
        """Tell a decision; whether it was told (None: there is nothing to tell it on)."""
        ...

    def show_waiting(self, workload: WorkloadState, waiting: Waiting | None) -> bool:
        """Show why it waits (None: it no longer waits); whether it was shown."""
        ...


class DoorHost(Protocol):
    """What the door needs of its agent."""

    state: LiveState
    cluster: str
    pool: str
    in_flight: set[str]

    def publish_fact(self, kind: str, data: EventData, at: float, event_id: str) -> bool: ...


@dataclass
class _Told:
    """What was last told of one workload."""

    decision: tuple[str, int] | None = None
    #: The workload's preemptions when it was last told of (a preemption the door's rounds
    #: did not see, requeued and placed again in between, is still told).
    preemptions: int = 0
    waiting: Waiting | None = None
    waiting_at: tuple[str, int] | None = None
    pending_key: str | None = None


@dataclass
class NativeDoor:
    """Native work of one agent (see the module's docstring)."""

    host: DoorHost
    family: NativeCluster
    #: Refusals told (workload id -> reason), each once while it stands.
    refused: dict[str, str] = field(default_factory=dict)
    submitted: int = 0
    cancelled: int = 0
    _told: dict[str, _Told] = field(default_factory=dict)
    _next_refresh: float = 0.0
    #: Cancelled workloads whose objects were cancelled in their cluster.
    _settled: set[str] = field(default_factory=set)

    def step(self, now: float) -> None:
        self._submit(now)
        mine = self._mine()
        for workload in mine:
            if workload.status == "cancelled":
                self._settle(workload)
                continue
            self._cancel_if_gone(workload, now)
            if workload.status == "pending" and workload.attempt > 1:
                self.family.queued_again(workload)
            self._tell(workload)
        full = now >= self._next_refresh
        if full:
            self._next_refresh = now + WAITING_S
        self._show_waiting(mine, now, full)
        live = {w.workload_id for w in mine}
        for gone in set(self._told) - live:
            del self._told[gone]
        self._settled &= live

    # -- submitting ------------------------------------------------------------------------
    def _submit(self, now: float) -> None:
        host, state = self.host, self.host.state
        sizes = [
            node.gpus
            for node in state.cluster.nodes.values()
            if node.pool == host.pool and node.cluster == host.cluster
        ]
        if not sizes:
            return  # its nodes are not read yet: no shape can be judged (a submission is final)
        for work in self.family.native_work(sizes):
            event_id = derived_event_id("agent", "submitted", work.workload_id)
            if work.workload_id in state.cluster.workloads or event_id in host.in_flight:
                continue
            if work.problems:
                self._refuse(work, "; ".join(work.problems))
                continue
            decision = group_budget(
                state.bindings, state.tree, work.group_kind, host.cluster, work.group,
                work.budget_label,
            )  # fmt: skip
            if not decision.ok:
                self._refuse(work, decision.reason)
                continue
            if work.member is not None:
                refusal = may_submit(Principal(work.member), state.tree, decision.budget)
                if refusal is not None:
                    self._refuse(work, f"{refusal}, which its account charges")
                    continue
            data = work.submission(decision.budget, host.pool)
            if host.publish_fact("submitted", data, now, event_id):
                self.refused.pop(work.workload_id, None)
                self.submitted += 1

    def _refuse(self, work: NativeWork, reason: str) -> None:
        if self.refused.get(work.workload_id) == reason:
            return
        self.refused[work.workload_id] = reason
        log.warning("native work refused", extra={"work": work.name, "reason": reason})
        self.family.refuse(work, reason)

    # -- the log's native work of this cluster ----------------------------------------------
    def _mine(self) -> list[WorkloadState]:
        cluster = self.host.cluster
        return [
            workload
            for workload in self.host.state.cluster.workloads.values()
            if native_cluster(workload.spec) == cluster
        ]

    def _settle(self, workload: WorkloadState) -> None:
        """Work cancelled in Fairshare (``fairshare cancel``, or its user deleted it) whose
        object is still there is cancelled in its cluster too, once: otherwise, once the live
        state forgot the workload, it would be taken again."""
        if workload.workload_id in self._settled:
            return
        if self.family.settle(workload):
            self._settled.add(workload.workload_id)

    def _cancel_if_gone(self, workload: WorkloadState, now: float) -> None:
        if workload.status in _ENDED or workload.cancel_requested:
            return
        reason = self.family.gone(workload)
        if reason is None:
            return
        event_id = derived_event_id("agent", "cancelled", workload.workload_id)
        if event_id in self.host.in_flight or event_id in self.host.state.event_ids:
            return
        data = WorkloadCancelled(
            workload_id=workload.workload_id,
            cancelled_by=workload.submitter,
            reason=reason[:500],
        )
        if self.host.publish_fact("cancelled", data, now, event_id):
            self.cancelled += 1

    # -- telling ---------------------------------------------------------------------------
    def _told_of(self, workload: WorkloadState) -> _Told:
        told = self._told.get(workload.workload_id)
        if told is None:
            told = self._told[workload.workload_id] = _Told()
        return told

    def _tell(self, workload: WorkloadState) -> None:
        # placed and running are one decision to tell (a run starts at once)
        status = "placed" if workload.status == "running" else workload.status
        told = self._told_of(workload)
        if told.decision is None:
            told.preemptions = workload.preemptions  # a restart tells no old preemption again
        if told.decision == (status, workload.attempt):
            return
        if not self._tell_missed_preemptions(workload, status, told):
            return
        notice = self._notice(workload, status)
        said = None if notice is None else self.family.tell(workload, notice)
        if said is None or said:
            told.decision = (status, workload.attempt)
            told.preemptions = workload.preemptions

    def _tell_missed_preemptions(self, workload: WorkloadState, status: str, told: _Told) -> bool:
        """Preemptions that happened between two rounds (preempted, requeued and perhaps placed
        again before the door looked) are told each, as the attempt they ended; whether the
        door may go on to tell the current decision."""
        current = 1 if status == "preempted" else 0
        missed = workload.preemptions - told.preemptions - current
        for k in range(missed):
            notice = self._preempted(workload, max(1, workload.attempt - (missed - k)))
            if self.family.tell(workload, notice) is False:
                return False
            told.preemptions += 1
        return True

    def _notice(self, workload: WorkloadState, status: str) -> Notice | None:
        key = f"{status}:{workload.attempt}"
        if status == "pending":
            again = f" again (attempt {workload.attempt})" if workload.attempt > 1 else ""
            terms = f"contract {workload.min_runtime_s} s" if workload.allocated else "burst"
            return Notice(
                "Queued",
                f"queued{again} by Fairshare as {workload.workload_id}, charging budget "
                f"{workload.budget} ({workload.gpus} GPUs, {terms})",
                key,
            )
        if status == "placed":
            command = self._command(workload, PlaceCommand)
            why = f": {command.decision.reason}" if command is not None else ""
            where = ", ".join(f"{node} ({len(gpus)} GPUs)" for node, gpus in workload.placement)
            return Notice("Placed", f"placed by Fairshare on {where}{why}", key)
        if status == "preempted":
            return self._preempted(workload, workload.attempt)
        if status == "lost":
            return Notice("Lost", "its run was lost; requeued", key, warning=True)
        if status == "cancelled":
            return Notice("Cancelled", "cancelled in Fairshare", key)
        if status in ("succeeded", "failed"):
            state = self.host.state
            charged = state.charged_gpu_s.get(workload.workload_id, 0) / 3600
            free = state.free_gpu_s.get(workload.workload_id, 0) / 3600
            return Notice(
                "Finished",
                f"{status} in Fairshare; charged {charged:.2f} GPU-hours to {workload.budget} "
                f"({free:.2f} GPU-hours of free burst)",
                key,
            )
        return None

    def _preempted(self, workload: WorkloadState, attempt: int) -> Notice:
        """The Preempted notice of ``attempt``, with the reason of its preempt command."""
        command = self._command(workload, PreemptCommand, attempt)
        why = f": {command.decision.reason}" if command is not None else ""
        return Notice("Preempted", f"preempted by Fairshare{why}", f"preempted:{attempt}")

    def _command(
        self,
        workload: WorkloadState,
        kind: type[PlaceCommand] | type[PreemptCommand],
        attempt: int | None = None,
    ) -> PlaceCommand | PreemptCommand | None:
        """The latest ``kind`` command of ``attempt`` (default: the current one)."""
        attempt = workload.attempt if attempt is None else attempt
        for record in reversed(self.host.state.commands.get(workload.workload_id, ())):
            if record.attempt == attempt and isinstance(record.command, kind):
                return record.command
        return None

    def _show_waiting(self, mine: list[WorkloadState], now: float, full: bool) -> None:
        """Every ``WAITING_S`` for all of them; in between for those whose status changed."""
        due = [
            w
            for w in mine
            if w.status not in _ENDED
            and (full or self._told_of(w).waiting_at != (w.status, w.attempt))
        ]
        if not due:
            return
        state = self.host.state
        window_s = state.settings.window_s if state.settings is not None else DEFAULT_WINDOW_S
        pending = [w.workload_id for w in due if w.status == "pending"]
        # the notice shows the estimate and its basis, not the bound: one forward run
        estimates = start_estimates(state, now, window_s, pending, latest=False) if pending else {}
        for workload in due:
            told = self._told_of(workload)
            told.waiting_at = (workload.status, workload.attempt)
            waiting = None
            if workload.status == "pending":
                view = why_view(state, workload.workload_id, now, window_s)
                first = view.pending[0] if view.pending else None
                found = estimates.get(workload.workload_id)
                at = None if found is None else found.at
                waiting = Waiting(
                    summary=view.summary,
                    position=f"{first.position} of {first.queue_length}" if first else "",
                    estimate=(
                        f"{utc_iso(at)} ({found.basis})"
                        if found is not None and at is not None
                        else "beyond the horizon"
                    ),
                    code=first.reason if first else None,
                )
            if waiting == told.waiting:
                continue
            if self.family.show_waiting(workload, waiting):
                told.waiting = waiting
            self._say_pending(workload, waiting)

    def _say_pending(self, workload: WorkloadState, waiting: Waiting | None) -> None:
        """A ``Pending`` notice with the whole sentence once per reason that decides, per
        attempt (where a family cuts what it shows, a notice is kept whole)."""
        if waiting is None or waiting.code is None:
            return
        told = self._told_of(workload)
        key = f"pending:{workload.attempt}:{waiting.code}"
        if told.pending_key == key:
            return
        if self.family.tell(workload, Notice("Pending", waiting.summary, key)):
            told.pending_key = key
