"""Native work: unchanged Jobs and pods that name Fairshare as their scheduler, read as
workloads. Pure: views in, workloads, submissions and binding plans out.

**What is Fairshare's.** A pod whose ``spec.schedulerName`` is the agent's scheduler name
(``fairshare`` unless configured) is Fairshare's to place: kube-scheduler leaves it alone, and
the agent binds it (``pods/binding``) when the scheduler places its workload.

**What one workload is** (grouped as the peers group them):

* the pods of one ``batch/v1`` Job (indexed or not): the gang is the Job's parallelism (its
  completions, when fewer); GPUs per pod from the pod template's requests;
* a custom controller's pods annotated ``fairshare.dev/gang: "<name>/<size>"``: the pods of
  one namespace with the same name form a gang of that size, taken once all of them exist
  (so that it is bound whole);
* any other pod alone.

**Budget, contract, limit.** The ``fairshare.dev/budget`` label of the Job (else of the pod)
names the budget, else the namespace's default (``projections.bindings.namespace_budget``
decides, and refuses a budget the namespace is not bound to); ``fairshare.dev/min-runtime``
(a label or annotation: seconds, or ``90m``, ``2h``, ``1h30m``; 0 = burst) the contract; the
Job's ``activeDeadlineSeconds`` the time limit. Malformed values are problems: the workload is
refused with them, never guessed at.

**Shapes Fairshare can place.** The scheduler places a gang's GPUs on one node when they fit
the pool's largest node, else on whole nodes (the last taking the remainder). Pods of ``k``
GPUs can be bound onto that when every node the gang may get holds a multiple of ``k`` GPUs;
other shapes are refused with the reason (:func:`shape_problem`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from events.models.budgets import KUBERNETES_NAMESPACE
from events.native_work import NATIVE_KEY
from events.types import MAX_ID_LENGTH
from services.agents.kubernetes.pods import PodView
from services.agents.native_door import NativeWork

DEFAULT_SCHEDULER_NAME = "fairshare"
BUDGET_LABEL = "fairshare.dev/budget"
MIN_RUNTIME_KEY = "fairshare.dev/min-runtime"
NATIVE_GANG_ANNOTATION = "fairshare.dev/gang"
#: On a Job Fairshare suspended to preempt it (it resumes only those).
SUSPENDED_ANNOTATION = "fairshare.dev/suspended-by-fairshare"
#: On a Job cancelled in Fairshare (``fairshare cancel``): suspended, and never taken again.
CANCELLED_ANNOTATION = "fairshare.dev/cancelled-in-fairshare"
#: On the Job (or lone pod): the one-sentence why-pending, the queue position and the start
#: estimate, for ``kubectl describe`` and a ``kubectl get`` column.
WHY_ANNOTATION = "fairshare.dev/why-pending"
POSITION_ANNOTATION = "fairshare.dev/queue-position"
ESTIMATE_ANNOTATION = "fairshare.dev/start-estimate"
WORKLOAD_ID_ANNOTATION = "fairshare.dev/workload-id"

Kind = Literal["Job", "Gang", "Pod"]

_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_GANG = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)/([0-9]{1,6})$")
_MAX_MIN_RUNTIME_S = 30 * 24 * 3600


@dataclass(frozen=True)
class JobView:
    """What the agent needs of a ``batch/v1`` Job."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 1
    completions: int | None = None
    suspended: bool = False
    #: Its controller has seen the suspension (condition ``Suspended``): pods deleted from now
    #: on are not counted as failures.
    suspension_seen: bool = False
    active_deadline_s: int | None = None
    deleting: bool = False
    #: The pod template's scheduler name and GPUs per pod.
    scheduler: str = ""
    gpus_per_pod: int = 0
    #: ``Complete`` or ``Failed`` once the Job is over (with the condition's reason and
    #: message), else "".
    finished: str = ""
    finish_reason: str = ""
    finish_message: str = ""

    @property
    def gang(self) -> int:
        if self.completions is not None:
            return max(1, min(self.parallelism, self.completions))
        return max(1, self.parallelism)


@dataclass(frozen=True)
class NativeWorkload:
    """One workload of native pods, as its objects describe it."""

    kind: Kind
    namespace: str
    #: The Job's, the gang's or the pod's name; ``uid`` the Job's or the pod's (a gang's:
    #: its name, the same whichever pod is seen first).
    name: str
    uid: str
    gang: int
    gpus_per_pod: int
    #: The budget label (None: none).
    budget_label: str | None
    min_runtime_s: int
    time_limit_s: int | None
    #: Why it cannot be taken as it is (empty: it can).
    problems: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return self.gang * self.gpus_per_pod

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.uid)

    def origin(self, cluster: str) -> dict[str, Any]:
        return {
            "cluster": cluster,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "gpus_per_pod": self.gpus_per_pod,
        }


@dataclass(frozen=True)
class Origin:
    """A native workload's origin as its submission states it (``spec.native``)."""

    kind: Kind
    namespace: str
    name: str
    uid: str
    gpus_per_pod: int

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Origin | None:
        origin = spec.get(NATIVE_KEY)
        if not isinstance(origin, Mapping):
            return None
        kind = origin.get("kind")
        if kind not in ("Job", "Gang", "Pod"):
            return None
        try:
            found = cls(
                kind=kind,
                namespace=str(origin["namespace"]),
                name=str(origin["name"]),
                uid=str(origin["uid"]),
                gpus_per_pod=int(origin["gpus_per_pod"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return found if found.gpus_per_pod >= 1 else None

    def owns(self, pod: PodView) -> bool:
        """Whether ``pod`` is one of this workload's pods."""
        if pod.namespace != self.namespace:
            return False
        if self.kind == "Job":
            return pod.job_uid == self.uid
        if self.kind == "Gang":
            return pod.job_uid is None and _gang_of(pod) == self.name
        return pod.uid == self.uid

    @property
    def describes(self) -> str:
        return f"{self.kind.lower()} {self.namespace}/{self.name}"


def parse_duration(text: str) -> int | None:
    """Seconds from ``3600``, ``90m``, ``2h``, ``1h30m``, ``45s`` (None: not one of those)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    match = _DURATION.match(text)
    if not text or match is None:
        return None
    hours, minutes, seconds = (int(part) if part else 0 for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _setting(key: str, *sources: Mapping[str, str]) -> str | None:
    for source in sources:
        if key in source:
            return source[key]
    return None


def _contract(sources: Sequence[Mapping[str, str]], problems: list[str]) -> int:
    text = _setting(MIN_RUNTIME_KEY, *sources)
    if text is None:
        return 0
    seconds = parse_duration(text)
    if seconds is None or seconds > _MAX_MIN_RUNTIME_S:
        problems.append(
            f"{MIN_RUNTIME_KEY} {text!r} is not a duration of at most 30 days (seconds, or "
            "like 90m, 2h, 1h30m; 0 for burst work)"
        )
        return 0
    return seconds


def _gang_of(pod: PodView) -> str | None:
    value = pod.annotations.get(NATIVE_GANG_ANNOTATION)
    match = _GANG.match(value) if value else None
    return match.group(1) if match else None


def _gang_size(pod: PodView) -> int | None:
    value = pod.annotations.get(NATIVE_GANG_ANNOTATION)
    match = _GANG.match(value) if value else None
    return int(match.group(3)) if match else None


def _no_gpus(what: str, gpu_resource: str) -> str:
    return (
        f"{what} asks for no {gpu_resource}: Fairshare places GPU work only (leave "
        "schedulerName unset to let kube-scheduler place it)"
    )


def native_workloads(
    jobs: Iterable[JobView],
    pods: Iterable[PodView],
    scheduler: str,
    gpu_resource: str = "nvidia.com/gpu",
) -> list[NativeWorkload]:
    """Every workload of native pods and Jobs, by :attr:`NativeWorkload.key`'s order. A Job
    is read from itself (its pods come and go); a gang and a lone pod from their pods."""
    found: list[NativeWorkload] = []
    for job in jobs:
        if job.scheduler != scheduler or job.deleting or job.finished:
            continue
        if CANCELLED_ANNOTATION in job.annotations:
            continue
        problems: list[str] = []
        sources = (job.annotations, job.labels)
        if job.gpus_per_pod < 1:
            problems.append(_no_gpus(f"job {job.namespace}/{job.name}", gpu_resource))
        deadline = job.active_deadline_s
        found.append(
            NativeWorkload(
                kind="Job",
                namespace=job.namespace,
                name=job.name,
                uid=job.uid,
                gang=job.gang,
                gpus_per_pod=max(1, job.gpus_per_pod),
                budget_label=job.labels.get(BUDGET_LABEL),
                min_runtime_s=_contract(sources, problems),
                time_limit_s=deadline if deadline and deadline > 0 else None,
                problems=tuple(problems),
            )
        )
    gangs: dict[tuple[str, str], list[PodView]] = {}
    for pod in pods:
        if pod.scheduler != scheduler or pod.job_uid is not None:
            continue  # a Job's pods are its Job's
        if pod.finished or pod.deleting:
            continue
        if NATIVE_GANG_ANNOTATION in pod.annotations:
            name = _gang_of(pod)
            if name is None:
                value = pod.annotations[NATIVE_GANG_ANNOTATION]
                problem = f'{NATIVE_GANG_ANNOTATION} {value!r} is not "<name>/<size>"'
                found.append(_lone(pod, gpu_resource, extra=(problem,)))
                continue
            gangs.setdefault((pod.namespace, name), []).append(pod)
            continue
        found.append(_lone(pod, gpu_resource))
    for (namespace, name), members in sorted(gangs.items()):
        members.sort(key=lambda p: p.name)
        first = members[0]
        problems = []
        sizes = {_gang_size(p) for p in members}
        per_pod = {p.gpus for p in members}
        if len(sizes) > 1:
            problems.append(f"the pods of gang {name} state different sizes")
        if len(per_pod) > 1:
            problems.append(f"the pods of gang {name} ask for different GPU counts")
        if min(per_pod) < 1:
            problems.append(_no_gpus(f"gang {namespace}/{name}", gpu_resource))
        size = _gang_size(first) or 0
        if size < 1:
            problems.append(f"gang {name} states a size of 0")
        elif len(members) > size:
            problems.append(f"gang {name} has {len(members)} pods, more than its size {size}")
        elif len(members) < size and not problems:
            continue  # not whole yet: it is taken once all its pods are there
        found.append(
            NativeWorkload(
                kind="Gang",
                namespace=namespace,
                name=name,
                uid=name,
                gang=max(1, size),
                gpus_per_pod=max(1, first.gpus),
                budget_label=first.labels.get(BUDGET_LABEL),
                min_runtime_s=_contract((first.annotations, first.labels), problems),
                time_limit_s=None,
                problems=tuple(problems),
            )
        )
    found.sort(key=lambda w: w.key)
    return found


def _lone(pod: PodView, gpu_resource: str, extra: tuple[str, ...] = ()) -> NativeWorkload:
    problems = list(extra)
    if pod.gpus < 1:
        problems.append(_no_gpus(f"pod {pod.namespace}/{pod.name}", gpu_resource))
    return NativeWorkload(
        kind="Pod",
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        gang=1,
        gpus_per_pod=max(1, pod.gpus),
        budget_label=pod.labels.get(BUDGET_LABEL),
        min_runtime_s=_contract((pod.annotations, pod.labels), problems),
        time_limit_s=None,
        problems=tuple(problems),
    )


def native_workload_id(cluster: str, workload: NativeWorkload) -> str:
    """``k8s.<namespace>.<name>-<hash of cluster, kind and uid>``: readable, unique per object
    and cluster (a Job deleted and applied again is new work), at most the longest id, and
    without '/' (it is a path segment of the API's URLs)."""
    digest = hashlib.sha256(f"{cluster}\0{workload.kind}\0{workload.uid}".encode()).hexdigest()
    tail = f"-{digest[:10]}"
    head = f"k8s.{workload.namespace}.{workload.name}"
    return head[: MAX_ID_LENGTH - len(tail)] + tail


def shape_problem(workload: NativeWorkload, node_sizes: Sequence[int]) -> str | None:
    """Why the gang's pods cannot be bound onto what the scheduler would place it on (None:
    they can), given the GPU counts of the pool's nodes."""
    if not node_sizes:
        return None  # no nodes yet: it waits for them, as any work does
    largest = max(node_sizes)
    if workload.gpus_per_pod > largest:
        return (
            f"each pod asks for {workload.gpus_per_pod} GPUs, more than any node of the pool has "
            f"({largest})"
        )
    if workload.gpus <= largest or workload.gpus_per_pod == 1:
        return None
    uneven = sorted({size for size in node_sizes if size % workload.gpus_per_pod})
    if uneven:
        return (
            f"a gang of {workload.gang} pods of {workload.gpus_per_pod} GPUs spans nodes, and "
            f"nodes of {', '.join(map(str, uneven))} GPUs cannot hold whole pods of "
            f"{workload.gpus_per_pod}"
        )
    return None


def submission_of(
    workload: NativeWorkload, cluster: str, workload_id: str, problems: tuple[str, ...]
) -> NativeWork:
    """The native work the door submits for ``workload``: its namespace is its submitter
    (``k8s:<cluster>/<namespace>`` is not an id a person logs in with: see docs/security.md),
    its namespace's binding picks its budget (its label, else the default)."""
    return NativeWork(
        workload_id=workload_id,
        group_kind=KUBERNETES_NAMESPACE,
        group=workload.namespace,
        budget_label=workload.budget_label,
        gpus=workload.gpus,
        gang="single-node",
        min_runtime_s=workload.min_runtime_s,
        time_limit_s=workload.time_limit_s,
        resumable=workload.kind != "Pod",
        submitter=f"k8s:{cluster}/{workload.namespace}",
        name=f"{workload.namespace}/{workload.name}",
        origin=workload.origin(cluster),
        problems=problems,
    )


def binding_plan(
    placement: Sequence[tuple[str, tuple[int, ...]]],
    pods: Sequence[PodView],
    gpus_per_pod: int,
) -> list[tuple[PodView, str]]:
    """Which waiting pod to bind to which node: each node of the placement holds
    ``len(gpus) // gpus_per_pod`` pods, less those of the workload already bound there and
    not finished; waiting pods are bound in name order (any order would do: the gang is bound
    whole), so that a plan is the same however the pods were listed."""
    free: dict[str, int] = {node: len(gpus) // gpus_per_pod for node, gpus in placement}
    waiting = []
    for pod in sorted(pods, key=lambda p: p.name):
        if pod.deleting or pod.finished:
            continue
        if pod.node:
            if pod.node in free:
                free[pod.node] -= 1
        else:
            waiting.append(pod)
    plan = []
    for node, _gpus in placement:
        while free[node] > 0 and waiting:
            plan.append((waiting.pop(0), node))
            free[node] -= 1
    return plan
