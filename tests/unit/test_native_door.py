"""The door of native work (services/agents/native_door.py), whatever the family: an in-memory
family records what the door asks of it, and a host folds what the door publishes into its
live state as the bus would. Submitting (once, with the binding's budget; refusing problems,
unbound groups and non-members, each reason told once), cancelling work whose object is
gone, handing requeued work back, and telling decisions and why-pending once each."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from events.envelope import Envelope, derived_event_id, new_event
from events.models import (
    BudgetCreated,
    EventData,
    GroupBound,
    MembershipGranted,
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.budgets import SLURM_ACCOUNT
from events.models.commands import DecisionRecord
from events.native_work import NATIVE_KEY
from projections.cluster_types import WorkloadState
from projections.live_state import FORGET_AFTER_S, LiveState
from services.agents.native_door import WAITING_S, NativeDoor, NativeWork, Notice, Waiting

T0 = 1_800_000_000.0
CLUSTER = "hpc"
POOL = "gpu"


def _envelope(data: EventData, at: float, event_id: str | None = None) -> Envelope[Any]:
    return new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC), event_id=event_id)


@dataclass
class Host:
    """What the door needs of its agent: a live state, and a publisher that folds what it
    publishes (``deliver``) or keeps it in flight until :meth:`flush`."""

    state: LiveState = field(default_factory=LiveState)
    cluster: str = CLUSTER
    pool: str = POOL
    in_flight: set[str] = field(default_factory=set)
    deliver: bool = True
    #: Whether the publisher takes what it is given.
    takes: bool = True
    published: list[tuple[str, EventData, float, str]] = field(default_factory=list)
    _held: list[Envelope[Any]] = field(default_factory=list)

    def publish_fact(self, kind: str, data: EventData, at: float, event_id: str) -> bool:
        if not self.takes:
            return False
        self.published.append((kind, data, at, event_id))
        envelope = _envelope(data, at, event_id)
        if self.deliver:
            assert self.state.apply(envelope), self.state.rejected[-1:]
        else:
            self.in_flight.add(event_id)
            self._held.append(envelope)
        return True

    def flush(self) -> None:
        held, self._held = self._held, []
        for envelope in held:
            assert self.state.apply(envelope), self.state.rejected[-1:]
            self.in_flight.discard(envelope.id)

    def fold(self, data: EventData, at: float = T0) -> None:
        assert self.state.apply(_envelope(data, at)), self.state.rejected[-1:]

    def facts(self, kind: type[EventData]) -> list[Any]:
        return [data for _, data, _, _ in self.published if isinstance(data, kind)]


@dataclass
class Family:
    """A family of native work held in memory, recording every call of the door."""

    work: list[NativeWork] = field(default_factory=list)
    #: Why each workload (by id) is to be cancelled.
    gone_reasons: dict[str, str] = field(default_factory=dict)
    #: What ``tell`` answers.
    told_result: bool | None = True
    sizes: list[list[int]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    told: list[tuple[str, Notice]] = field(default_factory=list)
    waiting: list[tuple[str, Waiting | None]] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    asked_gone: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)

    def native_work(self, node_sizes: Any) -> list[NativeWork]:
        self.sizes.append(list(node_sizes))
        return list(self.work)

    def gone(self, workload: WorkloadState) -> str | None:
        self.asked_gone.append(workload.workload_id)
        return self.gone_reasons.get(workload.workload_id)

    def queued_again(self, workload: WorkloadState) -> None:
        self.requeued.append(workload.workload_id)

    def settle(self, workload: WorkloadState) -> bool:
        """As a cluster cancels the object: it is no longer native work there."""
        self.settled.append(workload.workload_id)
        self.work = [w for w in self.work if w.workload_id != workload.workload_id]
        return True

    def refuse(self, work: NativeWork, reason: str) -> None:
        self.refused.append((work.workload_id, reason))

    def tell(self, workload: WorkloadState, notice: Notice) -> bool | None:
        self.told.append((workload.workload_id, notice))
        return self.told_result

    def show_waiting(self, workload: WorkloadState, waiting: Waiting | None) -> bool:
        self.waiting.append((workload.workload_id, waiting))
        return True

    def reasons(self, workload_id: str) -> list[str]:
        return [notice.reason for wid, notice in self.told if wid == workload_id]

    def seen(self) -> set[str]:
        return (
            {wid for wid, _ in self.told}
            | {wid for wid, _ in self.waiting}
            | set(self.requeued)
            | set(self.asked_gone)
        )


def work(job: str = "1046", group: str = "vision", **overrides: Any) -> NativeWork:
    fields: dict[str, Any] = {
        "workload_id": f"native.{job}",
        "group_kind": SLURM_ACCOUNT,
        "group": group,
        "budget_label": None,
        "gpus": 2,
        "gang": "single-node",
        "min_runtime_s": 600,
        "time_limit_s": 1800,
        "resumable": True,
        "submitter": "ana",
        "name": f"job {job}",
        "origin": {"cluster": CLUSTER, "kind": "TestJob", "job_id": job},
    }
    fields.update(overrides)
    return NativeWork(**fields)


def _bound(budget: str, group: str, cluster: str = CLUSTER) -> GroupBound:
    return GroupBound(
        budget=budget, cluster=cluster, kind=SLURM_ACCOUNT, group=group, default=True,
        bound_by="chen",
    )  # fmt: skip


def world() -> tuple[Host, Family, NativeDoor]:
    """Budgets lab/vision and lab/audio (chen manages lab, bo is a member of lab/vision),
    account vision of hpc bound to lab/vision, and nodes: n0 (8 GPUs) and n1 (4) in hpc's pool
    gpu, and others elsewhere."""
    host, family = Host(), Family()
    for data in (
        BudgetCreated(budget="lab", created_by="admin"),
        BudgetCreated(budget="lab/vision", created_by="admin"),
        BudgetCreated(budget="lab/audio", created_by="admin"),
        MembershipGranted(budget="lab", user="chen", role="manager", granted_by="admin"),
        MembershipGranted(budget="lab/vision", user="bo", role="member", granted_by="chen"),
        _bound("lab/vision", "vision"),
        _bound("lab/audio", "vision", cluster="other"),  # another cluster's account vision
        NodeRegistered(node="n0", cluster=CLUSTER, pool=POOL, gpus=8, gpu_type="h100"),
        NodeRegistered(node="n1", cluster=CLUSTER, pool=POOL, gpus=4, gpu_type="h100"),
        NodeRegistered(node="c0", cluster=CLUSTER, pool="cpu", gpus=2, gpu_type="t4"),
        NodeRegistered(node="m0", cluster="other", pool="big", gpus=16, gpu_type="h100"),
    ):
        host.fold(data)
    return host, family, NativeDoor(host, family)


def submitted_ids(host: Host) -> list[str]:
    return [data.workload_id for data in host.facts(WorkloadSubmitted)]


# -- submitting ----------------------------------------------------------------------------------
def test_a_bound_groups_work_is_submitted_once_with_the_bindings_budget() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    assert family.sizes[0] == [8, 4]  # this cluster's nodes of this pool only
    [(kind, data, at, event_id)] = host.published
    assert (kind, at) == ("submitted", T0 + 1)
    assert event_id == derived_event_id("agent", "submitted", "native.1046")
    assert isinstance(data, WorkloadSubmitted)
    assert data.workload_id == "native.1046"
    assert data.budget == "lab/vision"
    assert data.pools == (POOL,)
    assert (data.gpus, data.gang, data.min_runtime_s, data.time_limit_s) == (
        2,
        "single-node",
        600,
        1800,
    )
    assert data.resumable
    assert data.submitter == "ana"
    assert data.spec == {
        "name": "job 1046",
        NATIVE_KEY: {"cluster": CLUSTER, "kind": "TestJob", "job_id": "1046"},
    }
    assert host.state.cluster.workloads["native.1046"].status == "pending"
    assert door.submitted == 1
    for later in (2, 3, 4):
        door.step(T0 + later)
    assert len(host.facts(WorkloadSubmitted)) == 1
    assert door.submitted == 1
    assert family.refused == []


def test_work_in_flight_is_not_submitted_again() -> None:
    host, family, door = world()
    host.deliver = False
    family.work = [work()]
    door.step(T0 + 1)
    door.step(T0 + 2)
    assert submitted_ids(host) == ["native.1046"]
    host.flush()
    door.step(T0 + 3)
    assert submitted_ids(host) == ["native.1046"]
    assert door.submitted == 1


def test_a_submission_the_publisher_did_not_take_is_tried_again() -> None:
    host, family, door = world()
    host.takes = False
    family.work = [work()]
    door.step(T0 + 1)
    assert host.published == []
    assert door.submitted == 0
    host.takes = True
    door.step(T0 + 2)
    assert submitted_ids(host) == ["native.1046"]
    assert door.submitted == 1


def test_a_label_names_one_of_the_groups_budgets() -> None:
    host, family, door = world()
    host.fold(
        GroupBound(
            budget="lab/audio", cluster=CLUSTER, kind=SLURM_ACCOUNT, group="vision",
            default=False, bound_by="chen",
        )
    )  # fmt: skip
    family.work = [work("1", budget_label="lab/audio"), work("2", budget_label="lab.audio")]
    door.step(T0 + 1)
    assert [data.budget for data in host.facts(WorkloadSubmitted)] == ["lab/audio", "lab/audio"]


def test_work_with_problems_is_refused_once_per_reason_and_never_submitted() -> None:
    host, family, door = world()
    family.work = [work(problems=("it asks for no GPUs", "it names no account"))]
    for at in (1, 2, 3):
        door.step(T0 + at)
    assert family.refused == [("native.1046", "it asks for no GPUs; it names no account")]
    assert door.refused == {"native.1046": "it asks for no GPUs; it names no account"}
    assert host.published == []
    # another reason is told again, once
    family.work = [work(problems=("it names no account",))]
    door.step(T0 + 4)
    door.step(T0 + 5)
    assert family.refused[1:] == [("native.1046", "it names no account")]
    assert host.published == []


def test_an_unbound_groups_work_is_refused_naming_the_fix_until_it_is_bound() -> None:
    host, family, door = world()
    family.work = [work(group="audio")]
    door.step(T0 + 1)
    door.step(T0 + 2)
    [(workload_id, reason)] = family.refused
    assert workload_id == "native.1046"
    assert "'audio'" in reason
    assert "'hpc'" in reason
    assert "bound to no budget" in reason
    assert "fairshare budgets bind-account" in reason
    assert host.published == []
    # a binding stated later lets it in on the next step
    host.fold(_bound("lab/audio", "audio"), T0 + 3)
    door.step(T0 + 4)
    [data] = host.facts(WorkloadSubmitted)
    assert data.budget == "lab/audio"
    assert door.refused == {}
    assert len(family.refused) == 1


def test_an_account_bound_on_another_cluster_only_is_unbound_here() -> None:
    host, family, door = world()
    host.fold(_bound("lab/audio", "speech", cluster="other"))
    family.work = [work(group="speech")]
    door.step(T0 + 1)
    assert host.published == []
    [(_, reason)] = family.refused
    assert "'speech' of cluster 'hpc' is bound to no budget" in reason


@pytest.mark.parametrize(
    ("member", "admitted"),
    [("ana", False), ("bo", True), ("chen", True)],
    ids=["not-a-member", "member", "manager-above"],
)
def test_a_member_to_check_must_belong_to_the_budget(member: str, admitted: bool) -> None:
    host, family, door = world()
    family.work = [work(member=member)]
    door.step(T0 + 1)
    door.step(T0 + 2)
    if admitted:
        assert submitted_ids(host) == ["native.1046"]
        assert family.refused == []
    else:
        assert host.published == []
        [(_, reason)] = family.refused
        assert reason == (
            "ana is not a member of lab/vision (nor of any budget above it), which its "
            "account charges"
        )


def test_a_membership_granted_later_lets_refused_work_in() -> None:
    host, family, door = world()
    family.work = [work(member="ana")]
    door.step(T0 + 1)
    assert host.published == []
    host.fold(
        MembershipGranted(budget="lab/vision", user="ana", role="member", granted_by="chen"),
        T0 + 2,
    )
    door.step(T0 + 3)
    assert submitted_ids(host) == ["native.1046"]
    assert door.refused == {}


# -- cancelling ----------------------------------------------------------------------------------
def test_work_whose_object_is_gone_is_cancelled_once_by_its_submitter() -> None:
    host, family, door = world()
    family.work = [work(), work("1047")]
    door.step(T0 + 1)
    family.gone_reasons["native.1046"] = "job 1046 was deleted"
    door.step(T0 + 2)
    [cancel] = host.facts(WorkloadCancelled)
    assert cancel.workload_id == "native.1046"
    assert cancel.cancelled_by == "ana"
    assert cancel.reason == "job 1046 was deleted"
    assert host.published[-1][3] == derived_event_id("agent", "cancelled", "native.1046")
    assert door.cancelled == 1
    assert host.state.cluster.workloads["native.1046"].status == "cancelled"
    assert host.state.cluster.workloads["native.1047"].status == "pending"
    door.step(T0 + 3)
    door.step(T0 + 4)
    assert len(host.facts(WorkloadCancelled)) == 1
    assert door.cancelled == 1


def test_a_cancellation_in_flight_is_not_published_twice() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    host.deliver = False
    family.gone_reasons["native.1046"] = "deleted"
    door.step(T0 + 2)
    door.step(T0 + 3)
    assert len(host.facts(WorkloadCancelled)) == 1
    host.flush()
    door.step(T0 + 4)
    assert len(host.facts(WorkloadCancelled)) == 1


def test_a_long_reason_is_cut_to_what_a_cancellation_holds() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    family.gone_reasons["native.1046"] = "x" * 2000
    door.step(T0 + 2)
    [cancel] = host.facts(WorkloadCancelled)
    assert cancel.reason == "x" * 500


# -- a run, told ---------------------------------------------------------------------------------
WID = "native.1046"
PLACEMENT = Placement(nodes=(NodeGpus(node="n0", gpus=(0, 1)),))


def _decision(reason: Any) -> DecisionRecord:
    return DecisionRecord(pass_id=1, input_position=(), reason=reason)


def place(host: Host, attempt: int, at: float) -> None:
    command_id = f"place:{WID}:{attempt}"
    host.fold(
        PlaceCommand(
            command_id=command_id, cluster=CLUSTER, pool=POOL, workload_id=WID,
            attempt=attempt, budget="lab/vision", placement=PLACEMENT, allocated=True,
            min_runtime_s=600, decision=_decision("fairshare"),
        ),
        at,
    )  # fmt: skip
    host.fold(
        WorkloadPlaced(
            workload_id=WID, attempt=attempt, pool=POOL, placement=PLACEMENT, allocated=True,
            command_id=command_id,
        ),
        at,
    )  # fmt: skip


def start(host: Host, attempt: int, at: float) -> None:
    host.fold(
        WorkloadStarted(
            workload_id=WID, attempt=attempt, pool=POOL, placement=PLACEMENT, allocated=True
        ),
        at,
    )


def preempt_and_requeue(host: Host, attempt: int, at: float) -> None:
    command_id = f"preempt:{WID}:{attempt}"
    host.fold(
        PreemptCommand(
            command_id=command_id, cluster=CLUSTER, pool=POOL, workload_id=WID,
            attempt=attempt, requeue=True, decision=_decision("drain"),
        ),
        at,
    )  # fmt: skip
    host.fold(
        WorkloadPreempted(workload_id=WID, attempt=attempt, command_id=command_id, ran_s=60),
        at,
    )


def requeue(host: Host, attempt: int, at: float) -> None:
    host.fold(
        WorkloadRequeued(
            workload_id=WID,
            attempt=attempt,
            original_submit_time=datetime.fromtimestamp(T0 + 1, UTC),
            reason="preempted",
        ),
        at,
    )


def test_each_decision_is_told_once_per_status_and_attempt() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    door.step(T0 + 2)
    queued = [n for wid, n in family.told if n.reason == "Queued"]
    assert len(queued) == 1
    assert queued[0].key == "pending:1"
    assert queued[0].message == (
        "queued by Fairshare as native.1046, charging budget lab/vision (2 GPUs, contract 600 s)"
    )
    assert not queued[0].warning

    place(host, 1, T0 + 3)
    door.step(T0 + 3)
    start(host, 1, T0 + 4)
    door.step(T0 + 4)  # placed and running are one decision
    door.step(T0 + 5)
    placed = [n for _, n in family.told if n.reason == "Placed"]
    assert len(placed) == 1
    assert placed[0].key == "placed:1"
    assert placed[0].message == "placed by Fairshare on n0 (2 GPUs): fairshare"

    preempt_and_requeue(host, 1, T0 + 6)
    door.step(T0 + 6)
    door.step(T0 + 7)
    preempted = [n for _, n in family.told if n.reason == "Preempted"]
    assert [(n.key, n.message) for n in preempted] == [
        ("preempted:1", "preempted by Fairshare: drain")
    ]

    requeue(host, 1, T0 + 8)
    door.step(T0 + 8)
    door.step(T0 + 9)
    queued = [n for _, n in family.told if n.reason == "Queued"]
    assert [n.key for n in queued] == ["pending:1", "pending:2"]
    assert "queued again (attempt 2)" in queued[1].message
    decisions = [r for r in family.reasons(WID) if r != "Pending"]
    assert decisions == ["Queued", "Placed", "Preempted", "Queued"]


def test_a_preemption_between_two_rounds_is_told_all_the_same() -> None:
    """Preempted, requeued and placed again before the door's next round (a busy agent): the
    preemption is still told, as the attempt it ended, before the new placement."""
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    place(host, 1, T0 + 2)
    start(host, 1, T0 + 2)
    door.step(T0 + 2)
    preempt_and_requeue(host, 1, T0 + 3)
    requeue(host, 1, T0 + 3)
    place(host, 2, T0 + 4)
    door.step(T0 + 4)
    door.step(T0 + 5)
    told = [(n.reason, n.key) for _, n in family.told if n.reason != "Pending"]
    assert told == [
        ("Queued", "pending:1"),
        ("Placed", "placed:1"),
        ("Preempted", "preempted:1"),
        ("Placed", "placed:2"),
    ]


def test_queued_again_is_called_only_for_requeued_pending_work() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    door.step(T0 + 2)
    assert family.requeued == []
    place(host, 1, T0 + 3)
    start(host, 1, T0 + 3)
    door.step(T0 + 3)
    preempt_and_requeue(host, 1, T0 + 4)
    door.step(T0 + 4)
    assert family.requeued == []  # preempted, not yet pending again
    requeue(host, 1, T0 + 5)
    door.step(T0 + 5)
    assert family.requeued == [WID]
    assert host.state.cluster.workloads[WID].attempt == 2
    place(host, 2, T0 + 6)
    door.step(T0 + 6)
    assert family.requeued == [WID]


def test_a_decision_not_told_is_told_again_and_one_with_nowhere_to_go_is_not() -> None:
    _host, family, door = world()
    family.work = [work()]
    family.told_result = False
    door.step(T0 + 1)
    door.step(T0 + 2)
    assert family.reasons(WID).count("Queued") == 2
    family.told_result = None  # nothing to tell it on: it counts as told
    door.step(T0 + 3)
    door.step(T0 + 4)
    assert family.reasons(WID).count("Queued") == 3


def test_a_finished_run_is_told_with_its_charge() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    place(host, 1, T0 + 2)
    start(host, 1, T0 + 2)
    host.fold(WorkloadFinished(workload_id=WID, attempt=1, outcome="succeeded"), T0 + 3)
    door.step(T0 + 3)
    [finished] = [n for _, n in family.told if n.reason == "Finished"]
    assert finished.key == "succeeded:1"
    assert finished.message.startswith("succeeded in Fairshare; charged ")
    assert "GPU-hours to lab/vision" in finished.message


def test_a_cancelled_workload_is_told_so_once_and_no_longer_shown_waiting() -> None:
    _host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    family.gone_reasons[WID] = "deleted"
    door.step(T0 + 2)
    shown = len(family.waiting)
    door.step(T0 + 3)
    door.step(T0 + 3 + WAITING_S)
    cancelled = [n for _, n in family.told if n.reason == "Cancelled"]
    assert [(n.key, n.message) for n in cancelled] == [("cancelled:1", "cancelled in Fairshare")]
    assert family.reasons(WID).count("Queued") == 1
    assert len(family.waiting) == shown
    assert family.asked_gone.count(WID) == 2  # not asked again once it ended


# -- why it waits --------------------------------------------------------------------------------
def test_pending_work_is_shown_why_it_waits_and_the_reason_said_once() -> None:
    _host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    [(workload_id, waiting)] = family.waiting
    assert workload_id == WID
    assert waiting is not None
    assert waiting.summary
    assert waiting.position == "1 of 1"
    assert waiting.estimate
    assert waiting.code == "fits-now"
    [pending] = [n for _, n in family.told if n.reason == "Pending"]
    assert pending.key == "pending:1:fits-now"
    assert pending.message == waiting.summary
    # not again before WAITING_S, nor after it while nothing changed
    door.step(T0 + 2)
    door.step(T0 + 1 + WAITING_S + 1)
    door.step(T0 + 1 + 2 * WAITING_S + 2)
    assert family.reasons(WID).count("Pending") == 1
    assert all(w is not None and w.code == "fits-now" for _, w in family.waiting)


def test_a_status_change_is_shown_before_the_next_refresh() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    shown = len(family.waiting)
    place(host, 1, T0 + 2)
    door.step(T0 + 2)  # well within WAITING_S of the first
    assert family.waiting[shown:] == [(WID, None)]  # it no longer waits
    door.step(T0 + 3)
    assert len(family.waiting) == shown + 1


def test_work_that_cannot_fit_waits_with_another_reason() -> None:
    _host, family, door = world()
    family.work = [work(gpus=16)]  # no node of hpc's pool has 16 GPUs
    door.step(T0 + 1)
    [(_, waiting)] = family.waiting
    assert waiting is not None
    assert waiting.summary
    assert waiting.code not in (None, "fits-now")
    assert [n.key for _, n in family.told if n.reason == "Pending"] == [f"pending:1:{waiting.code}"]


# -- only this cluster's native work -------------------------------------------------------------
def test_only_this_clusters_native_work_is_handled() -> None:
    host, family, door = world()
    host.fold(
        WorkloadSubmitted(
            workload_id="native.other", budget="lab/audio", pools=(POOL,), gpus=1,
            min_runtime_s=0, submitter="zed",
            spec={"name": "theirs", NATIVE_KEY: {"cluster": "other", "kind": "TestJob"}},
        ),
        T0,
    )  # fmt: skip
    host.fold(
        WorkloadSubmitted(
            workload_id="by-api", budget="lab/vision", pools=(POOL,), gpus=1, min_runtime_s=0,
            submitter="bo", spec={"name": "api work"},
        ),
        T0,
    )  # fmt: skip
    family.work = [work()]
    family.gone_reasons = {"native.other": "gone", "by-api": "gone"}
    door.step(T0 + 1)
    door.step(T0 + 1 + WAITING_S)
    assert family.seen() == {WID}
    assert host.facts(WorkloadCancelled) == []


def test_work_already_in_the_log_is_not_submitted_again_even_after_a_restart() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    restarted = NativeDoor(host, family)
    restarted.step(T0 + 2)
    assert submitted_ids(host) == [WID]
    # a restarted door tells the standing decision again (it does not know it was told)
    assert family.reasons(WID).count("Queued") == 2


def test_told_state_of_forgotten_workloads_is_dropped() -> None:
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    assert WID in door._told
    family.work = []
    del host.state.cluster.workloads[WID]
    door.step(T0 + 2)
    assert door._told == {}


def test_a_refused_work_fixed_in_place_is_submitted_with_its_new_shape() -> None:
    host, family, door = world()
    family.work = [work(problems=("too big",))]
    door.step(T0 + 1)
    family.work = [replace(work(), gpus=4)]
    door.step(T0 + 2)
    [data] = host.facts(WorkloadSubmitted)
    assert data.gpus == 4
    assert door.refused == {}


def test_work_cancelled_in_fairshare_is_not_submitted_again_once_forgotten() -> None:
    """Native work cancelled in Fairshare (``fairshare cancel``; a running one is requeued and
    held by its family, as a preemption) keeps its object waiting in its cluster: a held Slurm
    job, told "cancelled in Fairshare". Once the live state forgets the ended workload (and
    the ids it kept), past ``FORGET_AFTER_S``, the door must not take that same object as new
    work: its user's cancelled job would be queued, placed and charged again."""
    host, family, door = world()
    family.work = [work()]
    door.step(T0 + 1)
    host.fold(WorkloadCancelled(workload_id=WID, cancelled_by="admin"), T0 + 2)
    door.step(T0 + 3)
    assert host.state.cluster.workloads[WID].status == "cancelled"
    later = T0 + FORGET_AFTER_S + 3 * 86400
    host.fold(BudgetCreated(budget="late", created_by="admin"), later)
    assert WID not in host.state.cluster.workloads  # forgotten, as every reader does
    door.step(later + 1)
    assert submitted_ids(host) == [WID]
    assert family.settled == [WID], "its object cancelled in its cluster, once"
