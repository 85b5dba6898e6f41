"""How folds refuse facts: an early fact (it depends on one not read yet) is a MissingFact by
type, so readers hold it for later; any other refusal is final. Readers used to guess which is
which from the error message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from events import new_event
from events.envelope import Envelope
from events.models import (
    BudgetCreated,
    BudgetWeightChanged,
    EventData,
    NodeCordoned,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadCancelled,
    WorkloadPlaced,
)
from projections.budget_tree import BudgetTree, BudgetTreeError
from projections.cluster_state import ClusterState, ClusterStateError
from projections.errors import FoldError, MissingFact
from projections.live_state import LiveState
from tests.factories import submitted

T0 = 1_800_000_000.0
NODE = NodeRegistered(node="n1", cluster="c", pool="p", gpus=2, gpu_type="x")


def placed(workload_id: str, *gpus: int) -> WorkloadPlaced:
    return WorkloadPlaced(
        workload_id=workload_id,
        attempt=1,
        pool="p",
        placement=Placement(nodes=(NodeGpus(node="n1", gpus=gpus),)),
        allocated=True,
        command_id=f"place:{workload_id}:1",
    )


def cluster_with_node() -> ClusterState:
    cluster = ClusterState()
    cluster.apply(NODE, T0)
    return cluster


@pytest.mark.parametrize(
    "early",
    [
        lambda: ClusterState().apply(NodeCordoned(node="ghost", cordoned_by="ops"), T0),
        lambda: ClusterState().apply(WorkloadCancelled(workload_id="w", cancelled_by="u"), T0),
        lambda: BudgetTree().apply(BudgetCreated(budget="lab/a", created_by="ana"), T0),
        lambda: BudgetTree().apply(
            BudgetWeightChanged(budget="lab", weight=2.0, changed_by="ana"), T0
        ),
    ],
    ids=["unknown node", "unknown workload", "parent budget missing", "unknown budget"],
)
def test_a_fact_about_something_not_created_yet_is_a_missing_fact(early: Any) -> None:
    with pytest.raises(MissingFact):
        early()


def test_gpus_still_held_by_a_run_whose_end_is_not_read_yet_are_a_missing_fact() -> None:
    cluster = cluster_with_node()
    for workload_id in ("a", "b"):
        cluster.apply(submitted(workload_id, budget="lab/a", pools=("p",), gpus=2), T0)
    cluster.apply(placed("a", 0, 1), T0 + 1)
    with pytest.raises(MissingFact, match="already assigned"):
        cluster.apply(placed("b", 0, 1), T0 + 2)


def test_a_fact_that_can_never_apply_is_a_fold_error_but_not_a_missing_fact() -> None:
    tree = BudgetTree()
    tree.apply(BudgetCreated(budget="lab", created_by="ana"), T0)
    with pytest.raises(BudgetTreeError) as budget_error:
        tree.apply(BudgetCreated(budget="lab", created_by="ana"), T0 + 1)
    cluster = cluster_with_node()
    with pytest.raises(ClusterStateError) as node_error:
        cluster.apply(NODE.model_copy(update={"gpus": 8}), T0 + 1)
    for error in (budget_error.value, node_error.value):
        assert isinstance(error, FoldError)
        assert not isinstance(error, MissingFact)


def ev(data: EventData, at: float) -> Envelope[Any]:
    return new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))


def test_live_state_holds_an_early_fact_and_rejects_a_final_refusal_at_once() -> None:
    state = LiveState()
    early = ev(BudgetCreated(budget="lab/a", created_by="ana"), T0)
    assert not state.apply(early)
    assert state.waiting == [early]
    assert state.rejected == []

    state.apply(ev(NODE, T0))
    clash = ev(NODE.model_copy(update={"pool": "q"}), T0 + 1)
    assert not state.apply(clash)
    assert clash not in state.waiting
    assert [r.event_id for r in state.rejected] == [clash.id]
