"""Properties of the scheduling core over random small clusters and workload streams.

Each example drives several passes the way the simulator does: between passes a tiny agent
starts placed work once its GPUs are physically free, stops preempted work after the grace
period and finishes work after its duration; nodes are cordoned, uncordoned, go down and come
back, and submitters cancel work. The invariants of docs/design.md section 2 are checked after every
pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.models import (
    EventData,
    NodeCordoned,
    NodeDown,
    NodeUncordoned,
    NodeUp,
    PlaceCommand,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadSubmitted,
)
from projections.budget_tree import ROOT, parent_of
from projections.cluster_state import ClusterState
from projections.usage_window import UsageWindow
from scheduling.debug_lane import DebugLane
from scheduling.fairshare_order import FairShareOrder
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import PassContext, PassResult, run_pass
from tests.unit.scheduling_fixtures import (
    POOL,
    T0,
    Agent,
    Scenario,
    gpu_claims,
    make_tree,
    placed_ids,
    roundtrip,
    snapshot,
)

BUDGETS = (("x", 1.0), ("x/x1", 1.0), ("x/x2", 1.0), ("y", 1.0))
LEAVES = ("x/x1", "x/x2", "y")
GRACE = 30
PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass(frozen=True)
class Job:
    budget: str
    gpus: int
    min_runtime_s: int
    resumable: bool
    priority: int
    duration: float
    whole_nodes: bool


@dataclass(frozen=True)
class World:
    nodes: tuple[int, ...]
    weights: tuple[float, ...]
    #: Per step: seconds since the previous step, arrivals, and operations.
    steps: tuple[tuple[int, tuple[Job, ...], tuple[tuple[str, int], ...]], ...]
    initial_usage: tuple[float, ...]


jobs = st.builds(
    Job,
    budget=st.sampled_from(LEAVES),
    gpus=st.integers(1, 5),
    min_runtime_s=st.sampled_from([0, 0, 120, 600, 1800]),
    resumable=st.booleans(),
    priority=st.integers(-1, 1),
    duration=st.sampled_from([60.0, 400.0, 1500.0, 5000.0]),
    whole_nodes=st.booleans(),
)
operations = st.tuples(
    st.sampled_from(["cordon", "uncordon", "down", "up", "cancel"]), st.integers(0, 20)
)


@st.composite
def worlds(draw: st.DrawFn, job_strategy: st.SearchStrategy[Job] = jobs) -> World:
    nodes = tuple(draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3)))
    weights = tuple(draw(st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=4, max_size=4)))
    steps = tuple(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from([10, 30, 200, 700]),
                    st.lists(job_strategy, max_size=4).map(tuple),
                    st.one_of(
                        st.just(()), st.just(()), st.just(()), operations.map(lambda o: (o,))
                    ),
                ),
                min_size=4,
                max_size=12,
            )
        )
    )
    usage = tuple(
        draw(st.lists(st.sampled_from([0.0, 0.0, 5_000.0, 50_000.0]), min_size=3, max_size=3))
    )
    return World(nodes, weights, steps, usage)


@dataclass
class Observed:
    cluster: ClusterState
    now: float
    result: PassResult
    #: What the passes so far kept (as the scheduler keeps them between passes).
    memos: PassMemos


Check = Callable[[Observed], None]


@dataclass
class Trace:
    passes: list[tuple[float, list[EventData], list[EventData]]] = field(default_factory=list)


Interval = tuple[str, str, int, float, float, bool]


def _usage_source(
    window: UsageWindow, base: dict[str, float], open_now: list[Interval], now: float
) -> Callable[[str], dict[str, float]]:
    """Windowed usage plus the occupancy of runs still going, as the simulator reports it."""

    def usage(pool: str) -> dict[str, float]:
        totals = dict(base)
        for budget, used in window.allocated_by_budget(pool, now).items():
            totals[budget] = totals.get(budget, 0.0) + used
        for p, budget, gpus, start, end, allocated in open_now:
            if p == pool and allocated:
                totals[budget] = totals.get(budget, 0.0) + gpus * (end - start)
        return totals

    return usage


def simulate(world: World, checks: tuple[Check, ...] = ()) -> Trace:
    budgets = tuple((path, w) for (path, _), w in zip(BUDGETS, world.weights, strict=True))
    s = Scenario(
        budgets=budgets,
        nodes=tuple((f"n{i}", gpus) for i, gpus in enumerate(world.nodes)),
    )
    agent = Agent(s.cluster, {})
    window = UsageWindow()
    posted = 0
    base = dict(zip(LEAVES, world.initial_usage, strict=True))
    node_names = [f"n{i}" for i in range(len(world.nodes))]
    trace = Trace()
    now = T0
    submitted: list[str] = []
    for step, (dt, arrivals, ops) in enumerate(world.steps):
        now += dt
        agent.advance(now, s.apply)
        for k, job in enumerate(arrivals):
            workload_id = f"w{step}-{k}"
            agent.remaining[workload_id] = job.duration
            s.apply(
                WorkloadSubmitted(
                    workload_id=workload_id,
                    budget=job.budget,
                    pools=(POOL,),
                    gpus=job.gpus,
                    gang="whole-nodes" if job.whole_nodes else "single-node",
                    min_runtime_s=job.min_runtime_s,
                    resumable=job.resumable,
                    priority=job.priority,
                    submitter="prop",
                ),
                now,
            )
            submitted.append(workload_id)
        for kind, target in ops:
            node = node_names[target % len(node_names)]
            if kind == "cordon":
                s.apply(NodeCordoned(node=node, cordoned_by="ops"), now)
            elif kind == "uncordon":
                s.apply(NodeUncordoned(node=node, uncordoned_by="ops"), now)
            elif kind == "down":
                s.apply(NodeDown(node=node), now)
            elif kind == "up":
                s.apply(NodeUp(node=node), now)
            elif submitted:
                s.apply(
                    WorkloadCancelled(
                        workload_id=submitted[target % len(submitted)], cancelled_by="prop"
                    ),
                    now,
                )
        for pool, budget, gpus, start, end, allocated in agent.intervals[posted:]:
            window.add_interval(pool, budget, gpus, start, end, allocated)
        posted = len(agent.intervals)
        usage = _usage_source(window, base, agent.open_usage(now), now)
        ctx = PassContext(now=now, pass_id=step + 1, grace_period_s=GRACE)
        result = run_pass(s.cluster, s.tree, usage, ctx, s.memos)
        trace.passes.append((now, list(result.events), list(result.commands)))
        for check in checks:
            check(Observed(s.cluster, now, result, s.memos))
        agent.act(result, now)
    return trace


# -- the checks ------------------------------------------------------------------------------------
def no_gpu_over_committed(seen: Observed) -> None:
    cluster = seen.cluster
    for node in cluster.nodes.values():
        assert len(node.assigned) <= node.gpus, node.name
        assert all(0 <= gpu < node.gpus for gpu in node.assigned), node.name
        for gpu, holder in node.assigned.items():
            workload = cluster.workloads[holder]
            assert workload.status in ("placed", "running"), (node.name, gpu, holder)
            assert not workload.preempting, (node.name, gpu, holder)
            assert gpu in dict(workload.placement)[node.name], (node.name, gpu, holder)
    for (node_name, gpu), claimants in gpu_claims(cluster).items():
        live = [w for w in claimants if not cluster.workloads[w].preempting]
        running = [w for w in claimants if cluster.workloads[w].status == "running"]
        assert len(live) <= 1, (node_name, gpu, claimants)
        assert len(running) <= 1, (node_name, gpu, claimants)
        if len(claimants) > 1:
            # Only a preemptor (or work placed on a cancelled run's GPUs) waits on a stopping run.
            assert all(cluster.workloads[w].status == "placed" for w in live), claimants


def placements_are_well_formed(seen: Observed) -> None:
    for command in seen.result.commands:
        if not isinstance(command, PlaceCommand):
            continue
        workload = seen.cluster.workloads[command.workload_id]
        assert command.placement.gpu_count == workload.gpus
        node_size = max(n.gpus for n in seen.cluster.nodes.values())
        if workload.gang == "single-node" and workload.gpus <= node_size:
            assert len(command.placement.nodes) == 1
        for part in command.placement.nodes:
            node = seen.cluster.nodes[part.node]
            assert node.schedulable, f"placed {command.workload_id} on {part.node}"
            assert max(part.gpus) < node.gpus


def contracts_are_kept(seen: Observed) -> None:
    for command in seen.result.commands:
        if not isinstance(command, PreemptCommand) or command.decision.reason == "cancel":
            continue
        victim = seen.cluster.workloads[command.workload_id]
        assert victim.attempt == command.attempt
        if victim.allocated:
            assert victim.started_at is not None, command.workload_id
            ran = seen.now - victim.started_at
            assert ran >= victim.min_runtime_s, (command.workload_id, ran, victim.min_runtime_s)


def only_allocated_work_preempts(seen: Observed) -> None:
    for command in seen.result.commands:
        if isinstance(command, PreemptCommand) and command.decision.reason == "preempt-for":
            preemptor = seen.cluster.workloads[command.decision.preemptor or ""]
            victim = seen.cluster.workloads[command.workload_id]
            assert preemptor.allocated, command.decision.preemptor
            if victim.allocated and preemptor.budget == victim.budget:
                # A budget's own burst work is fair game; its own allocated work only to the
                # debug lane (its debug work goes before its own runs past their contracts).
                assert DebugLane().admits(preemptor), command.workload_id
                assert "debug lane" in command.decision.detail, command.workload_id


def decisions_are_valid_events(seen: Observed) -> None:
    for event in seen.result.all():
        assert roundtrip(event, seen.now) == event
    for command in seen.result.commands:
        assert isinstance(command, PlaceCommand | PreemptCommand)
        assert command.decision.pass_id >= 1
        if isinstance(command, PreemptCommand):
            assert (command.decision.reason == "preempt-for") == (
                command.decision.preemptor is not None
            )


def replaying_the_decisions_changes_nothing(seen: Observed) -> None:
    before = snapshot(seen.cluster)
    for event in seen.result.all():
        seen.cluster.apply(event, seen.now)
    assert snapshot(seen.cluster) == before


# -- the properties --------------------------------------------------------------------------------
@PROPERTY_SETTINGS
@given(worlds())
def test_no_gpu_is_ever_over_committed(world: World) -> None:
    simulate(world, (no_gpu_over_committed, placements_are_well_formed))


@PROPERTY_SETTINGS
@given(worlds())
def test_allocated_work_is_never_preempted_inside_its_contract(world: World) -> None:
    simulate(world, (contracts_are_kept,))


@PROPERTY_SETTINGS
@given(worlds())
def test_unallocated_work_never_preempts(world: World) -> None:
    simulate(world, (only_allocated_work_preempts,))


@PROPERTY_SETTINGS
@given(worlds())
def test_every_decision_is_a_valid_event(world: World) -> None:
    simulate(world, (decisions_are_valid_events,))


@PROPERTY_SETTINGS
@given(worlds())
def test_applying_every_emitted_event_again_changes_nothing(world: World) -> None:
    simulate(world, (replaying_the_decisions_changes_nothing,))


@settings(PROPERTY_SETTINGS, max_examples=40)
@given(worlds())
def test_identical_inputs_yield_identical_decisions(world: World) -> None:
    first = simulate(world)
    second = simulate(world)
    assert first.passes == second.passes


# -- fair-share order ------------------------------------------------------------------------------
TREE_PATHS = ("a", "a/a1", "a/a2", "a/a2/z", "b", "b/b1", "b/b2", "c")
TREE_LEAVES = ("a/a1", "a/a2/z", "b/b1", "b/b2", "c")


def _subtree_usage(usage: dict[str, float], path: str) -> float:
    return sum(u for leaf, u in usage.items() if leaf == path or leaf.startswith(path + "/"))


def _siblings(path: str) -> list[str]:
    parent = parent_of(path)
    return [p for p in TREE_PATHS if parent_of(p) == parent and p != path]


leaf_usage = st.fixed_dictionaries(
    {leaf: st.sampled_from([0.0, 0.0, 1.0, 3_600.0, 100_000.0]) for leaf in TREE_LEAVES}
)
tree_weights = st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=8, max_size=8)


@settings(max_examples=100, deadline=None, database=None)
@given(usage=leaf_usage, weights=tree_weights)
def test_a_budget_with_no_usage_ranks_before_every_sibling_with_usage(
    usage: dict[str, float], weights: list[float]
) -> None:
    tree = make_tree(zip(TREE_PATHS, weights, strict=True))
    order = FairShareOrder(tree, POOL, T0, usage, capacity=8, window_s=7 * 24 * 3600)
    leaves = order.leaf_order()
    assert sorted(leaves) == sorted(TREE_LEAVES)
    position = {leaf: i for i, leaf in enumerate(leaves)}
    for path in TREE_PATHS:
        if _subtree_usage(usage, path) > 0:
            continue
        mine = [
            position[leaf] for leaf in TREE_LEAVES if leaf == path or leaf.startswith(path + "/")
        ]
        for sibling in _siblings(path):
            if _subtree_usage(usage, sibling) > 0:
                theirs = [
                    position[leaf]
                    for leaf in TREE_LEAVES
                    if leaf == sibling or leaf.startswith(sibling + "/")
                ]
                assert max(mine) < min(theirs), (path, sibling, leaves)


@settings(max_examples=100, deadline=None, database=None)
@given(usage=leaf_usage, weights=tree_weights, free=st.integers(1, 3))
def test_a_pass_serves_unused_budgets_first_at_every_level(
    usage: dict[str, float], weights: list[float], free: int
) -> None:
    """With one pending 1-GPU job per leaf and fewer free GPUs than leaves, the first placement
    descends through budgets without usage wherever a level has one."""
    s = Scenario(budgets=tuple(zip(TREE_PATHS, weights, strict=True)), nodes=(("n0", free),))
    for i, leaf in enumerate(reversed(TREE_LEAVES)):
        s.submit(f"job-{i}", leaf, at=T0 + i)
    s.set_usage(usage)
    placed = placed_ids(s.run(T0 + 100))
    assert len(placed) == free
    first = s.cluster.workloads[placed[0]].budget
    path = ROOT
    for step in tree_ancestors(first):
        level = [p for p in TREE_PATHS if parent_of(p) == path]
        if any(_subtree_usage(usage, p) == 0 for p in level):
            assert _subtree_usage(usage, step) == 0, (first, step, usage)
        path = step


def tree_ancestors(leaf: str) -> list[str]:
    parts = leaf.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
