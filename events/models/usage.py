"""Windowed usage per budget per pool (topic: usage, keyed by pool), for the scheduler."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from events.models.base import EventData
from events.models.commands import InputPosition
from events.topics import TopicKind
from events.types import BudgetPath, GpuSeconds, PoolName, UtcDateTime


class BudgetUsage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    budget: BudgetPath = Field(
        description="A leaf budget with charges in the snapshot's pool. Stated by charging."
    )
    allocated_gpu_s: GpuSeconds = Field(
        description=(
            "Allocated GPU-seconds charged to the budget in the pool within the window: its "
            "allocated charges of the window's hour buckets, signed (corrections that decrease "
            "subtract), truncated to an integer. The scheduler ranks fair share on it "
            "(projections.usage_snapshots.usage_to_rank). Stated by charging."
        )
    )
    unallocated_gpu_s: GpuSeconds = Field(
        description=(
            "Unallocated (burst) GPU-seconds the budget's work occupied in the pool within the "
            "window, signed as above: recorded at no charge and not counted in fair-share usage; "
            "informational, no fold ranks on it. Stated by charging."
        )
    )


class UsageSnapshot(EventData):
    """Leaf-budget usage within [window_start, window_end), as folded up to ``as_of``."""

    event_type: ClassVar[str] = "fairshare.usage.snapshot.v1"
    topic: ClassVar[TopicKind] = TopicKind.USAGE
    subject_field: ClassVar[str] = "pool"

    pool: PoolName = Field(
        description=(
            "The pool the usage is of; the record's subject and key. The scheduler ranks the "
            "pool's budgets on its latest snapshot. Stated by charging."
        )
    )
    window_start: UtcDateTime = Field(
        description=(
            "Start of the usage window, UTC, on the hour: the window is the hour that holds "
            "window_end and the hours before it, 168 in all by default (7 days, design 2.4). "
            "Stated by charging."
        )
    )
    window_end: UtcDateTime = Field(
        description=(
            "End of the window: charging's latest folded event time, UTC (also the record's event "
            "time). The scheduler adds running allocated work from the hour it reached, whose "
            "charges are not posted yet, and decision records name it as usage_as_of. Stated by "
            "charging."
        )
    )
    as_of: tuple[InputPosition, ...] = Field(
        description=(
            "Per input partition charging folds, the first offset it had not folded when the "
            "snapshot was computed: which facts the usage includes. The envelope's id is derived "
            "from it. Stated by charging."
        )
    )
    budgets: tuple[BudgetUsage, ...] = Field(
        default=(),
        description=(
            "Per leaf budget charged in the pool (each once, by path; one whose usage left the "
            "window stays, at 0): its allocated and unallocated GPU-seconds in the window. Stated "
            "by charging."
        ),
    )

    @model_validator(mode="after")
    def _window(self) -> UsageSnapshot:
        if self.window_end <= self.window_start:
            raise ValueError("window_end: must be after window_start")
        names = [b.budget for b in self.budgets]
        if len(set(names)) != len(names):
            raise ValueError("budgets: each budget may appear only once")
        return self
