"""Runs of native work (``native.py``): placed by binding the user's own pods, stopped by
suspending their Job, over when the Job (or the pods) say so.

* **Place** = bind each waiting pod to a node of the placement (``pods/binding``, as
  kube-scheduler does): the user's objects are never edited to place them. Bindings go out
  from a pool of :data:`BIND_WORKERS` threads over the client's kept-alive connections, so a
  burst of placements binds at the API server's pace, not one round trip after another; their
  results are read on the agent's next round. A pod the Job
  controller makes later (a replacement, the next pod of a Job with more completions than
  parallelism) is bound to the slot its predecessor left. A binding refused because the pod
  is already bound (a previous incarnation bound it) is taken as done: nothing is bound twice.
  A binding refused for another reason (the node is gone) ends the run as lost: the
  scheduler requeues it, and the pods wait unbound for the next placement.
* **Preempt** = suspend the Job (``spec.suspend``, annotated as Fairshare's doing), as Kueue
  does: the Job controller deletes its pods and, because the Job is suspended, counts none of
  them against its ``backoffLimit``, so a Job preempted any number of times does not fail (a
  pod deleted under a running Job would count as a failure). Once the controller has seen the
  suspension (its ``Suspended`` condition; not before, or the pods would count as failed) the
  pods are also deleted with the command's grace period, which shortens their own when it is
  shorter. The Job is
  resumed when its workload is queued again (the agent), and its controller makes new pods,
  which wait unbound. A gang or lone pod has no controller: its pods are deleted, and a lone
  pod's workload is cancelled once requeued (nothing will make the pod again).
* **Over**: the Job's ``Complete`` (exit 0) or ``Failed`` condition (its reason:
  ``BackoffLimitExceeded``, ``DeadlineExceeded``); for pods without a Job, every pod succeeded,
  or one failed. A Job or pod deleted by its user is a cancel, which the agent states; the run
  then ends when its pods are gone.
"""

from __future__ import annotations

import logging
import math
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, cast

from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from services.agents.adapter import RunEnded, RunRequest
from services.agents.kubernetes.api_errors import why as _why
from services.agents.kubernetes.native import (
    CANCELLED_ANNOTATION,
    NATIVE_GANG_ANNOTATION,
    SUSPENDED_ANNOTATION,
    JobView,
    Origin,
    binding_plan,
)
from services.agents.kubernetes.pods import PodView

log = logging.getLogger(__name__)

#: Seconds a run whose Job (or pods) its user deleted waits for the cancel the agent states
#: before it is reported over on its own.
CANCEL_WAIT_S = 60.0
#: Bindings in flight at once (the client keeps 5 connections per CPU; a few more wait).
BIND_WORKERS = 12
#: What a binding of a pod bound already answers (a previous incarnation bound it).
ALREADY_BOUND = "already bound"
#: Seconds an index of the pods by owner is reused within one round.
_INDEX_S = 0.2


@dataclass
class NativeRun:
    request: RunRequest
    origin: Origin
    started_at: float
    stopping: bool = False
    #: The stop's grace period, and whether the pods were deleted with it yet.
    grace_s: float = 0.0
    pods_deleted: bool = False
    #: When its Job or pods were first seen gone while not stopping (None: not gone).
    gone_since: float | None = None
    #: Pods bound by this incarnation (name -> node), and bindings in flight (name -> node).
    bound: dict[str, str] = field(default_factory=dict)
    binding: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Bound:
    """A binding's outcome, from a worker: ``problem`` None when bound; ``fatal`` an error the
    agent must not outlive (re-raised in its loop)."""

    workload_id: str
    attempt: int
    pod: PodView
    node: str
    problem: str | None
    fatal: BaseException | None = None


class NativeRuns:
    """The native runs of one adapter (see the module's docstring). ``jobs`` and ``pods``
    read the adapter's caches."""

    def __init__(
        self,
        core: CoreV1Api,
        batch: BatchV1Api,
        jobs: Callable[[], Sequence[JobView]],
        pods: Callable[[], Sequence[PodView]],
        clock: Callable[[], float],
    ) -> None:
        self.core = core
        self.batch = batch
        self._jobs = jobs
        self._pods = pods
        self.clock = clock
        self.runs: dict[str, NativeRun] = {}
        self._ended: list[RunEnded] = []
        #: Pods bound, by this incarnation, in all.
        self.bound_total = 0
        self._binder = ThreadPoolExecutor(BIND_WORKERS, thread_name_prefix="k8s-bind")
        self._outcomes: queue.SimpleQueue[_Bound] = queue.SimpleQueue()
        self._index: dict[str, list[PodView]] = {}
        self._index_at = -math.inf
        self._jobs_by_uid: dict[str, JobView] = {}
        self._jobs_at = -math.inf

    def close(self) -> None:
        """Bindings in flight are let finish (a restarted agent binds what is left)."""
        self._binder.shutdown(wait=False, cancel_futures=True)

    # -- reading ---------------------------------------------------------------------------
    def job(self, origin: Origin) -> JobView | None:
        """Its Job, from an index by uid made at most every ``_INDEX_S`` (the door asks for
        every native workload each round: one pass over the cluster's Jobs, not one each)."""
        if origin.kind != "Job":
            return None
        now = self.clock()
        if now - self._jobs_at > _INDEX_S:
            self._index_jobs(now)
        found = self._jobs_by_uid.get(origin.uid)
        if found is None and self._jobs_at < now:
            # A Job made since the index was (it is reused for a moment) is not missing: the
            # door, which lists Jobs afresh, submitted one the index did not hold yet, and
            # cancelled it at once as deleted by its user (seen in CI).
            self._index_jobs(now)
            found = self._jobs_by_uid.get(origin.uid)
        return found

    def _index_jobs(self, now: float) -> None:
        self._jobs_by_uid, self._jobs_at = {job.uid: job for job in self._jobs()}, now

    def pods_of(self, origin: Origin) -> list[PodView]:
        """Its pods, from an index of the pods by owner made at most every ``_INDEX_S`` (one
        pass over the cluster's pods per round, not one per run)."""
        now = self.clock()
        if now - self._index_at > _INDEX_S:
            index: dict[str, list[PodView]] = {}
            for pod in self._pods():
                for key in (pod.job_uid, pod.uid, f"{pod.namespace}\0{_gang_key(pod)}"):
                    if key:
                        index.setdefault(key, []).append(pod)
            self._index, self._index_at = index, now
        if origin.kind == "Job":
            key = origin.uid
        elif origin.kind == "Gang":
            key = f"{origin.namespace}\0{origin.name}"
        else:
            key = origin.uid
        return [pod for pod in self._index.get(key, ()) if origin.owns(pod)]

    # -- the adapter's calls ---------------------------------------------------------------
    def start(self, run: RunRequest, origin: Origin) -> None:
        tracked = NativeRun(run, origin, self.clock())
        self.runs[run.workload_id] = tracked
        job = self.job(origin)
        if job is not None and job.suspended and SUSPENDED_ANNOTATION in job.annotations:
            self.resume(job)
        self._bind_waiting(tracked)

    def adopt(self, run: RunRequest, origin: Origin) -> bool:
        """A run of a previous incarnation: adopted while its Job or pods are there."""
        exists = self.job(origin) is not None or bool(self.pods_of(origin))
        if exists:
            self.runs[run.workload_id] = NativeRun(run, origin, self.clock())
        return exists

    def stop(self, workload_id: str, attempt: int, grace_period_s: float) -> None:
        run = self.runs.get(workload_id)
        if run is None or run.request.attempt != attempt or run.stopping:
            return
        run.stopping, run.grace_s = True, grace_period_s
        job = self.job(run.origin)
        if job is not None and not job.suspended:
            self.suspend(job)
        self._delete_stopped(run)
        log.info(
            "native run stopped",
            extra={
                "workload_id": workload_id,
                "of": run.origin.describes,
                "grace_s": grace_period_s,
            },
        )

    def tracked(self, workload_id: str, attempt: int) -> bool:
        run = self.runs.get(workload_id)
        return run is not None and run.request.attempt == attempt

    def poll_ended(self) -> list[RunEnded]:
        self._collect_bindings()
        ended, self._ended = self._ended, []
        now = self.clock()
        for workload_id, run in sorted(self.runs.items()):
            over = self._over(run, now)
            if over is not None:
                del self.runs[workload_id]
                ended.append(over)
            elif not run.stopping:
                self._bind_waiting(run)
        return ended

    # -- what ends a run ---------------------------------------------------------------------
    def _over(self, run: NativeRun, now: float) -> RunEnded | None:
        request, origin = run.request, run.origin
        pods = self.pods_of(origin)
        live = [p for p in pods if not p.finished]
        if run.stopping:
            if live:
                self._delete_stopped(run)
                return None
            return RunEnded(request.workload_id, request.attempt, None, "pods deleted (stopped)")
        if origin.kind == "Job":
            job = self.job(origin)
            if job is not None and not job.deleting:
                run.gone_since = None
                if job.finished == "Complete":
                    return RunEnded(request.workload_id, request.attempt, 0, "job complete")
                if job.finished == "Failed":
                    message = f"job failed: {job.finish_reason or 'Failed'}"
                    if job.finish_message:
                        message += f": {job.finish_message[:300]}"
                    return RunEnded(request.workload_id, request.attempt, 1, message)
                return None
        else:
            if pods and not live and all(p.phase == "Succeeded" for p in pods):
                return RunEnded(
                    request.workload_id, request.attempt, 0, f"{len(pods)} pod(s) succeeded"
                )
            failed = sorted((p for p in pods if p.phase == "Failed"), key=lambda p: p.name)
            if failed:
                first = failed[0]
                for pod in live:
                    self._delete_pod(pod, 0)
                return RunEnded(
                    request.workload_id,
                    request.attempt,
                    first.exit_code,
                    f"pod {first.name} {first.reason or 'Failed'}",
                )
            if len(live) >= 1 or (now - run.started_at < 2.0):
                run.gone_since = None
                return None
        # Deleted by its user: a cancel, which the agent states; waited for, then over.
        if run.gone_since is None:
            run.gone_since = now
        if now - run.gone_since < CANCEL_WAIT_S:
            return None
        return RunEnded(
            request.workload_id, request.attempt, None, f"{origin.describes} deleted by its user"
        )

    def _delete_stopped(self, run: NativeRun) -> None:
        """Delete a stopped run's pods with its grace, once: a Job's only once its controller
        has seen it suspended (pods deleted before would count against its backoffLimit)."""
        if run.pods_deleted:
            return
        if run.origin.kind == "Job":
            job = self.job(run.origin)
            if job is not None and not job.suspension_seen:
                return
        run.pods_deleted = True
        for pod in self.pods_of(run.origin):
            if not pod.finished:
                self._delete_pod(pod, run.grace_s)

    # -- binding -----------------------------------------------------------------------------
    def _bind_waiting(self, run: NativeRun) -> None:
        """Send the bindings its waiting pods need (those in flight count as on their node)."""
        placed = {**run.bound, **run.binding}  # (the pods' watch may not show them bound yet)
        pods = [
            replace(pod, node=placed[pod.name]) if pod.name in placed and not pod.node else pod
            for pod in self.pods_of(run.origin)
        ]
        plan = binding_plan(run.request.placement, pods, run.origin.gpus_per_pod)
        request = run.request
        for pod, node in plan:
            run.binding[pod.name] = node
            self._binder.submit(self._bind_one, request.workload_id, request.attempt, pod, node)

    def _bind_one(self, workload_id: str, attempt: int, pod: PodView, node: str) -> None:
        """A worker's binding: its outcome goes to the agent's next round."""
        try:
            problem = self.bind(pod, node)
        except Exception as error:
            problem = str(error)
        except BaseException as error:  # the agent must not outlive it
            self._outcomes.put(_Bound(workload_id, attempt, pod, node, str(error), error))
            return
        self._outcomes.put(_Bound(workload_id, attempt, pod, node, problem))

    def _collect_bindings(self) -> None:
        while True:
            try:
                outcome = self._outcomes.get_nowait()
            except queue.Empty:
                return
            if outcome.fatal is not None:
                raise outcome.fatal
            run = self.runs.get(outcome.workload_id)
            if run is None or run.request.attempt != outcome.attempt:
                continue
            pod, node = outcome.pod, outcome.node
            run.binding.pop(pod.name, None)
            if outcome.problem is None or outcome.problem == ALREADY_BOUND:
                run.bound[pod.name] = node
                self.bound_total += outcome.problem is None
                continue
            if run.stopping:
                continue
            self._lost(run, pod, node, outcome.problem)

    def _lost(self, run: NativeRun, pod: PodView, node: str, problem: str) -> None:
        log.warning(
            "could not bind a pod; the run is lost and requeued",
            extra={"pod": f"{pod.namespace}/{pod.name}", "node": node, "why": problem},
        )
        run.stopping = True
        job = self.job(run.origin)
        if job is not None:
            if not job.suspended:
                self.suspend(job)  # its controller deletes the bound pods, uncounted
        else:
            for other in self.pods_of(run.origin):
                if other.node and not other.finished:
                    self._delete_pod(other, 0)
        del self.runs[run.request.workload_id]
        self._ended.append(
            RunEnded(
                run.request.workload_id,
                run.request.attempt,
                None,
                f"pod {pod.namespace}/{pod.name} could not be bound to {node}: {problem}",
                lost=True,
            )
        )

    def bind(self, pod: PodView, node: str) -> str | None:
        """Bind ``pod`` to ``node``: None when bound now, :data:`ALREADY_BOUND` when it was,
        else why not."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # not read into a model (the client's model of a Binding refuses the server's
            # answer), but read: a response left unread keeps its connection from the pool
            response: Any = self.core.create_namespaced_pod_binding(
                pod.name,
                pod.namespace,
                cast("Any", body),
                _preload_content=False,
                _request_timeout=(5, 15),
            )
            response.drain_conn()
            response.release_conn()
        except ApiException as error:
            if error.status == 409:
                return ALREADY_BOUND  # (by a previous incarnation): never bound twice
            return _why(error)
        except Exception as error:
            return str(error)
        return None

    # -- suspending and resuming -------------------------------------------------------------
    def suspend(self, job: JobView) -> bool:
        body = {
            "spec": {"suspend": True},
            "metadata": {"annotations": {SUSPENDED_ANNOTATION: "preempted"}},
        }
        return self._patch_job(job, body, "suspended")

    def cancel_job(self, job: JobView, workload_id: str) -> bool:
        """Suspend the Job and mark it cancelled in Fairshare (``CANCELLED_ANNOTATION``)."""
        body = {
            "spec": {"suspend": True},
            "metadata": {"annotations": {CANCELLED_ANNOTATION: workload_id}},
        }
        return self._patch_job(job, body, "cancelled")

    def delete_pod(self, pod: PodView, grace_period_s: float) -> None:
        self._delete_pod(pod, grace_period_s)

    def resume(self, job: JobView) -> bool:
        body = {
            "spec": {"suspend": False},
            "metadata": {"annotations": {SUSPENDED_ANNOTATION: None}},
        }
        return self._patch_job(job, body, "resumed")

    def _patch_job(self, job: JobView, body: dict[str, Any], what: str) -> bool:
        try:
            self.batch.patch_namespaced_job(job.name, job.namespace, body, _request_timeout=(5, 15))
        except ApiException as error:
            if error.status != 404:
                log.warning(
                    f"could not have the job {what}",
                    extra={"job": f"{job.namespace}/{job.name}", "why": _why(error)},
                )
            return False
        except Exception as error:
            log.warning(
                f"could not have the job {what}",
                extra={"job": f"{job.namespace}/{job.name}", "why": str(error)},
            )
            return False
        log.info(f"job {what}", extra={"job": f"{job.namespace}/{job.name}"})
        return True

    def _delete_pod(self, pod: PodView, grace_period_s: float) -> None:
        try:
            self.core.delete_namespaced_pod(
                pod.name,
                pod.namespace,
                grace_period_seconds=max(0, round(grace_period_s)),
                _request_timeout=(5, 15),
            )
        except ApiException as error:
            if error.status != 404:
                log.warning(
                    "could not delete a pod",
                    extra={"pod": f"{pod.namespace}/{pod.name}", "why": _why(error)},
                )
        except Exception as error:
            log.warning(
                "could not delete a pod",
                extra={"pod": f"{pod.namespace}/{pod.name}", "why": str(error)},
            )


def _gang_key(pod: PodView) -> str:
    """The gang name a pod's annotation gives (for the index; ``Origin.owns`` decides)."""
    value = pod.annotations.get(NATIVE_GANG_ANNOTATION, "")
    return value.rpartition("/")[0] if "/" in value else ""
