"""Behaviour every cluster adapter must have, written once and run against each family.

The adapter interface is :class:`services.agents.adapter.ClusterAdapter`; these cases hold an
adapter to what its docstring promises the agent loop, through that interface only, as the
loop calls it: the nodes it offers (registered by the agent) with their GPUs, a placed run
started and its end reported exactly once with its exit code, a stop (a preemption or a cancel)
ended by SIGTERM or, past the grace period, by a kill, stops of runs it does not have ignored,
what a restarted agent adopts (the runs still going, and those that ended while no agent
watched) and what it refuses (what the cluster never had: the agent reports it lost), and a
spec the cluster cannot run failed without a crash.

``tests/unit/test_agent_adapter_contract.py`` runs them against the simulated and the local
adapters; the integration tests run the very same cases against a real Slurm
(``test_slurm_adapter_contract.py``, ``-m slurm``) and a real Kubernetes API server with KWOK's
nodes (``test_kubernetes_adapter_contract.py``, ``-m kubernetes``).

A family plays its part through a :class:`Cluster`: a new adapter incarnation over the same
cluster (an agent's restart), specs the cluster runs as the cases need, and its clock (a
simulated cluster's is moved by hand, a real one's is waited on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

from services.agents.adapter import ClusterAdapter, RunEnded, RunRequest

#: What a new incarnation adopts of what the last one started: ``all`` (a simulated cluster
#: plays every run the log says is running), ``none`` (this machine's processes are not a new
#: agent's to find: the agent reports them lost) or ``found`` (Slurm, Kubernetes: what the
#: cluster still has, or remembers ending).
Adopts = Literal["all", "none", "found"]


class Cluster(Protocol):
    """One family's adapter under test, and the cluster it drives."""

    #: What ``NodeSpec.executor`` its nodes carry.
    executor: str
    #: What it adopts after a restart (:data:`Adopts`).
    adopts: Adopts
    #: Seconds (of :meth:`sleep`) a start, an end or a stop may take, and between two polls.
    timeout_s: float
    poll_s: float
    #: Seconds until a started run really runs (its command is past its first line).
    settle_s: float
    #: The grace period of the case that a run ignoring SIGTERM is killed after.
    grace_s: float
    #: The exit code of a run ended by SIGTERM, and by the kill after the grace (None: the
    #: cluster may not say; it is then only checked that the run did not succeed).
    term_exit: int | None
    kill_exit: int | None

    def adapter(self) -> ClusterAdapter:
        """A new incarnation of the agent's adapter, over the same cluster."""

    def spec(
        self, *, seconds: float | None = None, exit_code: int = 0, ignores_sigterm: bool = False
    ) -> dict[str, object]:
        """A spec whose run ends by itself after ``seconds`` with ``exit_code`` (None: runs
        until stopped), and exits on SIGTERM unless ``ignores_sigterm``."""

    def unrunnable(self) -> dict[str, object] | None:
        """A spec the cluster cannot run (None: it runs every spec)."""

    def now(self) -> float:
        """The agent's clock (``RunRequest.started_at``)."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass on the cluster."""


class WallClock:
    """The clock of a real cluster: time passes by itself, and is waited on."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ShellCommands(WallClock):
    """Specs of a cluster that runs a spec's ``command`` with ``/bin/sh -c`` (local, Slurm); a
    run that ignores SIGTERM spins in ``spin_s`` steps."""

    spin_s: float

    def spec(
        self, *, seconds: float | None = None, exit_code: int = 0, ignores_sigterm: bool = False
    ) -> dict[str, object]:
        if ignores_sigterm:
            return {"command": f"trap '' TERM; while true; do sleep {self.spin_s:g}; done"}
        if seconds is None:
            return {"command": "sleep 300"}
        return {"command": f"sleep {seconds}; exit {exit_code}"}

    def unrunnable(self) -> dict[str, object] | None:
        return {"command": 42}


# -- helpers ---------------------------------------------------------------------------------


@contextmanager
def incarnation(cluster: Cluster) -> Iterator[ClusterAdapter]:
    """An adapter, closed when the case is over (as the agent closes it when it stops)."""
    adapter = cluster.adapter()
    try:
        yield adapter
    finally:
        adapter.close()


def request(
    cluster: Cluster,
    adapter: ClusterAdapter,
    workload_id: str,
    spec: dict[str, object],
    *,
    gpu: int = 0,
    attempt: int = 1,
) -> RunRequest:
    """A run of ``spec`` placed on GPU ``gpu`` of the adapter's first node, starting now."""
    node = adapter.nodes()[0].name
    return RunRequest(
        workload_id,
        attempt,
        ((node, (gpu,)),),
        spec,
        started_at=cluster.now(),
        budget="lab/a",
        submitter="bo",
    )


def wait_ended(cluster: Cluster, adapter: ClusterAdapter, count: int = 1) -> list[RunEnded]:
    """Poll until ``count`` runs ended (failing after ``timeout_s``); then poll on for a
    while, so that an end reported twice is caught (by :func:`quiet`)."""
    ended: list[RunEnded] = []
    waited = 0.0
    while True:
        ended.extend(adapter.poll_ended())
        if len(ended) >= count:
            break
        assert waited < cluster.timeout_s, (
            f"{count} run end(s) not reported after {cluster.timeout_s} s: got {ended}"
        )
        cluster.sleep(cluster.poll_s)
        waited += cluster.poll_s
    quiet(cluster, adapter, max(cluster.settle_s, 2 * cluster.poll_s))
    return ended


def quiet(cluster: Cluster, adapter: ClusterAdapter, seconds: float) -> None:
    """Polls for ``seconds`` report no end."""
    waited = 0.0
    while True:
        assert adapter.poll_ended() == [], f"an end reported {waited:.1f} s in"
        if waited >= seconds:
            return
        cluster.sleep(cluster.poll_s)
        waited += cluster.poll_s


# -- the cases -------------------------------------------------------------------------------


def check_nodes_are_offered_with_their_gpus(cluster: Cluster) -> None:
    """What the agent registers: distinct nodes, each with GPUs, reachable, one reading per GPU
    index; a node it does not have is neither."""
    with incarnation(cluster) as adapter:
        nodes = adapter.nodes()
        assert nodes, "no node offered"
        names = [node.name for node in nodes]
        assert len(set(names)) == len(names), names
        for node in nodes:
            assert node.gpus >= 1, node
            assert node.gpu_type, node
            assert node.executor == cluster.executor, node
            assert adapter.reachable(node.name), node
            assert [s.index for s in adapter.readings(node.name)] == list(range(node.gpus))
        assert not adapter.reachable("no-such-node")
        assert list(adapter.readings("no-such-node")) == []


def check_each_run_ends_once_with_its_exit_code(cluster: Cluster) -> None:
    """Two placed runs end by themselves, each reported once, with its own exit code: 0 is a
    success, 3 is not."""
    with incarnation(cluster) as adapter:
        adapter.start(request(cluster, adapter, "w1", cluster.spec(seconds=1), gpu=0))
        adapter.start(request(cluster, adapter, "w2", cluster.spec(seconds=1, exit_code=3), gpu=1))
        ended = {end.workload_id: end for end in wait_ended(cluster, adapter, 2)}
        assert sorted(ended) == ["w1", "w2"], ended
        assert (ended["w1"].attempt, ended["w1"].exit_code) == (1, 0), ended["w1"]
        assert ended["w1"].succeeded
        assert (ended["w2"].attempt, ended["w2"].exit_code) == (1, 3), ended["w2"]
        assert not ended["w2"].succeeded


def check_a_stop_ends_a_run_that_exits_on_sigterm(cluster: Cluster) -> None:
    """A run with no end of its own runs until stopped (a preemption, a cancel); it exits on
    SIGTERM well within the grace, reported once; stopping it again does nothing."""
    with incarnation(cluster) as adapter:
        adapter.start(request(cluster, adapter, "w1", cluster.spec()))
        quiet(cluster, adapter, cluster.settle_s)
        adapter.stop("w1", 1, grace_period_s=300)
        [ended] = wait_ended(cluster, adapter)
        assert (ended.workload_id, ended.attempt) == ("w1", 1), ended
        assert not ended.succeeded, ended
        if cluster.term_exit is not None:
            assert ended.exit_code == cluster.term_exit, ended
        adapter.stop("w1", 1, grace_period_s=0)  # already over
        quiet(cluster, adapter, cluster.poll_s)


def check_the_grace_period_bounds_a_stop(cluster: Cluster) -> None:
    """A run that ignores SIGTERM is killed once the grace period is over, not before."""
    with incarnation(cluster) as adapter:
        adapter.start(request(cluster, adapter, "w1", cluster.spec(ignores_sigterm=True)))
        quiet(cluster, adapter, cluster.settle_s)
        adapter.stop("w1", 1, grace_period_s=cluster.grace_s)
        quiet(cluster, adapter, cluster.grace_s / 2)
        [ended] = wait_ended(cluster, adapter)
        assert (ended.workload_id, ended.attempt) == ("w1", 1), ended
        assert not ended.succeeded, ended
        if cluster.kill_exit is not None:
            assert ended.exit_code == cluster.kill_exit, ended


def check_a_stop_right_after_the_start_ends_the_run(cluster: Cluster) -> None:
    """A run stopped before it runs (a cancel while it is still pending) ends, reported once."""
    with incarnation(cluster) as adapter:
        adapter.start(request(cluster, adapter, "w1", cluster.spec()))
        adapter.stop("w1", 1, grace_period_s=0)
        [ended] = wait_ended(cluster, adapter)
        assert (ended.workload_id, ended.attempt, ended.succeeded) == ("w1", 1, False), ended


def check_stops_of_runs_it_does_not_have_change_nothing(cluster: Cluster) -> None:
    """A stop of an unknown workload, or of another attempt, leaves the run to end by itself."""
    with incarnation(cluster) as adapter:
        adapter.start(request(cluster, adapter, "w1", cluster.spec(seconds=1)))
        adapter.stop("nobody", 1, grace_period_s=0)
        adapter.stop("w1", 2, grace_period_s=0)
        [ended] = wait_ended(cluster, adapter)
        assert (ended.workload_id, ended.attempt, ended.exit_code) == ("w1", 1, 0), ended


def check_a_restart_adopts_a_run_that_still_runs(cluster: Cluster) -> None:
    """An agent that died (its adapter never closed) is followed by a new incarnation: it adopts
    the run the log says is running, which then ends through it, stopped by it; or, where runs
    cannot outlive their agent's adapter, it says so (the agent reports the run lost)."""
    first = cluster.adapter()
    try:
        run = request(cluster, first, "w1", cluster.spec())
        first.start(run)
        quiet(cluster, first, cluster.settle_s)
        with incarnation(cluster) as second:
            adopted = second.adopt(run)
            assert adopted is (cluster.adopts != "none")
            if adopted:
                quiet(cluster, second, cluster.poll_s)  # it goes on
                second.stop("w1", 1, grace_period_s=300)
                [ended] = wait_ended(cluster, second)
                assert (ended.workload_id, ended.attempt, ended.succeeded) == ("w1", 1, False)
    finally:
        first.close()


def check_a_restart_reports_a_run_that_ended_meanwhile(cluster: Cluster) -> None:
    """A run that ended while no incarnation would report it (its end never reached the log)
    is adopted by the next one, which reports the end with its exit code, once."""
    first = cluster.adapter()
    try:
        run = request(cluster, first, "w1", cluster.spec(seconds=1, exit_code=3))
        first.start(run)
        wait_ended(cluster, first)  # over: the cluster still knows how it ended
        with incarnation(cluster) as second:
            adopted = second.adopt(run)
            assert adopted is (cluster.adopts != "none")
            if adopted:
                [ended] = wait_ended(cluster, second)
                assert (ended.workload_id, ended.attempt, ended.exit_code) == ("w1", 1, 3), ended
    finally:
        first.close()


def check_a_run_the_cluster_never_had_is_not_adopted(cluster: Cluster) -> None:
    """Adopting a run nothing started is refused (the agent reports it lost), and nothing ends;
    a simulated cluster plays every run the log says is running, so it adopts it."""
    with incarnation(cluster) as adapter:
        run = request(cluster, adapter, "never-started", cluster.spec())
        adopted = adapter.adopt(run)
        assert adopted is (cluster.adopts == "all")
        if adopted:
            adapter.stop("never-started", 1, grace_period_s=0)
            wait_ended(cluster, adapter)
        else:
            quiet(cluster, adapter, cluster.settle_s)


def check_a_spec_it_cannot_run_fails_the_run(cluster: Cluster) -> None:
    """A spec the cluster cannot run either raises out of ``start`` or ends the run, failed
    with the reason, by the next polls; either way the adapter goes on."""
    spec = cluster.unrunnable()
    if spec is None:
        return  # it runs every spec
    with incarnation(cluster) as adapter:
        try:
            adapter.start(request(cluster, adapter, "w1", spec))
        except Exception:
            pass  # the agent reports the run failed
        else:
            [ended] = wait_ended(cluster, adapter)
            assert (ended.workload_id, ended.attempt, ended.succeeded) == ("w1", 1, False)
            assert ended.message, ended
        adapter.start(request(cluster, adapter, "w2", cluster.spec(seconds=1), gpu=1))
        [ended] = wait_ended(cluster, adapter)
        assert (ended.workload_id, ended.exit_code) == ("w2", 0), ended


CASES: list[Callable[[Cluster], None]] = [
    check_nodes_are_offered_with_their_gpus,
    check_each_run_ends_once_with_its_exit_code,
    check_a_stop_ends_a_run_that_exits_on_sigterm,
    check_the_grace_period_bounds_a_stop,
    check_a_stop_right_after_the_start_ends_the_run,
    check_stops_of_runs_it_does_not_have_change_nothing,
    check_a_restart_adopts_a_run_that_still_runs,
    check_a_restart_reports_a_run_that_ended_meanwhile,
    check_a_run_the_cluster_never_had_is_not_adopted,
    check_a_spec_it_cannot_run_fails_the_run,
]
