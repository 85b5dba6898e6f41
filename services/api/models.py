"""Request bodies of the API: the event field types of ``events/types.py``, strict, and no
unknown fields (a typo must not silently drop a setting), so a 422 names the field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from events.models.budgets import Role
from events.models.workloads import GangShape
from events.types import (
    BudgetPath,
    GpuCount,
    Identifier,
    MinRuntimeSeconds,
    PoolName,
    ShortText,
    Weight,
)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SubmitRequest(_Request):
    """A workload; ``workload_id`` is the client's, so a retried submit is idempotent."""

    workload_id: Identifier
    budget: BudgetPath
    #: Acceptable pools, in order of preference.
    pools: list[PoolName] = Field(min_length=1, max_length=64)
    gpus: GpuCount
    gang: GangShape = "single-node"
    #: 0 = unallocated (free, preemptible any time); > 0 = allocated, protected this long.
    min_runtime_s: MinRuntimeSeconds
    resumable: bool = True
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    spec: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("pools")
    @classmethod
    def _distinct(cls, pools: list[str]) -> list[str]:
        if len(set(pools)) != len(pools):
            raise ValueError("each pool may be listed only once")
        return pools


class CancelRequest(_Request):
    reason: ShortText = ""


class WeightRequest(_Request):
    weight: Weight
    #: A weight for one pool only; None: the weight in every pool without an override.
    pool: PoolName | None = None
    reason: ShortText = ""


class MemberRequest(_Request):
    user: Identifier
    role: Role = "member"


class CordonRequest(_Request):
    reason: ShortText = ""
