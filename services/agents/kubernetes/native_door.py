"""Native work on Kubernetes, for the door (``services.agents.native_door``): Jobs and pods
naming Fairshare's scheduler read as :class:`~services.agents.native_door.NativeWork` (rules of
``native.py``), and Fairshare's decisions told where Kubernetes users look.

* **Told**: an Event on the Job (or pod; a gang's first pod) for each decision, named after what
  it says so a restarted agent does not say it twice; a refusal is a Warning Event.
* **Waiting**: annotations on the Job (or pod): ``fairshare.dev/why-pending``,
  ``fairshare.dev/queue-position``, ``fairshare.dev/start-estimate`` and the workload id, for
  ``kubectl describe`` and a ``kubectl get`` column; removed once it runs. ``kubectl describe``
  cuts annotations at 140 characters, so the door's Pending notice (an Event) keeps the
  sentence whole.
* **Gone**: a Job deleted by its user (or a lone pod, or every pod of a gang); and a lone pod or
  gang preempted and requeued, which no controller makes again.
* **Queued again**: a Job Fairshare suspended to preempt it is resumed; its controller makes new
  pods, which wait unbound for the next placement.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.cluster_types import WorkloadState
from services.agents.kubernetes.adapter import KubernetesAdapter
from services.agents.kubernetes.native import (
    CANCELLED_ANNOTATION,
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
    submission_of,
)
from services.agents.kubernetes.notices import ObjectRef
from services.agents.native_door import NativeWork, Notice, Waiting


class KubernetesNative:
    """The Kubernetes family of native work (a :class:`~services.agents.native_door.
    NativeCluster`)."""

    def __init__(self, adapter: KubernetesAdapter, cluster: str) -> None:
        self.adapter = adapter
        self.cluster = cluster

    def native_work(self, node_sizes: Sequence[int]) -> list[NativeWork]:
        adapter = self.adapter
        if not adapter.scheduler_name:
            return []
        found = native_workloads(
            adapter.job_views(), adapter.pod_views(), adapter.scheduler_name,
            adapter.options.gpu_resource,
        )  # fmt: skip
        works = []
        for workload in found:
            shape = shape_problem(workload, node_sizes)
            problems = (*workload.problems, *((shape,) if shape else ()))
            works.append(
                submission_of(
                    workload, self.cluster, native_workload_id(self.cluster, workload), problems
                )
            )
        return works

    # -- the door's calls ------------------------------------------------------------------
    def gone(self, workload: WorkloadState) -> str | None:
        origin = Origin.of(workload.spec)
        if origin is None:
            return None
        if origin.kind != "Job" and workload.attempt > 1 and workload.status == "pending":
            return (
                f"{origin.describes} was preempted and has no controller to make it again "
                "(use a Job for work that may be preempted)"
            )
        if self._exists(origin):
            return None
        return f"{origin.describes} was deleted by its user"

    def _exists(self, origin: Origin) -> bool:
        native = self.adapter.native
        if origin.kind == "Job":
            job = native.job(origin)
            return job is not None and not job.deleting
        return any(not p.deleting for p in native.pods_of(origin))

    def settle(self, workload: WorkloadState) -> bool:
        """Cancelled in Fairshare (``fairshare cancel``): a Job is suspended and marked so
        (its user deletes it; it is never taken again), other pods are deleted."""
        origin = Origin.of(workload.spec)
        if origin is None:
            return True
        native = self.adapter.native
        if origin.kind != "Job":
            for pod in native.pods_of(origin):
                if not pod.deleting:
                    native.delete_pod(pod, 0)
            return True
        job = native.job(origin)
        if job is None or job.deleting or job.finished or CANCELLED_ANNOTATION in job.annotations:
            return True
        return native.cancel_job(job, workload.workload_id)

    def queued_again(self, workload: WorkloadState) -> None:
        origin = Origin.of(workload.spec)
        if origin is None or origin.kind != "Job":
            return
        job = self.adapter.native.job(origin)
        if job is not None and job.suspended and SUSPENDED_ANNOTATION in job.annotations:
            self.adapter.native.resume(job)

    def refuse(self, work: NativeWork, reason: str) -> None:
        origin = Origin.of({"native": work.origin})
        ref = None if origin is None else self._ref_of(origin)
        if ref is not None:
            self.adapter.notices.event(
                ref, "Refused", f"Fairshare will not place it: {reason}", key=reason, warning=True
            )

    def tell(self, workload: WorkloadState, notice: Notice) -> bool | None:
        origin = Origin.of(workload.spec)
        ref = None if origin is None else self._ref_of(origin)
        if ref is None:
            return None
        return self.adapter.notices.event(
            ref, notice.reason, notice.message, key=notice.key, warning=notice.warning
        )

    def show_waiting(self, workload: WorkloadState, waiting: Waiting | None) -> bool:
        origin = Origin.of(workload.spec)
        ref = None if origin is None else self._ref_of(origin)
        if ref is None:
            return False
        values: dict[str, str | None] = {
            WHY_ANNOTATION: waiting.summary[:1000] if waiting else None,
            POSITION_ANNOTATION: (waiting.position or None) if waiting else None,
            ESTIMATE_ANNOTATION: waiting.estimate if waiting else None,
            WORKLOAD_ID_ANNOTATION: workload.workload_id,
        }
        return self.adapter.notices.annotate(ref, values)

    def _ref_of(self, origin: Origin) -> ObjectRef | None:
        if origin.kind in ("Job", "Pod"):
            return ObjectRef(origin.kind, origin.namespace, origin.name, origin.uid)
        pods = sorted(self.adapter.native.pods_of(origin), key=lambda p: p.name)
        if not pods:
            return None
        return ObjectRef("Pod", origin.namespace, pods[0].name, pods[0].uid)


__all__ = ["KubernetesNative", "NativeWorkload"]
