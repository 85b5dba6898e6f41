"""Every event and command of Fairshare (docs/design.md section 3), as frozen pydantic models."""

from .arrays import (
    WorkloadArraySubmitted as WorkloadArraySubmitted,
)
from .base import (
    EventData as EventData,
)
from .budgets import (
    BudgetClosed as BudgetClosed,
    BudgetCreated as BudgetCreated,
    BudgetWeightChanged as BudgetWeightChanged,
    GroupBound as GroupBound,
    GroupUnbound as GroupUnbound,
    MembershipGranted as MembershipGranted,
    MembershipRevoked as MembershipRevoked,
)
from .catalog import ALL_EVENT_MODELS as ALL_EVENT_MODELS
from .cluster import (
    ForeignHolder as ForeignHolder,
    NodeCordoned as NodeCordoned,
    NodeDown as NodeDown,
    NodeDrained as NodeDrained,
    NodeForeignGpus as NodeForeignGpus,
    NodeRegistered as NodeRegistered,
    NodeUncordoned as NodeUncordoned,
    NodeUp as NodeUp,
)
from .commands import (
    COMMAND_UPCASTERS as COMMAND_UPCASTERS,
    BudgetStanding as BudgetStanding,
    ChurnSettings as ChurnSettings,
    DebugLaneSettings as DebugLaneSettings,
    DecisionRecord as DecisionRecord,
    InputPosition as InputPosition,
    PlaceCommand as PlaceCommand,
    PreemptCommand as PreemptCommand,
    SchedulerSettings as SchedulerSettings,
    TimeLimitSettings as TimeLimitSettings,
)
from .deadletter import (
    DeadLetter as DeadLetter,
)
from .heartbeats import (
    GpuHeartbeat as GpuHeartbeat,
    GpuReading as GpuReading,
)
from .keys import (
    SigningKeyRegistered as SigningKeyRegistered,
    SigningKeyRevoked as SigningKeyRevoked,
)
from .ledger import (
    LedgerCharge as LedgerCharge,
    charge_id as charge_id,
)
from .liveness import (
    NodeAlive as NodeAlive,
)
from .periods import (
    AccountBalance as AccountBalance,
    PeriodClosed as PeriodClosed,
)
from .placement import (
    NodeGpus as NodeGpus,
    Placement as Placement,
)
from .prices import (
    PriceSet as PriceSet,
)
from .usage import (
    BudgetUsage as BudgetUsage,
    UsageSnapshot as UsageSnapshot,
)
from .workloads import (
    WorkloadCancelled as WorkloadCancelled,
    WorkloadFinished as WorkloadFinished,
    WorkloadLost as WorkloadLost,
    WorkloadPlaced as WorkloadPlaced,
    WorkloadPreempted as WorkloadPreempted,
    WorkloadRequeued as WorkloadRequeued,
    WorkloadStarted as WorkloadStarted,
    WorkloadSubmitted as WorkloadSubmitted,
)
