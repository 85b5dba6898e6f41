"""A job array's one fact, as every fold reads it: N workloads through the one expansion
(``events.models.arrays.elements``), idempotent, never over a workload already there; charged
to the array's budget (a start naming its budget needs no fact of another partition); an
element's fact read before its array waits for it; and the array leaves memory with its last
element."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_type_hints

from events.envelope import Envelope, new_event
from events.models import (
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadArraySubmitted,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.arrays import ELEMENT_FIELDS, element_index, elements
from events.serde import encode_binary
from projections import checkpoint
from projections.cluster_state import ClusterState
from projections.ledger import Ledger
from projections.live_state import LiveState
from services.audit.explain import explain

T0 = 1_699_999_200.0
ON_N0 = Placement(nodes=(NodeGpus(node="n0", gpus=(0,)),))


def array(array_id: str = "A", indices: str = "0-9", **fields: Any) -> WorkloadArraySubmitted:
    values: dict[str, Any] = {
        "budget": "lab/a",
        "pools": ("p",),
        "gpus": 1,
        "min_runtime_s": 600,
        "submitter": "ana",
        "spec": {"command": ["train"]},
    }
    values.update(fields)
    return WorkloadArraySubmitted(array_id=array_id, indices=indices, **values)


def test_the_elements_carry_every_field_of_a_submission_but_its_id() -> None:
    submission = get_type_hints(WorkloadSubmitted, include_extras=True)
    of_array = get_type_hints(WorkloadArraySubmitted, include_extras=True)
    assert {name: submission[name] for name in ELEMENT_FIELDS} == {
        name: of_array[name] for name in ELEMENT_FIELDS
    }
    for name in ELEMENT_FIELDS:
        assert (
            WorkloadArraySubmitted.model_fields[name].default
            == WorkloadSubmitted.model_fields[name].default
        ), name
    [(index, element)] = list(elements(array(indices="7", priority=3, time_limit_s=7200)))
    assert index == 7
    assert element == WorkloadSubmitted(
        workload_id="A_7",
        budget="lab/a",
        pools=("p",),
        gpus=1,
        min_runtime_s=600,
        priority=3,
        submitter="ana",
        spec={"command": ["train"]},
        time_limit_s=7200,
    )


def test_a_10000_element_array_is_one_small_record() -> None:
    fact = array(indices="0-9999", max_running=50)
    record = encode_binary(new_event(fact, source="tests", time=datetime.now(UTC)))
    assert len(record.value) < 1000
    assert fact.count == 10_000
    assert element_index(fact, "A_9999") == 9999
    assert element_index(fact, "A_10000") is None
    assert element_index(fact, "A_07") is None
    assert element_index(fact, "B_7") is None


def test_the_fold_makes_each_element_a_workload_once() -> None:
    cluster = ClusterState()
    cluster.apply(
        WorkloadSubmitted(
            workload_id="A_3", budget="lab/b", pools=("p",), gpus=2, min_runtime_s=0, submitter="bo"
        ),
        T0,
    )
    fact = array()
    cluster.apply(fact, T0 + 1)
    cluster.apply(fact, T0 + 2)  # a duplicate changes nothing
    state = cluster.arrays["A"]
    assert state.elements == [f"A_{i}" for i in range(10) if i != 3]  # A_3 was taken
    assert (cluster.workloads["A_3"].budget, cluster.workloads["A_3"].array_id) == ("lab/b", None)
    element = cluster.workloads["A_5"]
    assert (element.array_id, element.array_index, element.submitted_at) == ("A", 5, T0 + 1)
    assert element.spec is cluster.workloads["A_6"].spec  # one spec for every element
    cluster.apply(
        WorkloadSubmitted(
            workload_id="A_5", budget="lab/b", pools=("p",), gpus=2, min_runtime_s=0, submitter="bo"
        ),
        T0 + 3,
    )
    assert cluster.workloads["A_5"].budget == "lab/a"  # the first fact stands


def test_the_array_leaves_memory_with_its_last_element() -> None:
    cluster = ClusterState()
    cluster.apply(NodeRegistered(node="n0", cluster="c", pool="p", gpus=1, gpu_type="h100"), T0)
    cluster.apply(array(indices="0-1", max_running=1), T0)
    for at, workload_id in ((T0 + 10, "A_0"), (T0 + 20, "A_1")):
        cluster.apply(
            WorkloadPlaced(
                workload_id=workload_id,
                attempt=1,
                pool="p",
                placement=ON_N0,
                allocated=True,
                command_id=f"place:{workload_id}:1",
            ),
            at,
        )
        cluster.apply(
            WorkloadFinished(workload_id=workload_id, attempt=1, outcome="succeeded"), at + 1
        )
    assert cluster.forget_ended_before(T0 + 15) == ["A_0"]
    assert "A" in cluster.arrays
    assert cluster.forget_ended_before(T0 + 30) == ["A_1"]
    assert "A" not in cluster.arrays
    assert "A" not in cluster.indexes.gates


def _event(data: Any, at: float) -> Envelope[Any]:
    return new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))


def test_an_element_placed_before_its_array_is_read_waits_for_it() -> None:
    state = LiveState()
    state.apply(
        _event(NodeRegistered(node="n0", cluster="c", pool="p", gpus=1, gpu_type="h100"), T0)
    )
    placed = WorkloadPlaced(
        workload_id="A_0",
        attempt=1,
        pool="p",
        placement=ON_N0,
        allocated=True,
        command_id="place:A_0:1",
    )
    assert not state.apply(_event(placed, T0 + 5))
    assert len(state.waiting) == 1
    assert state.apply(_event(array(), T0))
    assert state.waiting == []
    assert state.cluster.workloads["A_0"].status == "placed"


def test_elements_are_charged_to_the_array_budget() -> None:
    ledger = Ledger()
    started = WorkloadStarted(
        workload_id="A_2", attempt=1, pool="p", placement=ON_N0, allocated=True
    )
    assert ledger.apply(started, T0) == []  # held: no budget known yet
    ledger.apply(array(), T0 - 1)
    ledger.apply(WorkloadFinished(workload_id="A_2", attempt=1, outcome="succeeded"), T0 + 60)
    [charge] = ledger.entries
    assert (charge.workload_id, charge.budget, charge.gpu_seconds) == ("A_2", "lab/a", 60)


def test_a_start_naming_its_budget_is_charged_without_the_array() -> None:
    """A charging shard holds the element's partition, another shard the array's."""
    ledger = Ledger(owns=lambda workload_id: workload_id == "A_2")
    started = WorkloadStarted(
        workload_id="A_2", attempt=1, pool="p", placement=ON_N0, allocated=True, budget="lab/a"
    )
    ledger.apply(started, T0)
    ledger.apply(WorkloadFinished(workload_id="A_2", attempt=1, outcome="succeeded"), T0 + 60)
    [charge] = ledger.entries
    assert (charge.budget, charge.gpu_seconds) == ("lab/a", 60)
    assert ledger.held == {}


def test_explain_tells_an_element_s_story_from_its_array() -> None:
    placed = WorkloadPlaced(
        workload_id="A_3",
        attempt=1,
        pool="p",
        placement=ON_N0,
        allocated=True,
        command_id="place:A_3:1",
    )
    log = [_event(array(max_running=2), T0), _event(placed, T0 + 5)]
    lines = list(explain(log, "A_3"))
    assert (
        "submitted by ana to lab/a as element 3 of array A (indices 0-9, at most 2 at once)"
        in lines[0]
    )
    assert "placement recorded (attempt 1) in pool p" in lines[1]
    assert list(explain(log, "A_10")) == ["no event names 'A_10'"]


def test_a_checkpoint_keeps_the_array_its_gate_and_one_spec() -> None:
    state = LiveState()
    state.apply(_event(NodeRegistered(node="n0", cluster="c", pool="p", gpus=4, gpu_type="h"), T0))
    state.apply(_event(array(indices="0-99", max_running=3), T0))
    back = checkpoint.decode(checkpoint.encode(state, {("w", 0): 1}, "code"), "code").state
    assert back.cluster.arrays["A"].submitted == state.cluster.arrays["A"].submitted
    gate, restored = state.cluster.indexes.gates["A"], back.cluster.indexes.gates["A"]
    assert (list(restored.queued), list(restored.held)) == (list(gate.queued), list(gate.held))
    assert back.cluster.workloads["A_1"].spec is back.cluster.workloads["A_2"].spec
