"""The API's language: request bodies and typed answers, shared by the server and its client.

Request bodies use the event field types of ``events/types.py``, strict, and no unknown fields
(a typo must not silently drop a setting), so a 422 names the field.

Answers mirror the JSON the API has always sent, key for key and in the same order: the server
builds them, FastAPI serialises them, and the CLI client parses them back into the same classes
(unknown keys are ignored there, so an older client reads a newer server). Numbers keep their
JSON type: a field that may hold an int or a float says so (``int | float``), because a float
field would turn ``5`` into ``5.0``.

This module imports pydantic, ``events`` and the why-pending codes (:mod:`scheduling.pending_codes`)
only, never FastAPI nor the scheduling core, so the CLI imports it cheaply.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
    field_validator,
)

from events.arrays import MAX_ARRAY_ELEMENTS
from events.models.budgets import (
    KUBERNETES_NAMESPACE,
    SLURM_ACCOUNT,
    GroupKind,
    group_name_error,
)
from events.types import (
    ArrayId,
    ArrayIndices,
    BudgetPath,
    CurrencyCode,
    GangShape,
    GpuCount,
    Identifier,
    MinRuntimeSeconds,
    PoolName,
    Role,
    ShortText,
    Spec,
    TimeLimitSeconds,
    UtcDateTime,
    Weight,
)
from scheduling.pending_codes import PendingCode


# -- requests -----------------------------------------------------------------------------------
class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class WorkloadTemplate(_Request):
    """What a workload asks for: one submission's fields, and every element's of an array."""

    budget: BudgetPath
    #: Acceptable pools, in order of preference.
    pools: list[PoolName] = Field(min_length=1, max_length=64)
    gpus: GpuCount
    gang: GangShape = "single-node"
    #: 0 = unallocated (free, preemptible any time); > 0 = allocated, protected this long.
    min_runtime_s: MinRuntimeSeconds
    resumable: bool = True
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    spec: Spec = Field(default_factory=dict)
    #: Seconds one run may last before its agent stops it; None: the pool's default. At least
    #: ``min_runtime_s``, at most the maximum of each pool listed (a 422 otherwise).
    time_limit_s: TimeLimitSeconds | None = None

    @field_validator("pools")
    @classmethod
    def _distinct(cls, pools: list[str]) -> list[str]:
        if len(set(pools)) != len(pools):
            raise ValueError("each pool may be listed only once")
        return pools


class SubmitRequest(WorkloadTemplate):
    """A workload; ``workload_id`` is the client's, so a retried submit is idempotent."""

    workload_id: Identifier


class ArraySubmitRequest(WorkloadTemplate):
    """A job array: one workload ``<array_id>_<index>`` per index, all recorded or none;
    ``array_id`` is the client's, so a retried submit is idempotent."""

    array_id: ArrayId
    #: ``sbatch --array``'s list without its ``%``: ``0-999``, ``0-99:2``, ``1,3,5-7``.
    indices: ArrayIndices
    #: At most this many elements placed or running at once (``%K``); None: no limit.
    max_running: int | None = Field(default=None, ge=1, le=MAX_ARRAY_ELEMENTS)


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


class NamespaceBindRequest(_Request):
    """Let work of Kubernetes namespace ``namespace`` of ``cluster`` charge the budget;
    ``default``: the namespace's budget for work that names none (replacing any earlier
    default of the namespace)."""

    cluster: Identifier
    #: A DNS-1123 label, as Kubernetes names namespaces.
    namespace: str = Field(min_length=1, max_length=63)
    default: bool = False

    @field_validator("namespace")
    @classmethod
    def _dns1123(cls, namespace: str) -> str:
        return _namespace_name(namespace)


class AccountBindRequest(_Request):
    """Let work of Slurm account ``account`` of ``cluster`` (``sbatch --account``) charge the
    budget. There is no ``default``: an account charges one budget, so binding it always makes
    the budget its default (replacing any earlier one)."""

    cluster: Identifier
    #: A Slurm account name as Slurm stores it (lower case).
    account: str = Field(min_length=1, max_length=64)

    @field_validator("account")
    @classmethod
    def _slurm_account(cls, account: str) -> str:
        return _group_name(SLURM_ACCOUNT, account)


def _namespace_name(namespace: str) -> str:
    return _group_name(KUBERNETES_NAMESPACE, namespace)


def _group_name(kind: GroupKind, group: str) -> str:
    error = group_name_error(kind, group)
    if error is not None:
        raise ValueError(error)
    return group


class CordonRequest(_Request):
    reason: ShortText = ""


class BudgetCreateRequest(_Request):
    """A new budget under an existing, open parent (a top-level one: under the root)."""

    budget: BudgetPath
    weight: Weight = 1.0
    #: Weights that replace ``weight`` in these pools (each a known pool).
    pool_weights: dict[PoolName, Weight] = Field(default_factory=dict, max_length=64)
    description: ShortText = ""


class BudgetCloseRequest(_Request):
    reason: ShortText = ""


#: What a price may be written as: a plain decimal (a leading ``-`` only to be refused by name).
_DECIMAL_TEXT = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
#: A price as the event holds it (``events.models.prices.MoneyText``).
_MONEY_TEXT = re.compile(r"^(0|[1-9][0-9]{0,8})(\.[0-9]{1,6})?$")


def money_text(value: Any) -> str:
    """An amount per GPU-hour as exact decimal text (``"2.35"``), from a decimal string or a
    JSON number (a number is read as it prints, ``Decimal(str(x))``, so ``2.35`` is 2.35, not
    the binary float nearest it). Raises ValueError naming what is wrong: not a number, NaN or
    infinite, negative, more than 6 decimals or 9 digits before the point."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError('an amount is a decimal string ("2.35") or a number')
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("an amount is a finite number, not NaN or infinity")
    text = value if isinstance(value, str) else str(value)
    if isinstance(value, str) and not _DECIMAL_TEXT.match(text):
        raise ValueError(f'{text[:40]!r} is not a decimal amount (write it like "2.35")')
    try:
        amount = Decimal(text)
    except InvalidOperation as error:
        raise ValueError(f"{text[:40]!r} is not a decimal amount") from error
    if not amount.is_finite():
        raise ValueError("an amount is a finite number, not NaN or infinity")
    if amount < 0:
        raise ValueError("a price is never negative")
    exponent = amount.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    if exponent < -6:
        raise ValueError("a price has at most 6 decimals")
    canonical = format(abs(amount) if amount == 0 else amount, "f")
    if not _MONEY_TEXT.match(canonical):
        raise ValueError("a price has at most 9 digits before the decimal point")
    return canonical


def _iso_time(value: Any) -> Any:
    """An ISO 8601 time with its offset, as UTC (the body is strict JSON: a time is text)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as error:
        raise ValueError(
            f"{value[:40]!r} is not an ISO 8601 time (e.g. 2026-11-01T00:00:00Z)"
        ) from error
    if parsed.tzinfo is None:
        raise ValueError("a time needs its UTC offset (e.g. 2026-11-01T00:00:00Z)")
    return parsed.astimezone(UTC)


#: A price as sent: decimal text or a JSON number; held as exact decimal text.
MoneyAmount = Annotated[
    str,
    BeforeValidator(money_text),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}], "examples": ["2.35"]}),
]


class PriceRequest(_Request):
    """The price of a GPU-hour in ``pool`` from ``effective_at`` on (admins): the list price,
    or with ``budget`` a negotiated rate for that budget's subtree."""

    pool: PoolName
    #: An ISO 4217 code (checked against the list by the API).
    currency: CurrencyCode
    per_gpu_hour: MoneyAmount
    #: On the hour, not before the current month; None: the start of the current hour.
    effective_at: Annotated[UtcDateTime | None, BeforeValidator(_iso_time)] = None
    budget: BudgetPath | None = None
    reason: ShortText = ""


#: Every status a workload can have; ``GET /workloads?status=`` takes one of them.
WorkloadStatus = Literal[
    "pending", "placed", "running", "succeeded", "failed", "cancelled", "preempted", "lost"
]
WORKLOAD_STATUSES: tuple[str, ...] = get_args(WorkloadStatus)


# -- answers ------------------------------------------------------------------------------------
class Answer(BaseModel):
    """Base of every answer."""

    # defer_build: an answer's validator is built when it first validates (the API builds its
    # routes' at start), not when this module is imported: a CLI command checks one answer
    # and paid to build all of them
    model_config = ConfigDict(extra="ignore", defer_build=True)


class Health(Answer):
    status: str = "ok"
    #: The view has folded the log up to the end offsets read when this check started.
    caught_up: bool
    consumer_running: bool
    events: int
    #: Records before those end offsets not folded yet.
    behind: int = 0
    #: Facts held because what they depend on has not been read yet.
    waiting: int = 0
    #: Facts the fold refused (each is logged with its reason).
    rejected: int = 0
    #: Records of the log that are no valid event where they lie (undecodable, on another
    #: type's topic, keyed by another subject): skipped by the view, dead-lettered by the
    #: consumers, each logged with its reason.
    skipped: int = 0
    #: Records the view did not believe as signed facts (forged, wrongly signed, stated by a
    #: signer that may not state them), by kind; each logged, and dead-lettered by the
    #: consumers (docs/signed-facts.md).
    not_believed: dict[str, int] = {}


class Me(Answer):
    user: str
    admin: bool
    #: Budget path -> roles held there (they cover the subtree).
    roles: dict[str, list[str]]


class PlacementPart(Answer):
    node: str
    gpus: list[int]


class WorkloadView(Answer):
    workload_id: str
    budget: str
    submitter: str
    status: str
    pools: list[str]
    gpus: int
    gang: str
    min_runtime_s: int
    allocated: bool
    resumable: bool
    priority: int
    spec: dict[str, JsonValue]
    attempt: int
    pool: str | None
    placement: list[PlacementPart]
    submitted_at: str
    placed_at: str | None
    started_at: str | None
    contract_ends_at: str | None
    preempting: bool
    cancel_requested: bool
    #: The job's name (``spec.name``, ``fairshare submit -J``), if it has one.
    name: str | None = None
    #: Preempt commands against it, cancellations not counted (it was requeued after each).
    preemptions: int = 0
    #: When the current attempt ended, and how a finished one ended.
    ended_at: str | None = None
    exit_code: int | None = None
    end_message: str = ""
    #: Seconds the current attempt has run (to its end, or to ``as_of``).
    elapsed_s: int | None = None
    #: Seconds of its contract (min_runtime) still to run, while it runs allocated.
    contract_left_s: int | None = None
    #: GPU-seconds charged to its budget (every attempt, corrections included), and burst
    #: (unallocated) GPU-seconds, as far as the ledger has posted them.
    charged_gpu_s: int = 0
    burst_gpu_s: int = 0
    #: GPU-seconds its running attempt has used since its charges stop (the ledger posts
    #: closed hours; the hour in progress is charged when it closes): what ``/budgets`` adds
    #: to the charges as delivered. Allocated or burst as the run is; 0 unless it runs.
    running_gpu_s: int = 0
    #: It ended before the live window: answered from the read models, which keep no spec,
    #: placement or exit code (the log does: ``fairshare audit explain``).
    archived: bool = False
    #: The limit it declared (None: its pool's default), and the one its current run has.
    time_limit_s: int | None = None
    run_time_limit_s: int | None = None
    #: When the current run will have been stopped at the latest (its start plus its limit).
    time_limit_ends_at: str | None = None
    #: While pending, when it should start (``start_estimate.py``: the pass run forward, each
    #: run lasting what finished runs say, like ``squeue --start``); null beyond 7 days, when
    #: not pending, or in a list (only ``GET /workloads/{id}`` estimates).
    estimated_start: str | None = None
    #: What the estimate rests on: ``now`` (it fits now), ``history`` (its submitters' own
    #: runs), ``pool`` (the pool's recent runs), ``guess`` (contracts or runs' ages alone).
    start_basis: str | None = None
    #: When it should start at the latest, every run lasting its time limit (unless work that
    #: ranks higher arrives); null beyond 7 days.
    latest_start: str | None = None
    #: The job array it is an element of, and its index there (null: of no array).
    array_id: str | None = None
    array_index: int | None = None
    #: Pending, but held back by its array's limit (``%K``): not in the queue yet.
    held_by_array: bool = False


class WorkloadList(Answer):
    total: int
    workloads: list[WorkloadView]


#: The detail of a 202: the event is in the log, this API's view has not folded it yet.
NOT_YET_VISIBLE = "recorded in the event log; not yet visible in this API's view"


class Accepted(Answer):
    """202 Accepted: recorded, not yet visible (read-your-writes timed out)."""

    status: Literal["accepted"] = "accepted"
    event_id: str
    detail: str = NOT_YET_VISIBLE


class WorkloadAccepted(Accepted):
    workload_id: str


class BudgetAccepted(Accepted):
    budget: str


class NodeAccepted(Accepted):
    node: str


class ArrayAccepted(Accepted):
    array_id: str


class ArrayAlreadyAccepted(Answer):
    """202 for a repeated array submit this API published but has not seen folded yet."""

    status: Literal["accepted"] = "accepted"
    array_id: str
    detail: str = "already submitted; not yet visible in this API's view"


class ArrayView(Answer):
    """A job array: what each element is, and how many of its elements are in each state."""

    array_id: str
    budget: str
    submitter: str
    name: str | None
    #: The indices (canonical expression), how many, and the first and last element's ids.
    indices: str
    count: int
    first_element: str
    last_element: str
    max_running: int | None
    pools: list[str]
    gpus: int
    gang: str
    min_runtime_s: int
    allocated: bool
    priority: int
    submitted_at: str
    #: Elements per status, of those the view holds (only statuses some element has); of an
    #: array the view has forgotten whole, as the read models keep them (all ``archived``).
    statuses: dict[str, int]
    #: Elements placed or running (what ``max_running`` bounds), and those pending but held
    #: back by it.
    running: int
    held: int
    #: Elements the view no longer holds (they ended before its window: ``fairshare history``).
    archived: int = 0


class ArrayCancelView(Answer):
    """What a cancel of a whole array did: pending elements end at once, running ones are
    stopped by the scheduler (202 until then)."""

    array_id: str
    #: Elements this request asked to cancel.
    cancelled: int
    #: Elements already cancelled or being cancelled, and those that had ended otherwise.
    already_cancelled: int
    ended: int
    #: Whether the view has folded every cancel this request recorded.
    visible: bool


class AlreadyAccepted(Answer):
    """202 for a repeated submit this API published but has not seen folded yet."""

    status: Literal["accepted"] = "accepted"
    workload_id: str
    detail: str = "already submitted; not yet visible in this API's view"


# -- why pending: one model per reason kind, told apart by ``code`` ----------------------------
# The codes are the core's (PendingCode); the words of each are services.api.sentences'.
class _Reason(Answer):
    code: str
    message: str


class PlainReason(_Reason):
    code: Literal[PendingCode.NO_SHARE, PendingCode.NO_NODES, PendingCode.UNALLOCATED]


class BudgetAheadView(Answer):
    budget: str
    rank: int | None
    usage_ratio: float | None
    workloads_ahead: int


class FairShareReason(_Reason):
    code: Literal[PendingCode.FAIR_SHARE]
    budget: str
    budget_rank: int | None
    budget_usage_ratio: float | None
    budgets_ahead: list[BudgetAheadView]


class FundedFirstReason(_Reason):
    """Burst work: funded (allocated) work is considered before any burst work."""

    code: Literal[PendingCode.FUNDED_FIRST]
    workloads_ahead: int
    budgets: list[str]


class BudgetQueueReason(_Reason):
    code: Literal[PendingCode.BUDGET_QUEUE]
    #: The first 20.
    workloads_ahead: list[str]


class CapacityReason(_Reason):
    """Whether and how the gang fits, with what the pool offers it now."""

    code: Literal[PendingCode.TOO_LARGE, PendingCode.FITS_NOW, PendingCode.INSUFFICIENT_CAPACITY]
    fits_now: bool
    needs_whole_nodes: bool
    free_gpus: int
    largest_free_node: str | None
    largest_free_gpus: int
    free_gpus_on_idle_nodes: int | None
    capacity: int
    largest_node_gpus: int
    #: GPUs of the pool's schedulable nodes held by work Fairshare did not place.
    foreign_gpus: int = 0


class ContractView(Answer):
    workload_id: str
    budget: str
    gpus: int
    min_runtime_s: int
    contract_ends_at: str


class ContractReason(_Reason):
    code: Literal[PendingCode.CONTRACT]
    waits_on: str
    contract_ends_at: str
    #: The first 10, soonest end first.
    contracts: list[ContractView]


class WorkloadsReason(_Reason):
    code: Literal[PendingCode.STARTING, PendingCode.RANKS_AHEAD]
    #: The first 10.
    workloads: list[str]


class CordonedReason(_Reason):
    code: Literal[PendingCode.CORDONED_NODES]
    nodes: list[str]
    gpus: int


class DownReason(_Reason):
    code: Literal[PendingCode.DOWN_NODES]
    nodes: list[str]


class ArrayLimitReason(_Reason):
    """Its job array runs as many elements as it allows at once (``%K``)."""

    code: Literal[PendingCode.ARRAY_LIMIT]
    array_id: str
    max_running: int
    running: int


Reason = Annotated[
    PlainReason
    | FairShareReason
    | FundedFirstReason
    | BudgetQueueReason
    | CapacityReason
    | ContractReason
    | WorkloadsReason
    | CordonedReason
    | DownReason
    | ArrayLimitReason,
    Field(discriminator="code"),
]


class QueueEntry(Answer):
    position: int
    workload_id: str
    budget: str
    submitter: str
    gpus: int
    gang: str
    min_runtime_s: int
    allocated: bool
    priority: int
    submitted_at: str
    budget_rank: int | None
    usage_ratio: float | None
    #: Absent (not null) when the queue was asked for without reasons.
    reasons: list[Reason] | None = Field(default=None, exclude_if=lambda value: value is None)
    name: str | None = None
    #: The one reason that decides (like squeue's REASON), and it in one sentence; null when
    #: the queue was asked for without reasons.
    reason: str | None = None
    summary: str | None = None
    #: When it should start (``GET /queue?start=true``, like ``squeue --start``); null beyond
    #: 7 days or when not asked for.
    estimated_start: str | None = None
    #: What the estimate rests on (``now``, ``history``, ``pool``, ``guess``).
    start_basis: str | None = None
    #: When it should start at the latest, every run lasting its time limit.
    latest_start: str | None = None
    #: The job array it is an element of, and its index there (null: of no array).
    array_id: str | None = None
    array_index: int | None = None


class PoolQueueView(Answer):
    pool: str
    capacity: int
    free_gpus: int
    largest_free_gpus: int
    cordoned_nodes: list[str]
    queue_length: int
    pending: list[QueueEntry]


class QueueView(Answer):
    as_of: str
    window_s: int
    pools: list[PoolQueueView]


class PendingInPool(Answer):
    pool: str
    position: int
    queue_length: int
    budget_rank: int | None
    usage_ratio: float | None
    reasons: list[Reason]
    #: The reason that decides, and it in one sentence.
    reason: str = ""
    summary: str = ""


# -- decision records ---------------------------------------------------------------------------
class PositionView(Answer):
    topic: str
    partition: int
    offset: int


class StandingView(Answer):
    budget: str
    rank: int
    share: float
    usage_gpu_s: int
    usage_ratio: float


class _CommandRecord(Answer):
    time: str
    command_id: str
    attempt: int
    pool: str
    reason: str
    detail: str
    pass_id: int
    input_position: list[PositionView]
    budgets: list[StandingView]


class PlacementRecord(_CommandRecord):
    placement: list[PlacementPart]


class PreemptionRecord(_CommandRecord):
    preemptor: str | None
    preemptor_budget: str | None
    requeue: bool
    grace_period_s: int
    message: str


class WhyView(Answer):
    workload_id: str
    status: str
    attempt: int
    as_of: str
    pending: list[PendingInPool]
    placements: list[PlacementRecord]
    preemptions: list[PreemptionRecord]
    #: Where it stands, in one sentence (the details are the fields above).
    summary: str = ""


# -- budgets ------------------------------------------------------------------------------------
class PoolFigures(Answer):
    share: float | None
    usage_gpu_s: float
    usage_ratio: float | None
    rank: int | None
    sibling_rank: int | None
    #: From the read models (null without them): integer GPU-seconds, as the charges report.
    owed_gpu_s: int | float | None
    delivered_gpu_s: int | float | None
    delivered_ratio: float | None
    demand_gpus: int
    #: min(share x capacity, demand): an int when the demand is the smaller.
    entitled_gpus: int | float | None
    #: 2^-usage_ratio, like sshare's FairShare: 1 unused, 0.5 used exactly its share, towards
    #: 0 the more it is over-served (orders siblings as the ratio does); null without a share.
    fairshare_factor: float | None = None


class NamespaceBinding(Answer):
    """A Kubernetes namespace of a cluster bound to a budget (``GroupBound``)."""

    budget: str
    cluster: str
    namespace: str
    #: The namespace's budget for work that names none.
    default: bool
    #: False: the budget is closed (or has become a parent), so the binding no longer lets
    #: work charge it.
    counts: bool
    bound_by: str
    bound_at: str


class NamespaceBindingList(Answer):
    as_of: str
    bindings: list[NamespaceBinding]


class NamespaceBindingChange(Answer):
    """A binding after a bind or unbind."""

    budget: str
    cluster: str
    namespace: str
    #: After a bind: whether it is the namespace's default now; after an unbind: false.
    default: bool
    #: False after a bind: it already was so; after an unbind: it was not bound.
    changed: bool
    #: After a bind as default: the budget that was the namespace's default until now.
    replaced_default: str | None = None


class AccountBinding(Answer):
    """A Slurm account of a cluster bound to a budget (``GroupBound``)."""

    budget: str
    cluster: str
    account: str
    #: The budget the account's work charges (the one it was bound to last); false: bound
    #: before, since replaced, and charged by nothing of the account.
    default: bool
    #: False: the budget is closed (or has become a parent), so the binding no longer lets
    #: work charge it.
    counts: bool
    bound_by: str
    bound_at: str


class AccountBindingList(Answer):
    as_of: str
    bindings: list[AccountBinding]


class AccountBindingChange(Answer):
    """A Slurm account's binding after a bind or unbind."""

    budget: str
    cluster: str
    account: str
    #: After a bind: true (the budget is the account's now); after an unbind: false.
    default: bool
    #: False after a bind: it already was so; after an unbind: it was not bound.
    changed: bool
    #: After a bind: the budget the account charged until now, if another.
    replaced_default: str | None = None


class BudgetView(Answer):
    budget: str
    parent: str | None
    depth: int
    leaf: bool
    closed: bool
    weight: float
    pool_weights: dict[str, float]
    members: dict[str, list[str]]
    pools: dict[str, PoolFigures]
    #: The Kubernetes namespaces bound to it (``POST /budgets/{budget}/namespaces``).
    namespaces: list[NamespaceBinding] = Field(default_factory=list)
    #: The Slurm accounts bound to it (``POST /budgets/{budget}/accounts``).
    accounts: list[AccountBinding] = Field(default_factory=list)


class BudgetDetail(BudgetView):
    as_of: str
    window_s: int


class PoolCapacity(Answer):
    pool: str
    capacity: int


class FiguresSource(Answer):
    """Where delivered and owed come from: the charges report's computation over the read
    models, for the hours ``from``..``to``, at the read models' horizon and log position."""

    from_: str | None = Field(alias="from", serialization_alias="from")
    to: str | None
    as_of: str | None
    log_position: str

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class BudgetReport(Answer):
    as_of: str
    window_s: int
    pools: list[PoolCapacity]
    #: How ``owed_gpu_s`` is computed, in words.
    owed: str
    budgets: list[BudgetView]
    #: Null when the API has no read models (then delivered and owed are null too).
    delivered_owed: FiguresSource | None = None


class WeightSet(Answer):
    budget: str
    weight: float
    pool: str | None
    event_id: str


class MemberGrant(Answer):
    budget: str
    user: str
    role: str
    #: False: the role was already held, nothing was published.
    changed: bool


class MemberRevoke(Answer):
    budget: str
    user: str
    role: str
    #: False: the role was not held on this budget, nothing was published.
    changed: bool
    #: An ancestor on which the user still holds the role (roles cover subtrees), if any.
    still_held_on: str | None = None


class BudgetState(Answer):
    """A budget after a create or close."""

    budget: str
    parent: str | None
    leaf: bool
    closed: bool
    weight: float
    pool_weights: dict[str, float]
    #: False: it already was so, nothing was published.
    changed: bool


# -- prices -------------------------------------------------------------------------------------
class PriceView(Answer):
    pool: str
    #: The subtree a negotiated rate is for; null: the pool's list price.
    budget: str | None
    currency: str
    #: Exact decimal text, never a float.
    per_gpu_hour: str
    effective_at: str
    set_by: str
    reason: str


class PriceList(Answer):
    #: The one billing currency (that of the first price); null before any price.
    currency: str | None
    #: By pool, subtree (list price first) and effective time.
    prices: list[PriceView]


class PriceSetView(PriceView):
    """A price after ``POST /prices``."""

    #: False: this very price was already set (a retried request), nothing was published.
    changed: bool
    event_id: str | None = None


class PriceAccepted(Accepted):
    pool: str


# -- nodes --------------------------------------------------------------------------------------
class ForeignHolderView(Answer):
    """Work Fairshare did not place holding GPUs of a node: a pod (``namespace/pod``, its
    scheduler) or a Slurm job (its id, partition and user when known)."""

    name: str
    gpus: int
    scheduler: str = ""
    partition: str = ""
    user: str = ""


class NodeView(Answer):
    node: str
    cluster: str
    pool: str
    gpu_type: str
    gpus: int
    used_gpus: int
    free_gpus: int
    #: idle, mixed, allocated, cordoned, draining, drained or down.
    state: str
    cordoned: bool
    down: bool
    drained: bool
    workloads: list[str]
    last_heartbeat: str | None
    #: Why, by whom and since when it is cordoned (like sinfo -R); empty when it is not.
    cordon_reason: str = ""
    cordoned_by: str | None = None
    cordoned_at: str | None = None
    #: GPUs held by work Fairshare did not place (off ``free_gpus``), what holds them, and
    #: since when it has had any (design 2.8).
    foreign_gpus: int = 0
    foreign_holders: list[ForeignHolderView] = []
    foreign_since: str | None = None


class NodeList(Answer):
    nodes: list[NodeView]


class PoolView(Answer):
    pool: str
    #: GPUs of its nodes that are up (cordoned ones included), free GPUs on nodes taking work.
    capacity: int
    free_gpus: int
    nodes: int


class PoolList(Answer):
    pools: list[PoolView]


#: What each write answers: the new state, or 202 with what was recorded.
SubmitAnswer = WorkloadView | WorkloadAccepted | AlreadyAccepted
ArraySubmitAnswer = ArrayView | ArrayAccepted | ArrayAlreadyAccepted
CancelAnswer = WorkloadView | WorkloadAccepted
WeightAnswer = WeightSet | BudgetAccepted
MemberAnswer = MemberGrant | BudgetAccepted
RevokeAnswer = MemberRevoke | BudgetAccepted
NamespaceBindingAnswer = NamespaceBindingChange | BudgetAccepted
AccountBindingAnswer = AccountBindingChange | BudgetAccepted
BudgetAnswer = BudgetState | BudgetAccepted
NodeAnswer = NodeView | NodeAccepted
PriceAnswer = PriceSetView | PriceAccepted


# -- the dashboard's data ------------------------------------------------------------------------
class RecentPreemption(Answer):
    workload_id: str
    budget: str | None
    submitter: str | None
    status: str | None
    time: str
    pool: str
    attempt: int
    reason: str
    preemptor: str | None
    preemptor_budget: str | None
    requeue: bool
    message: str


class RecentPreemptions(Answer):
    as_of: str
    preemptions: list[RecentPreemption]
