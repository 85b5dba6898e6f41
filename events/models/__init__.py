"""Every event and command of Fairshare (docs/design.md section 3), as frozen pydantic models."""

from events.models.arrays import WorkloadArraySubmitted
from events.models.base import EventData
from events.models.budgets import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    MembershipGranted,
    MembershipRevoked,
)
from events.models.cluster import (
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
)
from events.models.commands import (
    COMMAND_UPCASTERS,
    BudgetStanding,
    ChurnSettings,
    DebugLaneSettings,
    DecisionRecord,
    InputPosition,
    PlaceCommand,
    PreemptCommand,
    SchedulerSettings,
    TimeLimitSettings,
)
from events.models.deadletter import DeadLetter
from events.models.heartbeats import GpuHeartbeat, GpuReading
from events.models.keys import SigningKeyRegistered, SigningKeyRevoked
from events.models.ledger import LedgerCharge, charge_id
from events.models.liveness import NodeAlive
from events.models.periods import AccountBalance, PeriodClosed
from events.models.placement import NodeGpus, Placement
from events.models.prices import PriceSet
from events.models.usage import BudgetUsage, UsageSnapshot
from events.models.workloads import (
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
)

#: Every concrete event model, in a stable order (schemas, registry, tests).
ALL_EVENT_MODELS: tuple[type[EventData], ...] = (
    BudgetCreated,
    BudgetClosed,
    BudgetWeightChanged,
    MembershipGranted,
    MembershipRevoked,
    PriceSet,
    WorkloadSubmitted,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadPlaced,
    WorkloadStarted,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadFinished,
    WorkloadLost,
    PlaceCommand,
    PreemptCommand,
    SchedulerSettings,
    NodeRegistered,
    NodeCordoned,
    NodeUncordoned,
    NodeDrained,
    NodeDown,
    NodeUp,
    GpuHeartbeat,
    NodeAlive,
    UsageSnapshot,
    LedgerCharge,
    PeriodClosed,
    DeadLetter,
    SigningKeyRegistered,
    SigningKeyRevoked,
)

__all__ = [
    "ALL_EVENT_MODELS",
    "COMMAND_UPCASTERS",
    "AccountBalance",
    "BudgetClosed",
    "BudgetCreated",
    "BudgetStanding",
    "BudgetUsage",
    "BudgetWeightChanged",
    "ChurnSettings",
    "DeadLetter",
    "DebugLaneSettings",
    "DecisionRecord",
    "EventData",
    "GpuHeartbeat",
    "GpuReading",
    "InputPosition",
    "LedgerCharge",
    "MembershipGranted",
    "MembershipRevoked",
    "NodeAlive",
    "NodeCordoned",
    "NodeDown",
    "NodeDrained",
    "NodeGpus",
    "NodeRegistered",
    "NodeUncordoned",
    "NodeUp",
    "PeriodClosed",
    "PlaceCommand",
    "Placement",
    "PreemptCommand",
    "PriceSet",
    "SchedulerSettings",
    "SigningKeyRegistered",
    "SigningKeyRevoked",
    "TimeLimitSettings",
    "UsageSnapshot",
    "WorkloadArraySubmitted",
    "WorkloadCancelled",
    "WorkloadFinished",
    "WorkloadLost",
    "WorkloadPlaced",
    "WorkloadPreempted",
    "WorkloadRequeued",
    "WorkloadStarted",
    "WorkloadSubmitted",
    "charge_id",
]
