"""``fairshare bench kubernetes``: does Fairshare bind native pods as fast as Kubernetes makes
them?

A real control plane (``bash .ci/start-kubernetes``: the API server, the controller manager's
Job controller, KWOK's fake nodes) and Fairshare's scheduler and Kubernetes agent over Kafka
(``stack.py``). The load is ``jobs`` Jobs of ``pods_per_job`` one-GPU pods each, applied as a
user applies them (only ``schedulerName`` names Fairshare), as fast as a few threads can create
them, onto ``nodes`` nodes of ``gpus_per_node`` GPUs, so that every pod fits at once and
nothing waits for a GPU: what is measured is the path from a Job to its bound pods, not
queueing.

Measured in the same run, by one watch on the load's pods (``watch.py``, arrival times):

* **the baseline**: the API server's own pod-creation rate, the pods the Job controller made
  for the Jobs, first to last;
* **the figure**: pods bound per second, first to last binding (the agent's ``pods/binding``
  calls, as kube-scheduler makes them), and its **ratio** to the baseline (the target: at least
  0.9, binding keeps up with creation);
* per pod, **submit-to-bound** from its Job's create call, p50/p99/max (and its two halves: to
  the pod being created, then to it being bound), and the end-to-end span from the first Job
  created to the last pod bound;
* where that time went (``hops.py``, read back from the log): the agent stating each Job, the
  scheduler placing it, the agent taking the placement and binding its pods.

Before the load, one warm-up Job of one pod is bound on a node of its own (one GPU, which no
Job of the load fits while the warm-up pod runs on it): the scheduler and the agent have then
caught up, folded the budgets and made a first decision, so their start is not in the figures.
The load's nodes are made after it, and the load starts once the agent has registered every
one. Everything the run creates in Kubernetes (namespace, Jobs, pods, Events, nodes) is removed
at the end, whatever ended it, and the services and the embedded broker are stopped (their logs
and data are in the run's directory: a temporary one unless ``data_dir`` is given); on a
``--kafka`` of its own the run's topics (a prefix of their own) are left.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from kubernetes.client import BatchV1Api, CoreV1Api

from services.bench.kubernetes.figures import figures
from services.bench.kubernetes.hops import hops, workload_times
from services.bench.kubernetes.objects import (
    ADMIN_KUBECONFIG,
    ROLE_LABEL,
    RUN_LABEL,
    RunObjects,
    api_client,
    check_api_server,
    load_job,
)
from services.bench.kubernetes.stack import (
    RunningServices,
    ServiceOptions,
    fairshare_services,
    wait_until,
)
from services.bench.kubernetes.watch import PodWatch
from services.bench.workdir import bench_dir

Report = Callable[[str], None]
#: Called as the load runs: pods created, pods bound, pods expected.
Progress = Callable[[int, int, int], None]


@dataclass(frozen=True)
class KubernetesBenchConfig:
    kubeconfig: Path = ADMIN_KUBECONFIG
    jobs: int = 100
    pods_per_job: int = 10
    nodes: int = 100
    gpus_per_node: int = 10
    #: How long KWOK lets each pod run (a Go duration): long enough that every pod still
    #: holds its GPU when the last is bound, so no GPU is freed and reused mid-measurement.
    finish_after: str = "120s"
    #: Threads creating the Jobs.
    workers: int = 8
    #: After the load started: how long every pod may take to be bound.
    timeout_s: float = 300.0
    #: The agent's liveness signals per node and the scheduler's tick (their commands'
    #: defaults).
    heartbeat_s: float = 10.0
    tick_s: float = 5.0

    @property
    def pods(self) -> int:
        return self.jobs * self.pods_per_job

    def check(self) -> None:
        """Every Job (one gang of ``pods_per_job`` GPUs on one node) must fit at once."""
        for name in ("jobs", "pods_per_job", "nodes", "gpus_per_node", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: at least 1")
        if self.pods_per_job > self.gpus_per_node:
            raise ValueError(
                f"a Job of {self.pods_per_job} one-GPU pods does not fit a node of "
                f"{self.gpus_per_node} GPUs: the benchmark measures binding, not spanning"
            )
        fit = self.nodes * (self.gpus_per_node // self.pods_per_job)
        if fit < self.jobs:
            raise ValueError(
                f"only {fit} Jobs of {self.pods_per_job} pods fit {self.nodes} nodes of "
                f"{self.gpus_per_node} GPUs at once, not {self.jobs}: every pod must fit, so "
                "that nothing waits for a GPU"
            )


@dataclass(frozen=True)
class RunNames:
    """Names of the run's own, so that runs and tests sharing the cluster never meet."""

    run_id: str

    @property
    def namespace(self) -> str:
        return f"fs-bench-{self.run_id}"

    @property
    def cluster(self) -> str:
        return f"k8s-bench-{self.run_id}"

    @property
    def scheduler_name(self) -> str:
        return f"fs-bench-{self.run_id}"

    @property
    def node_selector(self) -> str:
        return f"{RUN_LABEL}={self.run_id}"

    @property
    def warmup_node(self) -> str:
        return f"fs-bench-{self.run_id}-warmup"

    def node(self, index: int) -> str:
        return f"fs-bench-{self.run_id}-{index:04d}"

    def job(self, index: int) -> str:
        return f"load-{index:04d}"


@dataclass
class JobLoad:
    """Creates the Jobs, ``workers`` calls at a time, timing each call."""

    batch: BatchV1Api
    namespace: str
    manifests: dict[str, dict[str, Any]]
    workers: int
    #: Job name -> epoch seconds just before its create call was sent, and when answered.
    sent: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="bench-jobs") as pool:
                list(pool.map(self._create, sorted(self.manifests)))
        finally:
            self.done.set()

    def _create(self, name: str) -> None:
        sent = time.time()
        try:
            self.batch.create_namespaced_job(
                self.namespace,
                cast("Any", self.manifests[name]),
                _preload_content=False,
                _request_timeout=(5, 30),
            )
        except Exception as error:
            self.errors[name] = str(error)[:300]
            return
        self.answered[name] = time.time()
        self.sent[name] = sent


def kubernetes_benchmark(
    config: KubernetesBenchConfig,
    kafka: str | None = None,
    data_dir: Path | None = None,
    report: Report = lambda _line: None,
    progress: Progress = lambda _created, _bound, _expected: None,
) -> dict[str, Any]:
    """The run (see the module's docstring) in ``data_dir`` (a temporary directory unless
    given: the broker's data and the services' logs); an embedded Apache Kafka unless
    ``kafka`` names one (then on topics of a fresh prefix). Raises ValueError for a load that
    does not fit, RuntimeError when the cluster does not answer or a service dies."""
    config.check()
    with bench_dir(data_dir, "kubernetes") as directory:
        return _run(config, kafka, directory, report, progress)


def _run(
    config: KubernetesBenchConfig,
    kafka: str | None,
    data_dir: Path,
    report: Report,
    progress: Progress,
) -> dict[str, Any]:
    started = time.monotonic()
    names = RunNames(uuid.uuid4().hex[:8])
    api = api_client(config.kubeconfig)
    try:
        version = check_api_server(api, config.kubeconfig)
        core, batch = CoreV1Api(api), BatchV1Api(api)
        objects = RunObjects(core, batch, names.namespace)
        try:
            result = _measure(config, kafka, data_dir, report, progress, names, objects)
        finally:
            report(f"removing namespace {names.namespace} and {len(objects.nodes)} node(s)")
            objects.remove(report)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    result["kubernetes"] = {
        "version": version,
        "kubeconfig": str(config.kubeconfig),
        "namespace": names.namespace,
        "scheduler_name": names.scheduler_name,
        "node_selector": names.node_selector,
    }
    result["config"] = {**asdict(config), "kubeconfig": str(config.kubeconfig)}
    result["machine"] = {"cpus": os.cpu_count()}
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def _measure(
    config: KubernetesBenchConfig,
    kafka: str | None,
    data_dir: Path,
    report: Report,
    progress: Progress,
    names: RunNames,
    objects: RunObjects,
) -> dict[str, Any]:
    labels = {RUN_LABEL: names.run_id}
    objects.make_namespace()
    # the agent starts only with a node to take: the warm-up's, of one GPU (no load fits it)
    objects.make_nodes([names.warmup_node], 1, labels)
    wait_until(lambda: objects.ready_nodes(names.node_selector) >= 1, "the warm-up node", 60)
    options = ServiceOptions(
        kubeconfig=config.kubeconfig,
        cluster=names.cluster,
        namespace=names.namespace,
        node_selector=names.node_selector,
        scheduler_name=names.scheduler_name,
        heartbeat_s=config.heartbeat_s,
        tick_s=config.tick_s,
    )
    prefix = f"k8sbench-{names.run_id}."
    with fairshare_services(
        options, kafka=kafka, data_dir=data_dir, prefix=prefix, report=report
    ) as services:
        warmup_s = _warm_up(config, names, objects, services, report)
        report(f"creating {config.nodes} nodes of {config.gpus_per_node} GPUs")
        node_names = [names.node(i) for i in range(config.nodes)]
        objects.make_nodes(node_names, config.gpus_per_node, labels)
        every = config.nodes + 1
        registered_s = wait_until(
            lambda: (
                objects.ready_nodes(names.node_selector) >= every
                and len(services.registered(names.cluster)) >= every
            ),
            f"{every} nodes Ready and registered by the agent",
            180,
            services.supervise,
            every_s=1.0,
        )
        report(f"{every} nodes Ready and registered ({registered_s:.1f} s)")
        load, watch = _load(config, names, objects, services, report, progress)
        pods = watch.snapshot()
        report("reading the log back (where the time went)")
        times = workload_times(services.bootstrap, services.topics, names.namespace)
    result = figures(pods, load.sent, load.answered, len(load.sent) * config.pods_per_job)
    result["hops"] = hops(times, load.sent, pods)
    result["complete"] = (
        not load.errors
        and result["pods"]["bound"] == config.pods
        and result["pods"]["created"] == config.pods
    )
    result["job_errors"] = {
        "count": len(load.errors),
        "examples": sorted(set(load.errors.values()))[:3],
    }
    result["warmup_bound_s"] = round(warmup_s, 2)
    result["nodes_registered_s"] = round(registered_s, 2)
    result["watch"] = {"events": watch.events, "requests": watch.requests, "failure": watch.failure}
    result["stack"] = {
        "broker": services.broker_description,
        "topic_prefix": prefix,
        "services": "scheduler and Kubernetes agent, one process each",
        "scheduler_tick_s": config.tick_s,
        "agent_heartbeat_s": config.heartbeat_s,
        "unclean_stops": services.unclean,
    }
    return result


def _warm_up(
    config: KubernetesBenchConfig,
    names: RunNames,
    objects: RunObjects,
    services: RunningServices,
    report: Report,
) -> float:
    """One Job of one pod, until bound: the services are up, caught up and deciding."""
    wait_until(
        lambda: names.warmup_node in services.registered(names.cluster),
        "the agent to register the warm-up node",
        180,
        services.supervise,
        every_s=1.0,
    )
    manifest = load_job(
        "warmup",
        names.namespace,
        pods=1,
        scheduler_name=names.scheduler_name,
        labels={RUN_LABEL: names.run_id, ROLE_LABEL: "warmup"},
        finish_after=config.finish_after,
    )
    objects.batch.create_namespaced_job(
        names.namespace, cast("Any", manifest), _preload_content=False, _request_timeout=(5, 30)
    )

    def bound() -> bool:
        pods = objects.core.list_namespaced_pod(
            names.namespace, label_selector=f"{ROLE_LABEL}=warmup", _request_timeout=(5, 30)
        ).items
        return any(p.spec is not None and p.spec.node_name for p in pods)

    seconds = wait_until(bound, "the warm-up Job's pod bound", 180, services.supervise)
    report(f"warm-up Job bound in {seconds:.1f} s")
    return seconds


def _load(
    config: KubernetesBenchConfig,
    names: RunNames,
    objects: RunObjects,
    services: RunningServices,
    report: Report,
    progress: Progress,
) -> tuple[JobLoad, PodWatch]:
    """The watch first, then the Jobs; until every pod of the Jobs created is bound, or the
    timeout."""
    labels = {RUN_LABEL: names.run_id, ROLE_LABEL: "load"}
    manifests = {
        names.job(i): load_job(
            names.job(i),
            names.namespace,
            pods=config.pods_per_job,
            scheduler_name=names.scheduler_name,
            labels=labels,
            finish_after=config.finish_after,
        )
        for i in range(config.jobs)
    }
    watch = PodWatch(objects.core, names.namespace, f"{ROLE_LABEL}=load")
    watch.start()
    load = JobLoad(objects.batch, names.namespace, manifests, config.workers)
    report(f"creating {config.jobs} Jobs of {config.pods_per_job} pods ({config.workers} threads)")
    loading = threading.Thread(target=load.run, name="bench-load", daemon=True)
    loading.start()
    deadline = time.monotonic() + config.timeout_s
    try:
        while True:
            services.supervise()
            created, bound = watch.counts()
            expected = len(load.sent) * config.pods_per_job if load.done.is_set() else config.pods
            progress(created, bound, expected)
            if load.done.is_set() and bound >= expected:
                break
            if time.monotonic() > deadline:
                report(
                    f"timed out after {config.timeout_s:.0f} s: {bound} of {expected} pods bound "
                    f"({created} created)"
                )
                break
            time.sleep(0.2)
    finally:
        loading.join(timeout=60)
        watch.stop()
    if load.errors:
        report(f"{len(load.errors)} Job(s) not created, e.g. {next(iter(load.errors.values()))}")
    return load, watch
