"""Every concrete event model in one tuple: what the registry, the schemas and the tests
iterate over. Its own module so that ``events.models`` can load each model only when it is
used (a client of the API reads a few of its types and must not build them all)."""

from __future__ import annotations

from events.models.arrays import WorkloadArraySubmitted
from events.models.base import EventData
from events.models.budgets import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    GroupBound,
    GroupUnbound,
    MembershipGranted,
    MembershipRevoked,
)
from events.models.cluster import (
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeForeignGpus,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
)
from events.models.commands import (
    PlaceCommand,
    PreemptCommand,
    SchedulerSettings,
)
from events.models.deadletter import DeadLetter
from events.models.heartbeats import GpuHeartbeat
from events.models.keys import (
    SigningKeyRegistered,
    SigningKeyRevoked,
)
from events.models.ledger import LedgerCharge
from events.models.liveness import NodeAlive
from events.models.periods import PeriodClosed
from events.models.prices import PriceSet
from events.models.usage import UsageSnapshot
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
    GroupBound,
    GroupUnbound,
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
    NodeForeignGpus,
    GpuHeartbeat,
    NodeAlive,
    UsageSnapshot,
    LedgerCharge,
    PeriodClosed,
    DeadLetter,
    SigningKeyRegistered,
    SigningKeyRevoked,
)
