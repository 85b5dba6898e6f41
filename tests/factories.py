"""One valid example of every event type, for round-trip tests on every bus and in files."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.envelope import Envelope, new_event
from events.models import (
    ALL_EVENT_MODELS,
    AccountBalance,
    BudgetClosed,
    BudgetCreated,
    BudgetStanding,
    BudgetUsage,
    BudgetWeightChanged,
    DeadLetter,
    DecisionRecord,
    EventData,
    ForeignHolder,
    GpuHeartbeat,
    GpuReading,
    GroupBound,
    GroupUnbound,
    InputPosition,
    LedgerCharge,
    MembershipGranted,
    MembershipRevoked,
    NodeAlive,
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeForeignGpus,
    NodeGpus,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
    PeriodClosed,
    PlaceCommand,
    Placement,
    PreemptCommand,
    PriceSet,
    SigningKeyRegistered,
    SigningKeyRevoked,
    UsageSnapshot,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
    charge_id,
)
from events.signing import Signer
from scheduling.debug_lane import DebugLane, DebugLanes
from scheduling.scheduling_pass import PassContext
from scheduling.settings import settings_of

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
PLACEMENT = Placement(nodes=(NodeGpus(node="node-01", gpus=(0, 1)),))
DECISION = DecisionRecord(
    pass_id=7,
    input_position=(InputPosition(topic="fairshare.workloads", partition=0, offset=41),),
    reason="fairshare",
    budgets=(
        BudgetStanding(budget="lab/vision", rank=1, share=0.5, usage_gpu_s=7200, usage_ratio=0.01),
    ),
)


def sample_payloads() -> list[EventData]:
    """A valid payload of every event type, in ALL_EVENT_MODELS order."""
    # Long on purpose: one literal per event type, read as a table; splitting it would only
    # scatter the table.
    payloads: list[EventData] = [
        BudgetCreated(
            budget="lab/vision", weight=2.0, pool_weights={"a100": 3.0}, created_by="ana"
        ),
        BudgetClosed(budget="lab/old", closed_by="ana", reason="project over"),
        BudgetWeightChanged(budget="lab/vision", weight=4.0, pool="a100", changed_by="ana"),
        MembershipGranted(budget="lab/vision", user="bo", role="member", granted_by="ana"),
        MembershipRevoked(budget="lab/vision", user="bo", role="member", revoked_by="ana"),
        GroupBound(budget="lab/vision", cluster="k1", group="vision", default=True, bound_by="ana"),
        GroupUnbound(budget="lab/vision", cluster="k1", group="vision", unbound_by="ana"),
        PriceSet(
            pool="a100",
            currency="EUR",
            per_gpu_hour="2.35",
            effective_at=datetime(2026, 11, 1, tzinfo=UTC),
            budget="lab/vision",
            set_by="admin",
            reason="negotiated for the lab",
        ),
        WorkloadSubmitted(
            workload_id="wl-1",
            budget="lab/vision",
            pools=("a100", "h100"),
            gpus=2,
            min_runtime_s=3600,
            priority=5,
            submitter="bo",
            spec={"command": ["python", "train.py"], "env": {"SEED": "1"}, "duration_s": 5400},
        ),
        WorkloadArraySubmitted(
            array_id="sweep-1",
            indices="0-999:2,1001",
            max_running=50,
            budget="lab/vision",
            pools=("a100",),
            gpus=1,
            min_runtime_s=600,
            submitter="bo",
            spec={"command": ["python", "sweep.py"]},
        ),
        WorkloadCancelled(workload_id="wl-1", cancelled_by="bo"),
        WorkloadPlaced(
            workload_id="wl-1",
            attempt=1,
            pool="a100",
            placement=PLACEMENT,
            allocated=True,
            command_id="cmd-1",
        ),
        WorkloadStarted(
            workload_id="wl-1", attempt=1, pool="a100", placement=PLACEMENT, allocated=True
        ),
        WorkloadPreempted(workload_id="wl-1", attempt=1, command_id="cmd-2", ran_s=3700),
        WorkloadRequeued(
            workload_id="wl-1", attempt=1, original_submit_time=T0, reason="preempted"
        ),
        WorkloadFinished(workload_id="wl-1", attempt=2, outcome="succeeded", exit_code=0),
        WorkloadLost(
            workload_id="wl-1", attempt=1, node="node-01", last_heartbeat=T0 + timedelta(hours=1)
        ),
        PlaceCommand(
            command_id="cmd-1",
            cluster="cluster-a",
            pool="a100",
            workload_id="wl-1",
            attempt=1,
            budget="lab/vision",
            placement=PLACEMENT,
            allocated=True,
            min_runtime_s=3600,
            spec={"command": ["python", "train.py"]},
            decision=DECISION,
        ),
        PreemptCommand(
            command_id="cmd-2",
            cluster="cluster-a",
            pool="a100",
            workload_id="wl-1",
            attempt=1,
            grace_period_s=30,
            requeue=True,
            decision=DecisionRecord(
                pass_id=9,
                input_position=(),
                reason="preempt-for",
                preemptor="wl-9",
                detail="lab/robotics ranks ahead after counting wl-9",
            ),
        ),
        settings_of(
            PassContext(now=0.0, debug_lanes=DebugLanes(pools=(("a100", DebugLane(max_gpus=2)),)))
        ),
        NodeRegistered(node="node-01", cluster="cluster-a", pool="a100", gpus=8, gpu_type="A100"),
        NodeCordoned(node="node-01", cordoned_by="ops", reason="firmware"),
        NodeUncordoned(node="node-01", uncordoned_by="ops"),
        NodeDrained(node="node-01"),
        NodeDown(node="node-01", last_heartbeat=T0),
        NodeUp(node="node-01"),
        NodeForeignGpus(
            node="node-01",
            cluster="cluster-a",
            gpus=2,
            holders=(ForeignHolder(name="ml/train-0", gpus=2, scheduler="volcano"),),
        ),
        GpuHeartbeat(
            node="node-01",
            cluster="cluster-a",
            sequence=12,
            gpus=(
                GpuReading(
                    index=0,
                    occupant="wl-1",
                    attempt=1,
                    utilisation_pct=97.5,
                    memory_used_bytes=40 << 30,
                    memory_total_bytes=80 << 30,
                ),
                GpuReading(index=1, utilisation_pct=0.0, memory_used_bytes=0),
            ),
        ),
        NodeAlive(
            node="node-01",
            cluster="cluster-a",
            sequence=13,
            gpus=(
                GpuReading(
                    index=0,
                    occupant="wl-1",
                    attempt=1,
                    utilisation_pct=96.0,
                    memory_used_bytes=41 << 30,
                    memory_total_bytes=80 << 30,
                ),
                GpuReading(index=1, utilisation_pct=0.0, memory_used_bytes=0),
            ),
        ),
        UsageSnapshot(
            pool="a100",
            window_start=T0 - timedelta(days=7),
            window_end=T0,
            as_of=(InputPosition(topic="fairshare.heartbeats", partition=2, offset=99),),
            budgets=(BudgetUsage(budget="lab/vision", allocated_gpu_s=7200, unallocated_gpu_s=60),),
        ),
        LedgerCharge(
            charge_id=charge_id("wl-1", 1, int(T0.timestamp()) // 3600),
            workload_id="wl-1",
            budget="lab/vision",
            pool="a100",
            bucket_start=T0,
            kind="allocated",
            debit_account="budget:lab/vision",
            credit_account="capacity:a100",
            gpu_seconds=7200,
            amount=7200,
        ),
        PeriodClosed(
            period="2026-11",
            start=datetime(2026, 11, 1, tzinfo=UTC),
            end=datetime(2026, 12, 1, tzinfo=UTC),
            opening=(AccountBalance(account="budget:lab/vision", amount=-3600),),
            closing=(AccountBalance(account="budget:lab/vision", amount=-10800),),
            charges=1,
            charges_digest="a" * 64,
            previous_digest="b" * 64,
            digest="c" * 64,
            as_of=(InputPosition(topic="fairshare.ledger", partition=0, offset=12),),
            inputs=(InputPosition(topic="fairshare.workloads", partition=0, offset=40),),
            opened=(InputPosition(topic="fairshare.workloads", partition=0, offset=3),),
            checkpoint="charging-period-2026-11",
        ),
        DeadLetter(
            source_position="fairshare.workloads/0/3",
            source_topic="fairshare.workloads",
            source_partition=0,
            source_offset=3,
            consumer="tests",
            reason="data.gpus: Input should be greater than or equal to 1",
            value_b64="e30=",
        ),
        SigningKeyRegistered(
            key_id=SAMPLE_SIGNER.key_id,
            public_key=SAMPLE_SIGNER.public_key_text,
            role="agent",
            cluster="cluster-a",
            registered_by="admin",
            required_from=datetime(1970, 1, 1, tzinfo=UTC),
        ),
        SigningKeyRevoked(key_id=SAMPLE_SIGNER.key_id, revoked_by="admin", reason="rotated"),
    ]
    assert [type(p) for p in payloads] == list(ALL_EVENT_MODELS), "add new models here"
    return payloads


#: A fixed key, so the samples (and the schemas' examples) are the same on every run.
SAMPLE_SIGNER = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


def sample_events(source: str = "tests") -> list[Envelope[Any]]:
    return [
        new_event(payload, source=source, time=T0 + timedelta(seconds=i))
        for i, payload in enumerate(sample_payloads())
    ]


def submitted(workload_id: str, **overrides: Any) -> WorkloadSubmitted:
    fields: dict[str, Any] = {
        "workload_id": workload_id,
        "budget": "lab/vision",
        "pools": ("a100",),
        "gpus": 1,
        "min_runtime_s": 600,
        "submitter": "bo",
    }
    fields.update(overrides)
    return WorkloadSubmitted(**fields)
