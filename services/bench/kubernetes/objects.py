"""What the benchmark puts into Kubernetes, and takes out again whatever ended the run.

Nodes are KWOK's fake ones (annotated ``kwok.x-k8s.io/node: fake``, GPUs in their capacity and
allocatable, as the NVIDIA device plugin reports them), labelled with the run's id so that the
run's agent selects only them. The Jobs are as a user writes them: unchanged but for their
``schedulerName``; their pods are annotated for KWOK to end them ``finish_after`` after they
run, long enough that every one still holds its GPU when the last is bound.

The control plane of ``bash .ci/start-kubernetes`` has no namespace controller: a deleted
namespace is never emptied nor finalized. So :func:`delete_namespace` does what that
controller would for what the run put there (Jobs, pods, the agent's Events), then finalizes
it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

#: Where ``bash .ci/start-kubernetes`` writes the kubeconfig of its admin (system:masters).
ADMIN_KUBECONFIG = Path("/var/lib/fairshare-k8s/admin.kubeconfig")
GPU = "nvidia.com/gpu"
KWOK_NODE = "kwok.x-k8s.io/node"
#: ``.ci/kwok/stages.yaml``: a Running pod annotated so ends that long after (a Go duration).
FINISH_AFTER = "fairshare.dev/kwok-finish-after"
#: On the run's nodes (the agent's node selector) and on every pod of the load.
RUN_LABEL = "fairshare.dev/bench-run"
#: ``load`` on the measured Jobs' pods, ``warmup`` on the warm-up's.
ROLE_LABEL = "fairshare.dev/bench-role"
#: Set by the Job controller on every pod it makes.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

_TIMEOUT = (5, 30)


def api_client(kubeconfig: Path) -> ApiClient:
    """A client of the API server of ``kubeconfig`` (as the agent makes its own)."""
    from services.agents.kubernetes.adapter import kubernetes_client

    return kubernetes_client(str(kubeconfig))


def check_api_server(api: ApiClient, kubeconfig: Path) -> str:
    """The API server's version; raises RuntimeError saying what to do when it does not
    answer, so a missing cluster is one line, not a traceback from the first call."""
    from kubernetes.client import VersionApi

    try:
        return str(VersionApi(api).get_code(_request_timeout=(5, 10)).git_version)
    except Exception as error:
        raise RuntimeError(
            f"the API server of {kubeconfig} does not answer ({error}); start the test control "
            "plane with `bash .ci/start-kubernetes` or pass --kubeconfig"
        ) from None


def fake_gpu_node(name: str, gpus: int, labels: dict[str, str]) -> dict[str, Any]:
    """A Node that KWOK manages, with ``gpus`` of ``nvidia.com/gpu``."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **labels},
            "annotations": {KWOK_NODE: "fake"},
        },
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def load_job(
    name: str,
    namespace: str,
    *,
    pods: int,
    scheduler_name: str,
    labels: dict[str, str],
    finish_after: str | None,
) -> dict[str, Any]:
    """An indexed Job of ``pods`` one-GPU pods, all at once (parallelism = completions: one
    gang): only ``schedulerName`` names Fairshare."""
    annotations = {FINISH_AFTER: finish_after} if finish_after else {}
    gpu = {GPU: "1"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "schedulerName": scheduler_name,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox:1.36",
                            "command": ["sh", "-c", "sleep 3600"],
                            "resources": {"requests": gpu, "limits": dict(gpu)},
                        }
                    ],
                },
            },
        },
    }


@dataclass
class RunObjects:
    """The run's objects in Kubernetes, remembered as they are made so that :meth:`remove`
    takes away exactly those, whatever ended the run."""

    core: CoreV1Api
    batch: BatchV1Api
    namespace: str
    nodes: list[str] = field(default_factory=list)
    namespace_made: bool = False

    def make_namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        self.core.create_namespace(cast("Any", body), _request_timeout=_TIMEOUT)
        self.namespace_made = True

    def make_nodes(self, names: Sequence[str], gpus: int, labels: dict[str, str]) -> None:
        """Create the nodes, a few calls at a time (a hundred one by one takes seconds)."""

        def create(name: str) -> None:
            self.core.create_node(
                cast("Any", fake_gpu_node(name, gpus, labels)),
                _preload_content=False,
                _request_timeout=_TIMEOUT,
            )

        self.nodes.extend(names)  # before: one created before a failure is removed too
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="bench-nodes") as pool:
            for done in [pool.submit(create, name) for name in names]:
                done.result()

    def ready_nodes(self, selector: str) -> int:
        """How many nodes of ``selector`` KWOK has made Ready."""
        listing = self.core.list_node(label_selector=selector, _request_timeout=_TIMEOUT)
        ready = 0
        for node in listing.items:
            conditions = (node.status.conditions if node.status else None) or []
            if any(c.type == "Ready" and c.status == "True" for c in conditions):
                ready += 1
        return ready

    def remove(self, report: Callable[[str], None]) -> None:
        """Delete the run's Jobs, pods, Events, namespace and nodes; what is already gone is
        fine, and a failure to delete one thing does not keep the others."""
        if self.namespace_made:
            try:
                delete_namespace(self.core, self.batch, self.namespace)
            except Exception as error:
                report(f"could not delete namespace {self.namespace}: {error}")
        failed = []
        for name in self.nodes:
            try:
                self.core.delete_node(name, _request_timeout=_TIMEOUT)
            except ApiException as error:
                if error.status != 404:
                    failed.append(name)
            except Exception:
                failed.append(name)
        if failed:
            report(f"could not delete {len(failed)} node(s), e.g. {failed[0]}")


def delete_namespace(
    core: CoreV1Api, batch: BatchV1Api, name: str, *, wait_s: float = 30.0
) -> None:
    """Delete what the run put in the namespace and the namespace itself, at once (pods with
    grace 0: gone without KWOK ending them first), as the namespace controller would; waits up
    to ``wait_s`` for the pods to be gone (the Job controller lifts its finalizer from each),
    then finalizes the namespace."""
    with contextlib.suppress(ApiException):
        batch.delete_collection_namespaced_job(
            name, propagation_policy="Background", _request_timeout=_TIMEOUT
        )
    with contextlib.suppress(ApiException):
        core.delete_collection_namespaced_pod(
            name, grace_period_seconds=0, _request_timeout=_TIMEOUT
        )
    with contextlib.suppress(ApiException):
        core.delete_collection_namespaced_event(name, _request_timeout=_TIMEOUT)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            left = core.list_namespaced_pod(name, limit=1, _request_timeout=_TIMEOUT).items
        except ApiException:
            break
        if not left:
            break
        time.sleep(0.5)
    try:
        core.delete_namespace(name, _request_timeout=_TIMEOUT)
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
            "spec": {"finalizers": []},
        }
        core.replace_namespace_finalize(name, cast("Any", body), _request_timeout=_TIMEOUT)
    except ApiException as error:
        if error.status != 404:
            raise
