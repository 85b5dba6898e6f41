"""A Fairshare run as Kubernetes pods, and pods and nodes read back as Fairshare facts. Pure.

**The spec.** A workload's spec is opaque to the scheduler; on a Kubernetes pool these keys
make the pod (:func:`scheduling.spec_checks.pod_spec_problems` checks them, at submit time in
the API and again here):

* ``image``: the container image (default: the agent's ``--image``);
* ``command``: a string run by ``/bin/sh -c``, or a list of strings (the container's command);
* ``args``: a list of strings;
* ``env``: an object of string values (names ``[A-Za-z_][A-Za-z0-9_]*``, none ``FAIRSHARE_*``:
  the agent sets ``FAIRSHARE_WORKLOAD_ID``, ``FAIRSHARE_ATTEMPT``, an array element's
  ``FAIRSHARE_ARRAY_*``, ``FAIRSHARE_GANG_INDEX`` and ``FAIRSHARE_GANG_SIZE``);
* ``cpu``, ``memory``: Kubernetes quantities (``"4"``, ``"500m"``, ``"16Gi"``), requests =
  limits;
* ``annotations``: an object of strings copied onto the pods.

Other keys are other executors' business and are ignored here.

**The pods.** One pod per node of the placement, bound to it by ``spec.nodeName`` (Fairshare
decided; kube-scheduler is not asked), asking that node's GPUs as requests = limits of the GPU
resource, and tolerating that resource's taint (GPU nodes carry it). Names are deterministic,
``fs-<cluster>-<workload>-<attempt>-<index>`` made DNS-safe with a hash of the exact ids, so a
restarted agent never creates a run twice (a create of an existing name is refused by the API
server). Labels name the cluster, workload and attempt (sanitised, for selectors); annotations
keep the exact ids. ``restartPolicy: Never``: Fairshare requeues, Kubernetes does not retry.

**What a run's pods say** (:func:`run_outcome`): the run is over once any pod failed (its exit
code and reason: ``OOMKilled``, ``Error``, ``Evicted``), once every pod succeeded, or once a pod
is gone that was not asked to go (deleted around Fairshare).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from events.models.cluster import MAX_FOREIGN_HOLDERS, ForeignHolder
from scheduling.spec_checks import GANG_ANNOTATION, WORKLOAD_ANNOTATION, pod_spec_problems, quantity
from services.agents.adapter import RunRequest, run_environment

GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "fairshare"
CLUSTER_LABEL = "fairshare.dev/cluster"
WORKLOAD_LABEL = "fairshare.dev/workload"
ATTEMPT_LABEL = "fairshare.dev/attempt"
#: Taints that restate what the agent reads elsewhere: the cordon itself (``unschedulable``),
#: and readiness (a node not Ready goes silent and the scheduler declares it down; Kubernetes
#: gives every pod a toleration of these for five minutes).
FOLLOWED_TAINTS = frozenset(
    (
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    )
)
DEFAULT_IMAGE = "busybox:1.36"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_UNSAFE = re.compile(r"[^a-z0-9-]+")
_UNSAFE_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")


class PodSpecError(ValueError):
    """A spec the Kubernetes agent cannot run: refused at submit, or the run fails at once."""


@dataclass(frozen=True)
class PodOptions:
    """What the operator decides for every pod (the agent's command-line options)."""

    cluster: str
    namespace: str = "fairshare-runs"
    gpu_resource: str = GPU_RESOURCE
    image: str = DEFAULT_IMAGE


# -- names ----------------------------------------------------------------------------------


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:10]


def pod_name(cluster: str, workload_id: str, attempt: int, index: int) -> str:
    """``fs-<cluster>-<workload>-<attempt>-<index>``, DNS-safe (lowercase, at most 63
    characters) with a hash of the exact cluster and workload ids, so two ids that read alike
    once made safe never share a name."""
    hint = _UNSAFE.sub("-", f"{cluster}-{workload_id}".lower()).strip("-")[:30].strip("-")
    return f"fs-{hint}-{_digest(cluster, workload_id)}-{attempt}-{index}"


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both
    ends): the exact id, when it already is one; else a readable hint and a hash."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    hint = _UNSAFE_LABEL.sub("-", text)[:40].strip("-_.")
    return f"{hint}-{_digest(text)}" if hint else _digest(text)


def run_selector(cluster: str) -> str:
    """The label selector of every pod of a cluster's runs."""
    return f"{MANAGED_BY}={MANAGER},{CLUSTER_LABEL}={label_value(cluster)}"


# -- the pods of a run ----------------------------------------------------------------------


def pod_manifests(run: RunRequest, options: PodOptions) -> list[dict[str, Any]]:
    """The pods of ``run``, one per node of its placement (raises :class:`PodSpecError`)."""
    spec: dict[str, Any] = dict(run.spec)
    problems = pod_spec_problems(spec)
    if problems:
        raise PodSpecError("; ".join(problems))
    command = spec.get("command")
    container: dict[str, Any] = {
        "name": "run",
        "image": spec.get("image") or options.image,
    }
    if isinstance(command, str):
        container["command"] = ["/bin/sh", "-c", command]
    elif command is not None:
        container["command"] = list(command)
    if spec.get("args") is not None:
        container["args"] = list(spec["args"])
    gang = len(run.placement)
    pods = []
    for index, (node, gpus) in enumerate(run.placement):
        limits: dict[str, str] = {options.gpu_resource: str(len(gpus))}
        for key in ("cpu", "memory"):
            value = quantity(spec.get(key))
            if value is not None:
                limits[key] = value
        given: Mapping[str, Any] = spec.get("env") or {}
        env = [{"name": str(k), "value": str(v)} for k, v in sorted(given.items())]
        env += [
            *({"name": k, "value": v} for k, v in run_environment(run).items()),
            {"name": "FAIRSHARE_GANG_INDEX", "value": str(index)},
            {"name": "FAIRSHARE_GANG_SIZE", "value": str(gang)},
        ]
        extra: Mapping[str, Any] = spec.get("annotations") or {}
        annotations = {str(k): str(v) for k, v in extra.items()}
        annotations.update(
            {WORKLOAD_ANNOTATION: run.workload_id, GANG_ANNOTATION: f"{index}/{gang}"}
        )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name(options.cluster, run.workload_id, run.attempt, index),
                    "namespace": options.namespace,
                    "labels": {
                        MANAGED_BY: MANAGER,
                        CLUSTER_LABEL: label_value(options.cluster),
                        WORKLOAD_LABEL: label_value(run.workload_id),
                        ATTEMPT_LABEL: str(run.attempt),
                    },
                    "annotations": annotations,
                },
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "tolerations": [
                        {"key": options.gpu_resource, "operator": "Exists"},
                    ],
                    "containers": [
                        {
                            **container,
                            "env": env,
                            "resources": {"requests": dict(limits), "limits": limits},
                        }
                    ],
                },
            }
        )
    return pods


# -- reading pods and nodes back ------------------------------------------------------------


@dataclass(frozen=True)
class PodView:
    """What the agent needs of a pod (the adapter reads it from the API server)."""

    name: str
    namespace: str
    node: str | None
    phase: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: GPUs it asks of the GPU resource (requests, or limits when no request is given).
    gpus: int = 0
    #: Being deleted (a grace period running).
    deleting: bool = False
    #: The first terminated container's exit code and reason, once there is one.
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    #: Its ``schedulerName`` (who placed it: ``default-scheduler``, another batch scheduler).
    scheduler: str = ""
    uid: str = ""
    #: The uid of the ``batch/v1`` Job that controls it (None: no Job's).
    job_uid: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def run(self, cluster: str) -> tuple[str, int] | None:
        """(workload, attempt) when this is a pod of ``cluster``'s runs, else None."""
        labels = self.labels
        if labels.get(MANAGED_BY) != MANAGER or labels.get(CLUSTER_LABEL) != label_value(cluster):
            return None
        workload = self.annotations.get(WORKLOAD_ANNOTATION)
        attempt = labels.get(ATTEMPT_LABEL, "")
        if not workload or not attempt.isdigit():
            return None
        return workload, int(attempt)


@dataclass(frozen=True)
class NodeView:
    name: str
    #: Allocatable GPUs of the GPU resource.
    gpus: int
    ready: bool
    unschedulable: bool
    #: Made unschedulable by Fairshare (``CORDON_ANNOTATION``), not by an admin.
    cordoned_by_fairshare: bool = False
    #: Taints the runs' pods do not tolerate (``key=value:Effect``).
    taints: tuple[str, ...] = ()
    gpu_type: str = "gpu"
    #: Where it sits in the network, from its labels (``services/agents/topology.py``).
    block: str = ""
    rack: str = ""


@dataclass(frozen=True)
class Outcome:
    """A run's pods read together: still going, or over with an exit code and a message."""

    ended: bool
    exit_code: int | None = None
    message: str = ""
    #: Every pod is running (not pending, none finished).
    running: bool = False


def run_outcome(pods: Sequence[PodView], expected: int, stopping: bool = False) -> Outcome:
    """The state of a run whose ``expected`` pods are ``pods`` (those still there).

    Over: a pod failed (the first one's exit code and reason), every pod succeeded, or, unless
    the run is ``stopping``, a pod is missing (deleted around Fairshare). While stopping, the
    run is over once no pod is left, or every pod left has finished."""
    failed = [p for p in pods if p.phase == "Failed"]
    if failed:
        first = min(failed, key=lambda p: p.name)
        return Outcome(True, first.exit_code, _describe(first, len(pods), expected))
    if stopping:
        if all(p.finished for p in pods):
            codes = [p.exit_code for p in pods if p.exit_code is not None]
            return Outcome(True, codes[0] if codes else None, "pods deleted (stopped)")
        return Outcome(False)
    if len(pods) < expected:
        return Outcome(
            True, None, f"{expected - len(pods)} of {expected} pods deleted around Fairshare"
        )
    if pods and all(p.phase == "Succeeded" for p in pods):
        return Outcome(True, 0, f"{len(pods)} pod(s) succeeded")
    return Outcome(False, running=all(p.phase == "Running" for p in pods))


def _describe(pod: PodView, left: int, expected: int) -> str:
    what = pod.reason or "Failed"
    text = f"pod {pod.name} {what}"
    if pod.exit_code is not None:
        text += f" (exit code {pod.exit_code})"
    if pod.message:
        text += f": {pod.message[:200]}"
    if expected > 1:
        text += f"; gang of {expected}"
    return text


def _foreign(pod: PodView, cluster: str, scheduler: str) -> bool:
    """Holding GPUs, unfinished, and neither a pod of this cluster's runs nor a native pod
    (one that names Fairshare's ``scheduler``, which only Fairshare binds)."""
    return (
        not pod.finished
        and pod.gpus > 0
        and pod.run(cluster) is None
        and not (scheduler and pod.scheduler == scheduler)
    )


def foreign_pods(
    pods: Iterable[PodView], node: str, cluster: str, scheduler: str = ""
) -> list[PodView]:
    """The pods on ``node`` that hold GPUs and are not Fairshare's (:func:`_foreign`), by
    namespace and name: work Fairshare did not place."""
    found = [p for p in pods if p.node == node and _foreign(p, cluster, scheduler)]
    return sorted(found, key=lambda p: (p.namespace, p.name))


def foreign_pods_by_node(
    pods: Iterable[PodView], cluster: str, scheduler: str = ""
) -> dict[str, list[PodView]]:
    """:func:`foreign_pods` of every node at once, in one pass over ``pods``."""
    found: dict[str, list[PodView]] = {}
    for p in pods:
        if p.node and _foreign(p, cluster, scheduler):
            found.setdefault(p.node, []).append(p)
    for listed in found.values():
        listed.sort(key=lambda p: (p.namespace, p.name))
    return found


def holders_of(pods: Sequence[PodView]) -> tuple[ForeignHolder, ...]:
    """Foreign pods (in order) as the fact names them: ``namespace/pod`` and its scheduler,
    at most ``MAX_FOREIGN_HOLDERS``."""
    return tuple(
        ForeignHolder(name=f"{p.namespace}/{p.name}", gpus=p.gpus, scheduler=p.scheduler[:200])
        for p in pods[:MAX_FOREIGN_HOLDERS]
    )


def foreign_gpus(pods: Iterable[PodView], node: str, cluster: str, scheduler: str = "") -> int:
    """GPUs of ``node`` held by pods that are not this cluster's runs and have not finished:
    the agent states them (``NodeForeignGpus``), the scheduler places around them, and a
    placement that needs them anyway waits (the agent deletes a pod it did not create only
    under the ``evict`` policy, docs/agents.md)."""
    return sum(p.gpus for p in foreign_pods(pods, node, cluster, scheduler))


def foreign_holders(
    pods: Iterable[PodView], node: str, cluster: str, scheduler: str = ""
) -> tuple[ForeignHolder, ...]:
    """What :func:`foreign_gpus` counts, as the fact names it (``namespace/pod``, its
    scheduler), at most ``MAX_FOREIGN_HOLDERS``."""
    return holders_of(foreign_pods(pods, node, cluster, scheduler))


def untolerated(taints: Sequence[Mapping[str, Any]], gpu_resource: str) -> tuple[str, ...]:
    """The taints (``key``, ``value``, ``effect``) that forbid the runs' pods: NoSchedule and
    NoExecute ones, but the GPU resource's own (the pods tolerate it) and those the agent
    follows otherwise (``FOLLOWED_TAINTS``)."""
    found = []
    for taint in taints:
        key, effect = str(taint.get("key") or ""), str(taint.get("effect") or "")
        if (
            effect not in ("NoSchedule", "NoExecute")
            or key == gpu_resource
            or key in FOLLOWED_TAINTS
        ):
            continue
        value = taint.get("value")
        found.append(f"{key}={value}:{effect}" if value else f"{key}:{effect}")
    return tuple(sorted(found))
