"""GPUs held by work Fairshare did not place (design 2.8): the fact, the fold's rule (they come
off a node's free GPUs, never breaking a placement already made), the pass and why-pending
around them, what the Kubernetes and Slurm agents state, and the evict policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from events.models import ForeignHolder, NodeForeignGpus, WorkloadStarted
from projections.cluster_state import MissingClusterFactError
from projections.trust import AGENT, STATED_BY
from scheduling import why_pending as why
from scheduling.start_estimate import estimate_starts
from services.agents import SimulatedAdapter, simulated_nodes
from services.agents.kubernetes.agent import KubernetesAgent
from services.agents.kubernetes.pods import (
    PodView,
    foreign_gpus,
    foreign_holders,
    foreign_pods_by_node,
)
from services.agents.slurm.adapter import SlurmAdapter
from services.agents.slurm.agent import SlurmAgent
from tests.unit.scheduling_fixtures import CLUSTER, T0, Scenario, placed_ids, placements
from tests.unit.test_agents import CLUSTER as AGENT_CLUSTER
from tests.unit.test_agents import NODE0, NODE1, FakeClock, Harness, place, submit
from tests.unit.test_slurm_adapter import FakeSlurm


def foreign(node: str, gpus: int, *holders: tuple[str, int]) -> NodeForeignGpus:
    return NodeForeignGpus(
        node=node,
        cluster=CLUSTER,
        gpus=gpus,
        holders=tuple(ForeignHolder(name=n, gpus=g, scheduler="volcano") for n, g in holders),
    )


def recount(s: Scenario) -> None:
    """The pool's free-GPU index is what a recount of its schedulable nodes gives."""
    index = s.cluster.pools[s.pool]
    buckets = {f: sorted(names) for f, names in index.by_free.items() if names}
    expected: dict[int, list[str]] = {}
    for node in s.cluster.nodes.values():
        if node.schedulable:
            free = max(0, node.gpus - len(node.assigned) - node.foreign)
            assert node.free == free
            expected.setdefault(free, []).append(node.name)
    assert buckets == {f: sorted(n) for f, n in expected.items()}
    assert index.free_total == sum(f * len(n) for f, n in expected.items())


# -- the fact --------------------------------------------------------------------------------
def test_the_fact_is_the_agents_and_bounded() -> None:
    assert STATED_BY[NodeForeignGpus] == frozenset({AGENT})
    assert NodeForeignGpus.event_type == "fairshare.node.foreign_gpus.v1"
    with pytest.raises(ValidationError):
        NodeForeignGpus(node="n0", cluster="c", gpus=-1)
    with pytest.raises(ValidationError):
        NodeForeignGpus(
            node="n0",
            cluster="c",
            gpus=40,
            holders=tuple(ForeignHolder(name=f"ns/p{i}", gpus=1) for i in range(33)),
        )
    assert NodeForeignGpus(node="n0", cluster="c", gpus=0).holders == ()


# -- the fold --------------------------------------------------------------------------------
def test_foreign_gpus_come_off_the_free_ones_and_back() -> None:
    s = Scenario(nodes=(("n0", 8), ("n1", 4)))
    s.apply(foreign("n0", 5, ("ml/train-0", 5)), T0)
    n0 = s.cluster.nodes["n0"]
    assert (n0.free, n0.foreign, n0.foreign_since) == (3, 5, T0)
    assert n0.free_indices() == [0, 1, 2]
    assert n0.foreign_holders[0].name == "ml/train-0"
    assert s.cluster.pools[s.pool].best_fit(4) == "n1"
    assert s.cluster.pools[s.pool].best_fit(5) is None
    recount(s)
    s.apply(foreign("n0", 0), T0 + 60)
    assert (n0.free, n0.foreign, n0.foreign_since, n0.foreign_holders) == (8, 0, None, ())
    assert s.cluster.pools[s.pool].best_fit(5) == "n0"
    recount(s)


def test_a_count_above_the_node_is_its_size_and_an_unknown_node_waits() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.apply(foreign("n0", 9), T0)
    assert (s.cluster.nodes["n0"].foreign, s.cluster.nodes["n0"].free) == (4, 0)
    with pytest.raises(MissingClusterFactError):
        s.apply(foreign("nx", 1), T0)


def test_a_hold_over_assigned_gpus_breaks_nothing_and_only_later_placements_shrink() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("w1", "a", (("n0", (0, 1, 2)),), T0)
    s.apply(foreign("n0", 3, ("ml/p", 3)), T0 + 1)
    n0 = s.cluster.nodes["n0"]
    assert (n0.free, n0.room, n0.free_indices()) == (0, -2, [])
    assert s.cluster.workloads["w1"].status == "running"
    recount(s)
    # a placement decided before the fact was read still folds (the agent makes it wait)
    s.submit("w2", "a", gpus=1, at=T0 + 2)
    s.place("w2", (("n0", (3,)),), T0 + 3)
    assert s.cluster.workloads["w2"].status == "placed"
    recount(s)
    s.finished("w1", T0 + 10)
    assert n0.free == 0  # 4 - 1 assigned - 3 foreign
    s.finished("w2", T0 + 11)
    assert n0.free == 1
    recount(s)


def test_a_cordoned_node_with_foreign_gpus_comes_back_with_them_counted() -> None:
    from events.models import NodeCordoned, NodeUncordoned

    s = Scenario(nodes=(("n0", 4),))
    s.apply(NodeCordoned(node="n0", cordoned_by="admin"), T0)
    s.apply(foreign("n0", 3), T0 + 1)
    recount(s)
    s.apply(NodeUncordoned(node="n0", uncordoned_by="admin"), T0 + 2)
    assert s.cluster.pools[s.pool].by_free[1] == ["n0"]
    recount(s)


# -- the pass --------------------------------------------------------------------------------
def test_the_pass_does_not_place_onto_foreign_gpus() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.apply(foreign("n0", 4, ("ml/p", 4)), T0)
    s.submit("w1", "a", gpus=4, at=T0)
    s.submit("w2", "b", gpus=2, at=T0)
    result = s.run(T0 + 10)
    placed = placements(result)
    assert all(node != "n0" for spec in placed.values() for node, _g in spec)
    assert len(placed_ids(result)) == 1
    s.apply(foreign("n0", 2), T0 + 20)
    result = s.run(T0 + 30)
    assert placements(result) == {"w2": (("n0", (0, 1)),)}


def test_a_whole_node_gang_does_not_take_a_node_with_foreign_gpus() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4), ("n2", 4)))
    s.apply(foreign("n1", 1), T0)
    s.submit("gang", "a", gpus=8, at=T0, gang="whole-nodes")
    result = s.run(T0 + 10)
    assert sorted(n for n, _g in placements(result)["gang"]) == ["n0", "n2"]


def test_no_preemption_plans_onto_foreign_gpus() -> None:
    """A node whose GPUs less the foreign ones cannot hold the gang is no victim's node."""
    s = Scenario(nodes=(("n0", 4),))
    s.running("burst", "b", (("n0", (0,)),), T0 - 3600, min_runtime_s=0)
    s.apply(foreign("n0", 3), T0)
    s.submit("w", "a", gpus=2, at=T0)
    result = s.run(T0 + 10)
    assert placed_ids(result) == []
    assert s.cluster.workloads["burst"].status == "running"


def test_decisions_without_the_fact_are_unchanged_by_a_zero_one() -> None:
    """A node stated free of foreign work decides as one never stated."""

    def decide(with_fact: bool) -> dict[str, Any]:
        s = Scenario(nodes=(("n0", 4), ("n1", 8)))
        if with_fact:
            s.apply(foreign("n1", 0), T0 - 1)
        s.running("r", "a", (("n1", (0, 1, 2)),), T0 - 100)
        for i, gpus in enumerate((1, 2, 4, 3)):
            s.submit(f"w{i}", "ab"[i % 2], gpus=gpus, at=T0 + i)
        return placements(s.run(T0 + 10))

    assert decide(False) == decide(True)


def test_why_pending_says_how_many_gpus_foreign_work_holds() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.apply(foreign("n0", 3), T0)
    s.submit("w", "a", gpus=2, at=T0)
    offer = why.offer(s.cluster, s.pool, s.cluster.workloads["w"])
    assert (offer.fits_now, offer.free_gpus, offer.foreign_gpus) == (False, 1, 3)


def test_start_estimates_give_back_only_what_a_foreign_hold_leaves() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("r", "a", (("n0", (0, 1, 2)),), T0, time_limit_s=600)
    s.apply(foreign("n0", 2), T0 + 1)  # over one of r's GPUs
    s.submit("big", "a", gpus=3, at=T0 + 2)
    s.submit("small", "b", gpus=2, at=T0 + 2)
    found = estimate_starts(s.cluster, s.tree, s.usage_source, T0 + 10, to_limits=True)
    assert found["big"].at is None
    assert found["small"].at == pytest.approx(T0 + 600, abs=1)


# -- any interleaving ------------------------------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 8), st.sampled_from(["a", "b"])),
        st.tuples(st.just("end"), st.integers(0, 50), st.just("")),
        st.tuples(st.just("foreign"), st.integers(0, 2), st.integers(0, 8).map(str)),
        st.tuples(st.just("pass"), st.just(0), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_no_placement_takes_more_than_the_gpus_less_the_foreign_ones(
    ops: list[tuple[str, int, str]],
) -> None:
    s = Scenario(nodes=(("n0", 8), ("n1", 4), ("n2", 8)))
    now, count = T0, 0
    for op, value, extra in ops:
        now += 30
        if op == "submit":
            count += 1
            s.submit(f"w{count}", extra, gpus=value, min_runtime_s=0, at=now)
        elif op == "end":
            active = sorted(w for ids in s.cluster.active.values() for w in ids)
            if active:
                wid = active[value % len(active)]
                if s.cluster.workloads[wid].status == "placed":
                    s.start(wid, now)
                else:
                    s.finished(wid, now)
        elif op == "foreign":
            s.apply(foreign(f"n{value}", int(extra)), now)
        else:
            before = {n.name: (n.foreign, len(n.assigned)) for n in s.cluster.nodes.values()}
            result = s.run(now)
            taken: dict[str, int] = {}
            for spec in placements(result).values():
                for node, gpus in spec:
                    taken[node] = taken.get(node, 0) + len(gpus)
            for node, gpus in taken.items():
                held, assigned = before[node]
                size = s.cluster.nodes[node].gpus
                assert assigned + gpus <= max(assigned, size - held), (node, before[node], gpus)
        recount(s)


# -- the agents ------------------------------------------------------------------------------
class FakeKubernetes(SimulatedAdapter):
    """The simulated adapter with what the Kubernetes agent reads of foreign pods."""

    def __init__(self, clock: FakeClock, policy: str = "tolerate", grace_s: float = 60) -> None:
        super().__init__(simulated_nodes(AGENT_CLUSTER, 2, 4, "h100"), clock=clock)
        self.pods: list[PodView] = []
        self.foreign_gpu_policy = policy
        self.foreign_grace_s = grace_s
        self.cordon_in_kubernetes = False
        #: no native work here (tests/integration/test_kubernetes_native.py has it)
        self.scheduler_name = ""
        self.evicted: list[str] = []

    def healthy(self) -> bool:
        return True

    def node_views(self) -> dict[str, Any]:
        return {}

    def our_pods(self) -> list[Any]:
        return []

    def foreign_pods_by_node(self) -> dict[str, list[PodView]]:
        return foreign_pods_by_node(self.pods, AGENT_CLUSTER)

    def foreign_gpus(self, node: str) -> int:
        return foreign_gpus(self.pods, node, AGENT_CLUSTER)

    def foreign_holders(self, node: str) -> tuple[ForeignHolder, ...]:
        return foreign_holders(self.pods, node, AGENT_CLUSTER)

    def evict_foreign_pod(self, namespace: str, name: str) -> bool:
        self.evicted.append(f"{namespace}/{name}")
        self.pods = [p for p in self.pods if (p.namespace, p.name) != (namespace, name)]
        return True


def pod(name: str, node: str, gpus: int, phase: str = "Running") -> PodView:
    return PodView(name, "ml", node, phase, gpus=gpus, scheduler="volcano")


def kube(policy: str = "tolerate") -> tuple[Harness, FakeKubernetes]:
    clock = FakeClock()
    adapter = FakeKubernetes(clock, policy)
    return Harness(adapter, clock=clock, loop=KubernetesAgent), adapter


def test_the_kubernetes_agent_states_foreign_pods_when_they_change_only() -> None:
    h, k8s = kube()
    h.tick(1)
    assert h.facts(NodeForeignGpus) == []
    k8s.pods = [pod("train-0", NODE0, 3), pod("done", NODE0, 1, "Succeeded")]
    for _ in range(5):
        h.tick(10)
    facts = h.facts(NodeForeignGpus)
    assert len(facts) == 1, "stated on a change, not every round"
    assert (facts[0].node, facts[0].cluster, facts[0].gpus) == (NODE0, AGENT_CLUSTER, 3)
    assert [(x.name, x.gpus, x.scheduler) for x in facts[0].holders] == [
        ("ml/train-0", 3, "volcano")
    ]
    assert h.agent.state.cluster.nodes[NODE0].free == 1
    k8s.pods = []
    h.tick(10)
    k8s.pods = [pod("train-0", NODE0, 3)]
    h.tick(10)
    h.tick(10)
    assert [f.gpus for f in h.facts(NodeForeignGpus)] == [3, 0, 3], "a hold back is a new fact"
    assert k8s.evicted == []


def test_a_placement_onto_foreign_gpus_still_waits_in_the_agent() -> None:
    h, k8s = kube()
    k8s.pods = [pod("train-0", NODE0, 3)]
    h.tick(1)
    submit(h, "w1", gpus=2)
    place(h, "w1", node=NODE0, gpus=(0, 1))
    h.tick(1)
    assert h.facts(WorkloadStarted) == []


def test_the_evict_policy_deletes_foreign_pods_after_the_grace_only() -> None:
    h, k8s = kube("evict")
    k8s.pods = [pod("train-0", NODE0, 3), pod("cpu-only", NODE1, 0), pod("x", "elsewhere", 2)]
    h.tick(1)
    h.tick(30)
    assert k8s.evicted == []
    h.tick(31)
    assert k8s.evicted == ["ml/train-0"]
    assert h.agent.evicted_foreign == 1  # type: ignore[attr-defined]
    h.tick(1)
    assert [f.gpus for f in h.facts(NodeForeignGpus)] == [3, 0]


def test_the_slurm_agent_states_jobs_of_others_by_id() -> None:
    slurm = FakeSlurm()
    job = slurm.foreign(NODE0, 3)
    clock = FakeClock()
    adapter = SlurmAdapter(slurm, cluster=AGENT_CLUSTER, refresh_s=0.0, clock=clock)
    h = Harness(adapter, clock=clock, loop=SlurmAgent)
    h.tick(1)
    h.tick(10)
    facts = h.facts(NodeForeignGpus)
    assert [(f.node, f.gpus, [x.name for x in f.holders]) for f in facts] == [(NODE0, 3, [job])]
    slurm.end(job, 0)
    h.tick(1)
    assert [f.gpus for f in h.facts(NodeForeignGpus)] == [3, 0]


# -- where people look -----------------------------------------------------------------------
def api_world() -> Any:
    from tests.unit.test_api import T0 as API_T0
    from tests.unit.test_api import build_world

    w = build_world()
    holders = (("ml/p0", 1), ("ml/p1", 1))
    data = NodeForeignGpus(
        node="n2",
        cluster="c",
        gpus=2,
        holders=tuple(ForeignHolder(name=n, gpus=g, scheduler="volcano") for n, g in holders),
    )
    w.fact(data, API_T0)
    return w


def test_the_api_shows_foreign_gpus_per_node_and_in_why_pending() -> None:
    from tests.unit.test_api import ANA, BO

    w = api_world()
    nodes = {n["node"]: n for n in w.client.get("/nodes", headers=BO).json()["nodes"]}
    n2 = nodes["n2"]
    assert (n2["used_gpus"], n2["free_gpus"], n2["foreign_gpus"]) == (2, 0, 2)
    assert [(h["name"], h["gpus"], h["scheduler"]) for h in n2["foreign_holders"]] == [
        ("ml/p0", 1, "volcano"),
        ("ml/p1", 1, "volcano"),
    ]
    assert n2["foreign_since"] is not None
    assert (nodes["n1"]["foreign_gpus"], nodes["n1"]["foreign_holders"]) == (0, [])
    [entry] = w.client.get("/workloads/pa1/why", headers=ANA).json()["pending"]
    capacity = [r for r in entry["reasons"] if r["code"] == "insufficient-capacity"]
    assert capacity[0]["foreign_gpus"] == 2
    assert "2 GPU(s) held by work Fairshare did not place" in capacity[0]["message"]


def test_the_cli_shows_a_foreign_column() -> None:
    from tests.unit.test_client import run

    w = api_world()
    code, out, err = run(w, "nodes")
    assert code == 0, err
    assert "FOREIGN" in out
    line = next(row for row in out.splitlines() if row.lstrip().startswith("n2"))
    assert "2 (ml/p0 +1)" in line


def test_foreign_holders_are_unfinished_gpu_pods_of_others_by_name() -> None:
    from services.agents.kubernetes.adapter import needed_permissions

    pods = [
        pod("b", NODE0, 2),
        pod("a", NODE0, 1),
        pod("done", NODE0, 4, "Succeeded"),
        pod("cpu", NODE0, 0),
        pod("other-node", NODE1, 1),
    ]
    assert [(h.name, h.gpus) for h in foreign_holders(pods, NODE0, AGENT_CLUSTER)] == [
        ("ml/a", 1),
        ("ml/b", 2),
    ]
    by_node = foreign_pods_by_node(pods, AGENT_CLUSTER)
    assert {n: [p.name for p in listed] for n, listed in by_node.items()} == {
        NODE0: ["a", "b"],
        NODE1: ["other-node"],
    }
    many = [pod(f"p{i:02}", NODE0, 1) for i in range(40)]
    assert len(foreign_holders(many, NODE0, AGENT_CLUSTER)) == 32
    # without native work (which deletes pods in every namespace too), evict alone adds that
    tolerate = {str(p) for p in needed_permissions("runs", False, native=False)}
    evict = {str(p) for p in needed_permissions("runs", False, evict=True, native=False)}
    assert len(evict - tolerate) == 1
    [extra] = [
        p
        for p in needed_permissions("runs", False, True, native=False)
        if str(p) in evict - tolerate
    ]
    assert (extra.verb, extra.resource, extra.namespace) == ("delete", "pods", None)
