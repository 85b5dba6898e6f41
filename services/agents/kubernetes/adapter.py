"""A Kubernetes cluster behind the adapter interface: Fairshare decides, Kubernetes executes.

Each run is one pod per node of its placement, bound by ``spec.nodeName``
(:mod:`services.agents.kubernetes.pods`: names, labels, the spec's mapping). What happens to
them is read from two watches, of the selected nodes and of every pod (foreign pods hold GPUs
too), each kept by a thread as a cache: listed, then watched from the listing's
resourceVersion, resumed from the last one seen when a watch ends, listed again when the API
server says the version is gone (410). The adapter's methods read the caches and return at once.

A stop deletes the run's pods with the grace period (the kubelet sends SIGTERM, then kills);
the end is the pods gone or finished. A run whose pods stay pending longer than
``pending_timeout_s`` is deleted and reported failed with Kubernetes' reason. A gang is all or
nothing: if one pod cannot be created, those created are deleted and the run fails; once one
pod has failed, the others are deleted.

An API server that cannot be reached at start, or for ``api_timeout_s`` later, or that refuses
a permission the agent needs, raises :class:`KubernetesError`: the agent exits non-zero and is
restarted, and a restarted agent adopts its pods by their labels.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from kubernetes import watch
from kubernetes.client import (
    ApiClient,
    AuthorizationV1Api,
    BatchV1Api,
    CoreV1Api,
    V1ResourceAttributes,
    V1SelfSubjectAccessReview,
    V1SelfSubjectAccessReviewSpec,
)
from kubernetes.client.exceptions import ApiException

from events.models.cluster import ForeignHolder
from events.types import ID_PATTERN
from scheduling.spec_checks import CORDON_ANNOTATION
from services.agents.adapter import GpuSample, NodeSpec, RunEnded, RunRequest
from services.agents.kubernetes.api_errors import why as _why
from services.agents.kubernetes.native import DEFAULT_SCHEDULER_NAME, JobView, Origin
from services.agents.kubernetes.native_runs import NativeRuns
from services.agents.kubernetes.notices import Notices
from services.agents.kubernetes.pods import (
    NodeView,
    PodOptions,
    PodSpecError,
    PodView,
    foreign_gpus,
    foreign_holders,
    foreign_pods_by_node,
    pod_manifests,
    run_outcome,
    untolerated,
)
from services.agents.topology import topology_from_labels

#: What the agent does with pods of other schedulers holding GPUs on its nodes.
ForeignGpuPolicy = Literal["tolerate", "evict"]

log = logging.getLogger(__name__)

#: Seconds a watch runs before it is resumed: a quiet but healthy API server is heard from at
#: least this often.
WATCH_S = 10


class KubernetesError(RuntimeError):
    """The API server cannot be reached, or refuses what the agent needs."""


@dataclass(frozen=True)
class Permission:
    verb: str
    resource: str
    namespace: str | None = None
    group: str = ""
    subresource: str = ""

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)"
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {what}{where}"


def needed_permissions(
    namespace: str, cordon: bool, evict: bool = False, native: bool = True
) -> list[Permission]:
    """What the agent does with the API (``deploy/kubernetes/agent.yaml`` grants exactly it;
    ``evict``, the foreign-GPU policy that deletes other schedulers' pods, needs deleting pods
    in every namespace: an optional rule there). ``native``: it takes the Jobs and pods of
    every namespace that name Fairshare's scheduler (reads Jobs, binds and deletes their pods,
    suspends and annotates them, and tells their users what it did by Events)."""
    needed = [
        Permission("list", "nodes"),
        Permission("watch", "nodes"),
        Permission("list", "pods"),
        Permission("watch", "pods"),
        Permission("create", "pods", namespace),
        Permission("delete", "pods", namespace),
    ]
    if cordon:
        needed.append(Permission("patch", "nodes"))
    if evict or native:
        needed.append(Permission("delete", "pods"))
    if native:
        needed += [
            Permission("list", "jobs", group="batch"),
            Permission("watch", "jobs", group="batch"),
            Permission("patch", "jobs", group="batch"),
            Permission("create", "pods", subresource="binding"),
            Permission("patch", "pods"),
            Permission("create", "events"),
        ]
    return needed


def _gpus_asked(spec: Any, gpu_resource: str) -> int:
    """GPUs a pod (spec) asks for: its containers' requests, or limits where none is asked."""
    gpus = 0
    for container in (spec.containers if spec else None) or []:
        resources = container.resources
        asked = (resources.requests or {}) if resources else {}
        limited = (resources.limits or {}) if resources else {}
        value = asked.get(gpu_resource, limited.get(gpu_resource))
        if value is not None and str(value).isdigit():
            gpus += int(value)
    return gpus


def _pod_view(pod: Any, gpu_resource: str) -> PodView:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    gpus = _gpus_asked(spec, gpu_resource)
    exit_code, reason, message = None, "", ""
    for state in (status.container_statuses if status else None) or []:
        terminated = state.state.terminated if state.state else None
        if terminated is not None:
            exit_code, reason = terminated.exit_code, terminated.reason or ""
            message = terminated.message or ""
            break
    if status is not None and status.reason:  # Evicted, a node's pressure
        reason = status.reason
        message = status.message or message
    return PodView(
        name=meta.name,
        namespace=meta.namespace,
        node=spec.node_name if spec else None,
        phase=(status.phase if status else None) or "Pending",
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        gpus=gpus,
        deleting=meta.deletion_timestamp is not None,
        exit_code=exit_code,
        reason=reason,
        message=message,
        scheduler=(spec.scheduler_name if spec else None) or "",
        uid=meta.uid or "",
        job_uid=next(
            (
                ref.uid
                for ref in meta.owner_references or []
                if ref.controller and ref.kind == "Job" and ref.api_version == "batch/v1"
            ),
            None,
        ),
    )


def _job_view(job: Any, gpu_resource: str) -> JobView:
    meta, spec, status = job.metadata, job.spec, job.status
    template = spec.template.spec if spec and spec.template else None
    finished, reason, message = "", "", ""
    conditions = (status.conditions if status else None) or []
    for condition in conditions:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            finished, reason = condition.type, condition.reason or ""
            message = condition.message or ""
            break
    seen = any(c.type == "Suspended" and c.status == "True" for c in conditions)
    return JobView(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid or "",
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        parallelism=spec.parallelism if spec.parallelism is not None else 1,
        completions=spec.completions,
        suspended=bool(spec.suspend),
        suspension_seen=seen,
        active_deadline_s=spec.active_deadline_seconds,
        deleting=meta.deletion_timestamp is not None,
        scheduler=(template.scheduler_name if template else None) or "",
        gpus_per_pod=_gpus_asked(template, gpu_resource),
        finished=finished,
        finish_reason=reason,
        finish_message=message,
    )


def _node_view(node: Any, gpu_resource: str) -> NodeView:
    meta, spec, status = node.metadata, node.spec, node.status
    allocatable = (status.allocatable if status else None) or {}
    value = str(allocatable.get(gpu_resource, "0"))
    ready = any(
        c.type == "Ready" and c.status == "True"
        for c in ((status.conditions if status else None) or [])
    )
    taints = [
        {"key": t.key, "value": t.value, "effect": t.effect}
        for t in ((spec.taints if spec else None) or [])
    ]
    labels = meta.labels or {}
    block, rack = topology_from_labels(labels)
    return NodeView(
        name=meta.name,
        gpus=int(value) if value.isdigit() else 0,
        ready=ready,
        unschedulable=bool(spec.unschedulable) if spec else False,
        cordoned_by_fairshare=CORDON_ANNOTATION in (meta.annotations or {}),
        taints=untolerated(taints, gpu_resource),
        gpu_type=str(labels.get("nvidia.com/gpu.product", "gpu")).lower().replace(" ", "-"),
        block=block,
        rack=rack,
    )


class _Cache:
    """One kind of object, listed then watched by a thread of its own (see the module's
    docstring); ``error`` is set, and the thread stops, on a refusal it cannot get past."""

    def __init__(
        self,
        kind: str,
        list_call: Callable[..., Any],
        convert: Callable[[Any], Any],
        clock: Callable[[], float],
        **selector: Any,
    ) -> None:
        self.kind = kind
        self._list = list_call
        self._convert = convert
        self._selector = selector
        self._clock = clock
        self.items: dict[tuple[str, str], Any] = {}
        self.lock = threading.Lock()
        #: When the API server last answered (agent's clock), and the last failure.
        self.heard_at: float | None = None
        self.failure = ""
        self.refused: str | None = None
        self.relists = 0
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._unreadable: set[tuple[str, str]] = set()

    def start(self) -> None:
        """List once here (the caller learns at once if the API server answers), then watch."""
        version = self._relist()
        threading.Thread(
            target=self._run, args=(version,), name=f"k8s-{self.kind}", daemon=True
        ).start()

    def _relist(self) -> str:
        listing = self._list(_request_timeout=(5, 30), **self._selector)
        fresh = {}
        for item in listing.items:
            value = self._read(item)
            if value is not None:
                fresh[(item.metadata.namespace or "", item.metadata.name)] = value
        with self.lock:
            self.items = fresh
        self.relists += 1
        self.heard_at = self._clock()
        return str(listing.metadata.resource_version)

    def _read(self, item: Any) -> Any:
        """The object as the agent reads it. An object it cannot read (a field it did not
        expect) must not stop the watch, which would replay the same event for ever: it is
        kept as it was read last, and said once."""
        try:
            return self._convert(item)
        except Exception as error:
            key = (item.metadata.namespace or "", item.metadata.name)
            if key not in self._unreadable:
                self._unreadable.add(key)
                log.warning(
                    "cannot read a Kubernetes object; kept as last read",
                    extra={"kind": self.kind, "name": item.metadata.name, "why": str(error)},
                )
            return self.items.get(key)

    def _run(self, version: str) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                version = self._follow(version)
                backoff = 0.5
            except ApiException as error:
                if error.status == 410:  # the version is gone: list again
                    version = self._retry(self._relist)
                    continue
                if error.status in (401, 403):
                    self.refused = f"{self.kind}: {error.status} {error.reason}"
                    return
                self.failure = f"{self.kind}: {error.status} {error.reason}"
            except Exception as error:  # a connection refused, reset or timed out
                self.failure = f"{self.kind}: {type(error).__name__}: {error}"
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, 5.0)

    def _retry(self, call: Callable[[], str]) -> str:
        while True:
            try:
                return call()
            except Exception as error:
                self.failure = f"{self.kind}: {error}"
                if self._stop.wait(1.0):
                    return ""

    def _follow(self, version: str) -> str:
        self._watch = stream = watch.Watch()  # type: ignore[no-untyped-call]
        events: Iterator[dict[str, Any]] = stream.stream(  # type: ignore[no-untyped-call]
            self._list,
            resource_version=version,
            timeout_seconds=WATCH_S,
            allow_watch_bookmarks=True,
            _request_timeout=(5, WATCH_S + 10),
            **self._selector,
        )
        for event in events:
            kind, item = event["type"], event["object"]
            if kind == "ERROR":
                code = item.get("code") if isinstance(item, Mapping) else None
                raise ApiException(status=code or 500, reason=str(item))
            self.heard_at = self._clock()
            if kind == "BOOKMARK":
                version = item.metadata.resource_version
                continue
            key = (item.metadata.namespace or "", item.metadata.name)
            value = None if kind == "DELETED" else self._read(item)
            with self.lock:
                if value is None:
                    self.items.pop(key, None)
                else:
                    self.items[key] = value
            version = item.metadata.resource_version
            if self._stop.is_set():
                break
        self.heard_at = self._clock()  # a watch that ran its course: the server answered
        return stream.resource_version or version

    def values(self) -> list[Any]:
        with self.lock:
            return list(self.items.values())

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]


@dataclass
class _Run:
    request: RunRequest
    names: tuple[str, ...]
    created_at: float
    stopping: bool = False
    warned_pending: bool = False
    note: str = ""


class KubernetesAdapter:
    """A :class:`~services.agents.adapter.ClusterAdapter` over one Kubernetes cluster.

    ``cluster`` is the Fairshare cluster's name (in every pod's labels: several Fairshare
    clusters may share one Kubernetes without taking each other's pods). Raises
    :class:`KubernetesError` when the API server does not answer, refuses a permission, or
    has no selected node with GPUs, at construction."""

    def __init__(
        self,
        api: ApiClient,
        options: PodOptions,
        *,
        node_selector: str = "",
        cordon_in_kubernetes: bool = False,
        foreign_gpu_policy: ForeignGpuPolicy = "tolerate",
        foreign_grace_s: float = 300.0,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        pending_timeout_s: float = 600.0,
        api_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.options = options
        self.cluster = options.cluster
        self.node_selector = node_selector
        self.cordon_in_kubernetes = cordon_in_kubernetes
        #: What the agent does with pods of other schedulers holding GPUs on its nodes:
        #: ``tolerate`` (reported only) or ``evict`` (deleted after ``foreign_grace_s``).
        self.foreign_gpu_policy: ForeignGpuPolicy = foreign_gpu_policy
        self.foreign_grace_s = foreign_grace_s
        #: Pods naming this scheduler are Fairshare's to place (native work); "": none are.
        self.scheduler_name = scheduler_name
        self.pending_timeout_s = pending_timeout_s
        self.api_timeout_s = api_timeout_s
        self.clock = clock
        self._runs: dict[str, _Run] = {}
        self._ended: list[RunEnded] = []
        self._check_permissions()
        gpu = options.gpu_resource
        self._nodes = _Cache(
            "nodes",
            self.core.list_node,
            lambda node: _node_view(node, gpu),
            clock,
            label_selector=node_selector or None,
        )
        self._pods = _Cache(
            "pods", self.core.list_pod_for_all_namespaces, lambda pod: _pod_view(pod, gpu), clock
        )
        self.batch = BatchV1Api(api)
        self._jobs = _Cache(
            "jobs", self.batch.list_job_for_all_namespaces, lambda job: _job_view(job, gpu), clock
        )
        self.native = NativeRuns(self.core, self.batch, self.job_views, self.pod_views, clock)
        self.notices = Notices(self.core, self.batch, f"fairshare-agent-{self.cluster}")
        for cache in self._caches:
            try:
                cache.start()
            except ApiException as error:
                raise KubernetesError(f"cannot list {cache.kind}: {_why(error)}") from error
            except Exception as error:
                raise KubernetesError(f"cannot reach the API server: {error}") from error
        specs = [
            NodeSpec(
                node.name,
                node.gpus,
                node.gpu_type,
                executor="kubernetes",
                block=node.block,
                rack=node.rack,
            )
            for node in sorted(self.node_views().values(), key=lambda n: n.name)
            if node.gpus > 0 and _fairshare_id(node.name)
        ]
        if not specs:
            raise KubernetesError(
                f"no node with allocatable {gpu}"
                + (f" selected by {node_selector!r}" if node_selector else "")
            )
        self._specs = specs

    def _check_permissions(self) -> None:
        """Every permission the agent needs, asked of the API server before anything is done
        (a SelfSubjectAccessReview each): a missing one is named, not found out later."""
        reviews = AuthorizationV1Api(self.api)
        missing = []
        try:
            self.core.read_namespace(self.options.namespace, _request_timeout=(5, 10))
        except ApiException as error:
            if error.status == 404:
                raise KubernetesError(
                    f"namespace {self.options.namespace} does not exist (create it: "
                    "deploy/kubernetes/agent.yaml)"
                ) from error
            if error.status not in (401, 403):
                raise KubernetesError(f"cannot reach the API server: {_why(error)}") from error
        except Exception as error:
            raise KubernetesError(f"cannot reach the API server: {error}") from error
        evict = self.foreign_gpu_policy == "evict"
        for permission in needed_permissions(
            self.options.namespace, self.cordon_in_kubernetes, evict, bool(self.scheduler_name)
        ):
            body = V1SelfSubjectAccessReview(
                spec=V1SelfSubjectAccessReviewSpec(
                    resource_attributes=V1ResourceAttributes(
                        verb=permission.verb,
                        resource=permission.resource,
                        group=permission.group,
                        namespace=permission.namespace,
                        subresource=permission.subresource or None,
                    )
                )
            )
            try:
                review = reviews.create_self_subject_access_review(body, _request_timeout=(5, 10))
            except ApiException as error:
                raise KubernetesError(f"cannot check permissions: {_why(error)}") from error
            if review.status is None or not review.status.allowed:
                missing.append(str(permission))
        if missing:
            raise KubernetesError(
                "the agent's account may not "
                + "; ".join(missing)
                + " (grant the ClusterRole and Role of deploy/kubernetes/agent.yaml)"
            )

    # -- the caches ------------------------------------------------------------------------
    @property
    def _caches(self) -> tuple[_Cache, ...]:
        """Jobs are watched only when native work is taken."""
        if self.scheduler_name:
            return (self._nodes, self._pods, self._jobs)
        return (self._nodes, self._pods)

    def node_views(self) -> dict[str, NodeView]:
        return {node.name: node for node in self._nodes.values()}

    def pod_views(self) -> list[PodView]:
        return list(self._pods.values())

    def job_views(self) -> list[JobView]:
        return list(self._jobs.values())

    def healthy(self) -> bool:
        """Both watches heard from the API server within ``api_timeout_s``; raises
        :class:`KubernetesError` when one was refused, or when it has been silent longer."""
        now = self.clock()
        for cache in self._caches:
            if cache.refused is not None:
                raise KubernetesError(f"the API server refused the watch of {cache.refused}")
            heard = cache.heard_at if cache.heard_at is not None else now
            if now - heard > self.api_timeout_s:
                raise KubernetesError(
                    f"no answer from the API server for {now - heard:.0f} s ({cache.failure})"
                )
            if now - heard > 2 * WATCH_S + 1:
                return False
        return True

    def _pods_of(self, run: _Run) -> list[PodView]:
        names = set(run.names)
        ns = self.options.namespace
        return [p for p in self._pods.values() if p.namespace == ns and p.name in names]

    # -- the adapter -----------------------------------------------------------------------
    def nodes(self) -> Sequence[NodeSpec]:
        return list(self._specs)

    def start(self, run: RunRequest) -> None:
        origin = Origin.of(run.spec)
        if origin is not None:
            self.native.start(run, origin)
            return
        try:
            manifests = pod_manifests(run, self.options)
        except PodSpecError as error:
            self._fail(run, f"the spec cannot make a pod: {error}")
            return
        names = tuple(m["metadata"]["name"] for m in manifests)
        created: list[str] = []
        for manifest in manifests:
            name = manifest["metadata"]["name"]
            try:
                # The client takes a plain manifest as it takes its models (it serialises both).
                self.core.create_namespaced_pod(
                    self.options.namespace, cast("Any", manifest), _request_timeout=(5, 15)
                )
                created.append(name)
            except ApiException as error:
                if error.status == 409:  # created by a previous incarnation: never twice
                    log.info("pod already exists; not created again", extra={"pod": name})
                    continue
                self._delete(created, 0)
                self._fail(run, f"pod {name} could not be created: {_why(error)}")
                return
            except Exception as error:
                self._delete(created, 0)
                self._fail(run, f"pod {name} could not be created: {error}")
                return
        self._runs[run.workload_id] = _Run(run, names, self.clock())
        log.info(
            "pods created",
            extra={"workload_id": run.workload_id, "attempt": run.attempt, "pods": len(names)},
        )

    def _fail(self, run: RunRequest, message: str) -> None:
        log.warning("run not started", extra={"workload_id": run.workload_id, "reason": message})
        self._ended.append(RunEnded(run.workload_id, run.attempt, None, message[:500]))

    def adopt(self, run: RunRequest) -> bool:
        origin = Origin.of(run.spec)
        if origin is not None:
            return self.native.adopt(run, origin)
        names = tuple(m["metadata"]["name"] for m in _manifests_or_empty(run, self.options))
        tracked = _Run(run, names, self.clock())
        if not names or not self._pods_of(tracked):
            return False
        self._runs[run.workload_id] = tracked
        log.info("adopted pods", extra={"workload_id": run.workload_id, "pods": len(names)})
        return True

    def stop(self, workload_id: str, attempt: int, grace_period_s: float) -> None:
        if workload_id in self.native.runs:
            self.native.stop(workload_id, attempt, grace_period_s)
            return
        run = self._runs.get(workload_id)
        if run is None or run.request.attempt != attempt or run.stopping:
            return
        run.stopping = True
        self._delete(list(run.names), grace_period_s)
        log.info(
            "pods deleted with their grace period",
            extra={"workload_id": workload_id, "grace_s": grace_period_s},
        )

    def _delete(self, names: Sequence[str], grace_period_s: float) -> None:
        for name in names:
            try:
                self.core.delete_namespaced_pod(
                    name,
                    self.options.namespace,
                    grace_period_seconds=max(0, round(grace_period_s)),
                    _request_timeout=(5, 15),
                )
            except ApiException as error:
                if error.status != 404:
                    log.warning("could not delete a pod", extra={"pod": name, "why": _why(error)})
            except Exception as error:
                log.warning("could not delete a pod", extra={"pod": name, "why": str(error)})

    def poll_ended(self) -> list[RunEnded]:
        ended, self._ended = self._ended, []
        if not self.healthy():
            return ended
        ended += self.native.poll_ended()
        now = self.clock()
        for workload_id, run in sorted(self._runs.items()):
            pods = self._pods_of(run)
            if now - run.created_at < 2.0 and len(pods) < len(run.names):
                continue  # created a moment ago: the watch has not brought them yet
            outcome = run_outcome(pods, len(run.names), run.stopping)
            if outcome.ended:
                if not run.stopping:
                    self._delete([p.name for p in pods if not p.finished], 0)
                del self._runs[workload_id]
                message = outcome.message + (f"; {run.note}" if run.note else "")
                ended.append(
                    RunEnded(workload_id, run.request.attempt, outcome.exit_code, message[:500])
                )
            elif not outcome.running and not run.stopping:
                self._chase_pending(run, pods, now)
        return ended

    def _chase_pending(self, run: _Run, pods: list[PodView], now: float) -> None:
        waited = now - run.created_at
        waiting = [p for p in pods if p.phase == "Pending"]
        why = ", ".join(sorted({p.reason for p in waiting if p.reason})) or "Pending"
        if self.pending_timeout_s > 0 and waited >= self.pending_timeout_s:
            run.note = f"Kubernetes kept it pending for {int(waited)} s ({why}); deleted"
            run.stopping = True
            self._delete(list(run.names), 0)
            log.warning(run.note, extra={"workload_id": run.request.workload_id})
        elif waited >= 30 and not run.warned_pending:
            run.warned_pending = True
            log.warning(
                "pods still pending in Kubernetes",
                extra={"workload_id": run.request.workload_id, "reason": why},
            )

    def reachable(self, node: str) -> bool:
        found = self.node_views().get(node)
        return found is not None and found.ready and self.healthy()

    def readings(self, node: str) -> Sequence[GpuSample]:
        """Idle samples: the API server allocates GPUs but does not measure them."""
        found = self.node_views().get(node)
        return [GpuSample(index=i) for i in range(found.gpus if found else 0)]

    def close(self) -> None:
        """Leave the pods running: the next incarnation adopts them."""
        for cache in self._caches:
            cache.stop()
        self._runs.clear()
        self.native.runs.clear()
        self.native.close()
        self.notices.close()

    # -- for the Kubernetes agent ----------------------------------------------------------
    def tracked(self, workload_id: str, attempt: int) -> bool:
        if self.native.tracked(workload_id, attempt):
            return True
        run = self._runs.get(workload_id)
        return run is not None and run.request.attempt == attempt

    def our_pods(self) -> list[tuple[tuple[str, int], PodView]]:
        """This cluster's run pods, each with its (workload, attempt)."""
        found = []
        for pod in self._pods.values():
            tag = pod.run(self.cluster)
            if tag is not None and pod.namespace == self.options.namespace:
                found.append((tag, pod))
        return found

    def foreign_gpus(self, node: str) -> int:
        return foreign_gpus(self._pods.values(), node, self.cluster, self.scheduler_name)

    def foreign_holders(self, node: str) -> tuple[ForeignHolder, ...]:
        return foreign_holders(self._pods.values(), node, self.cluster, self.scheduler_name)

    def foreign_pods_by_node(self) -> dict[str, list[PodView]]:
        return foreign_pods_by_node(self._pods.values(), self.cluster, self.scheduler_name)

    def evict_foreign_pod(self, namespace: str, name: str) -> bool:
        """Delete a pod Fairshare did not create (the ``evict`` policy); whether it went."""
        try:
            self.core.delete_namespaced_pod(name, namespace, _request_timeout=(5, 15))
        except ApiException as error:
            if error.status == 404:
                return True
            log.warning(
                "could not evict a foreign pod",
                extra={"pod": f"{namespace}/{name}", "why": _why(error)},
            )
            return False
        except Exception as error:
            log.warning(
                "could not evict a foreign pod",
                extra={"pod": f"{namespace}/{name}", "why": str(error)},
            )
            return False
        return True

    def delete_pod(self, name: str) -> None:
        self._delete([name], 0)

    def set_unschedulable(self, node: str, cordon: bool, reason: str = "") -> bool:
        """Cordon (or uncordon) ``node`` in Kubernetes, marked as Fairshare's doing."""
        annotations: dict[str, str | None] = {CORDON_ANNOTATION: reason or "cordoned"}
        if not cordon:
            annotations = {CORDON_ANNOTATION: None}
        body = {"spec": {"unschedulable": cordon}, "metadata": {"annotations": annotations}}
        try:
            self.core.patch_node(node, body, _request_timeout=(5, 15))
        except ApiException as error:
            log.warning("could not patch the node", extra={"node": node, "why": _why(error)})
            return False
        log.info("node cordon set in Kubernetes", extra={"node": node, "unschedulable": cordon})
        return True


def _manifests_or_empty(run: RunRequest, options: PodOptions) -> list[dict[str, Any]]:
    try:
        return pod_manifests(run, options)
    except PodSpecError:
        return []


def _fairshare_id(name: str) -> bool:
    if re.match(ID_PATTERN, name) is None:
        log.warning("node name is not a Fairshare id; skipped", extra={"node": name})
        return False
    return True


def kubernetes_client(kubeconfig: str | None) -> ApiClient:
    """A client from ``kubeconfig``, or the pod's in-cluster account when None."""
    from kubernetes import config

    if kubeconfig:
        client: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
        return client
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return ApiClient()
