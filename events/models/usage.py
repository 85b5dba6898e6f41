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

    budget: BudgetPath
    allocated_gpu_s: GpuSeconds
    unallocated_gpu_s: GpuSeconds


class UsageSnapshot(EventData):
    """Leaf-budget usage within [window_start, window_end), as folded up to ``as_of``."""

    event_type: ClassVar[str] = "fairshare.usage.snapshot.v1"
    topic: ClassVar[TopicKind] = TopicKind.USAGE
    subject_field: ClassVar[str] = "pool"

    pool: PoolName
    window_start: UtcDateTime
    window_end: UtcDateTime
    as_of: tuple[InputPosition, ...]
    budgets: tuple[BudgetUsage, ...] = Field(default=())

    @model_validator(mode="after")
    def _window(self) -> UsageSnapshot:
        if self.window_end <= self.window_start:
            raise ValueError("window_end: must be after window_start")
        names = [b.budget for b in self.budgets]
        if len(set(names)) != len(names):
            raise ValueError("budgets: each budget may appear only once")
        return self
