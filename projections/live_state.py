"""Everything the running system reads, folded from the log in one place.

The scheduler service, the API and the cluster agents all need the same picture: the cluster
(nodes, workloads, queues), the budget tree with its memberships, the latest usage snapshot per
pool and the decision record behind each command. They get it from this one composition of the
pure folds, so what the API says about a workload is what the scheduler acted on.

A live log can carry facts a fold rejects (a start for a workload nobody submitted, a weight
change for a budget that does not exist): they are kept in ``rejected`` and logged, and never
stop the reader. Before any fold sees a fact, the state's :class:`~projections.trust.Trust`
judges whether it may be believed at all (signed by a key that may state it, or written before
its signer had to sign); the key facts travel on their own topic, merged with the others like
any fact, and a fact signed by a key not read yet is held like any early fact.

Readers merge partitions by event time (``services/bus/follower.py``), so a fact rarely meets
the fold before what it depends on. What the merge cannot order (facts at equal times, a fact
produced after the reader read a partition's end but carrying an earlier time) is *held*
(``waiting``) and tried again after each fact that applies. A held fact is never rejected
because event time moved on (a backlog read after a restart spans hours): only when the reader,
having captured the log's end offsets after it was held (:meth:`LiveState.hold_mark`), has
read every partition that far and it still cannot apply (:meth:`LiveState.reject_held_before`),
or when more than ``MAX_WAITING`` facts are held at once (a memory bound; each is logged).

What the view holds is bounded by the live state, not by the history (issue 23): work that
ended ``FORGET_AFTER_S`` (the window and a day) before the latest fact leaves memory with its
commands and charge totals, the ids kept against redelivery are dropped a day at a time past
the same horizon, and a fact stated before the horizon is not folded at all. Nothing a pass, a
queue or a window figure reads is older than that; the log and the read models keep the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from events.envelope import Envelope
from events.models import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    DecisionRecord,
    GpuHeartbeat,
    GroupBound,
    GroupUnbound,
    LedgerCharge,
    MembershipGranted,
    MembershipRevoked,
    NodeAlive,
    PlaceCommand,
    PreemptCommand,
    PriceSet,
    SchedulerSettings,
    SigningKeyRegistered,
    SigningKeyRevoked,
    UsageSnapshot,
)
from events.models.ledger import parse_charge_id
from events.native_work import native_cluster
from events.serde import decode_structured, encode_structured
from events.times import DAY, DEFAULT_WINDOW_S, HOUR
from projections.bindings import GroupBindings
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.errors import FoldError, MissingFact
from projections.seen_ids import SeenIds
from projections.trust import UNKNOWN_KEY, Distrust, Trust
from projections.usage_snapshots import RankedUsage, usage_to_rank

log = logging.getLogger(__name__)

_BUDGET_EVENTS = (
    BudgetCreated,
    BudgetWeightChanged,
    BudgetClosed,
    MembershipGranted,
    MembershipRevoked,
    PriceSet,
)

_BINDING_FACTS = (GroupBound, GroupUnbound)

_KEY_FACTS = (SigningKeyRegistered, SigningKeyRevoked)


#: Events whose effect is the same however often they are applied (a heartbeat or a liveness
#: signal moves a node's last-seen time to the max, a snapshot replaces an older one): their
#: ids are not kept, so a long-running reader's memory does not grow with every signal of
#: every node.
_IDEMPOTENT = (GpuHeartbeat, NodeAlive, UsageSnapshot)
#: Facts that never supply what a held fact waits for (a workload, a node, a placement, GPUs
#: released, a budget): folding one does not retry the held facts. Heartbeats are most of the
#: log, and retrying every held fact after each of them made a reader that held a few hundred
#: facts during a long catch-up fold seven times slower than one that held none.
_NEVER_UNBLOCKS = (GpuHeartbeat, NodeAlive, UsageSnapshot, LedgerCharge, SchedulerSettings)
#: Work that ended this long before the latest fact leaves the in-memory view (the log and the
#: read models keep it): the fair-share window plus a day, so nothing a pass or a window
#: figure reads is ever forgotten.
FORGET_AFTER_S = DEFAULT_WINDOW_S + DAY
#: Rejected facts kept for ``/health`` and the tests (the newest; every one is logged).
REJECTED_KEPT = 1_000
#: At most this many facts are held at once; one more is rejected (and logged), so that a log
#: of facts that never apply cannot grow a reader's memory without bound.
MAX_WAITING = 10_000


@dataclass(frozen=True, slots=True)
class CommandRecord:
    """A command as the log holds it: when, what, and the decision record behind it.

    Kept as the command's JSON, decoded when read: a view holds the commands of a window's
    work, ended work included, and as models (a decision record ranks every budget of its pool
    and names every input position) they were nine tenths of a week-old scheduler's state
    (42 of 48 MiB for 2,600 workloads); as bytes they are a tenth of that. What a fold or a
    list reads of every command (its id, whether it preempts and why, the attempt) is kept
    beside the bytes, so only a reader that wants the decision record decodes it."""

    time: float
    command_id: str
    workload_id: str
    preempts: bool
    reason: str
    attempt: int
    encoded: bytes

    @classmethod
    def of(cls, time: float, command: PlaceCommand | PreemptCommand) -> CommandRecord:
        return cls(
            time,
            command.command_id,
            command.workload_id,
            isinstance(command, PreemptCommand),
            command.decision.reason,
            command.attempt,
            command.model_dump_json().encode(),
        )

    @property
    def command(self) -> PlaceCommand | PreemptCommand:
        kind = PreemptCommand if self.preempts else PlaceCommand
        return kind.model_validate_json(self.encoded)

    @property
    def decision(self) -> DecisionRecord:
        return self.command.decision


@dataclass
class RejectedFact:
    event_id: str
    type: str
    reason: str


@dataclass
class LiveState:
    cluster: ClusterState = field(default_factory=ClusterState)
    tree: BudgetTree = field(default_factory=BudgetTree)
    #: Which groups outside Fairshare (Kubernetes namespaces) may charge which budgets
    #: (``projections.bindings``; its rule ``namespace_budget`` reads it with ``tree``).
    bindings: GroupBindings = field(default_factory=GroupBindings)
    #: The latest usage snapshot per pool (by window end).
    usage: dict[str, UsageSnapshot] = field(default_factory=dict)
    #: The settings the latest leader stated it decides with (None: none stated yet).
    settings: SchedulerSettings | None = None
    #: Commands per workload, in log order.
    commands: dict[str, list[CommandRecord]] = field(default_factory=dict)
    #: Ids of every command seen (a scheduler that reads its own commands back issues none
    #: twice).
    command_ids: set[str] = field(default_factory=set)
    #: Event ids already folded (back to the horizon): a redelivered event is ignored.
    event_ids: SeenIds = field(default_factory=SeenIds)
    #: The newest ``REJECTED_KEPT`` rejected facts, and how many there were in all.
    rejected: list[RejectedFact] = field(default_factory=list)
    rejected_total: int = 0
    #: Facts that depend on one not read yet (a budget under a parent not yet read, a placement
    #: on a node not yet registered or on GPUs whose release is on another topic): tried again
    #: after each fact that applies. Partitions interleave as fetches return, so a reader
    #: cannot rely on cross-topic order.
    waiting: list[Envelope[Any]] = field(default_factory=list)
    #: When each held fact was first held (a count of holds), by event id.
    _held_at: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _holds: int = field(default=0, init=False, repr=False)
    #: GPU-seconds charged per workload, all attempts, corrections included: allocated
    #: (debited to its budget) and unallocated (free burst occupancy).
    charged_gpu_s: dict[str, int] = field(default_factory=dict)
    free_gpu_s: dict[str, int] = field(default_factory=dict)
    #: Per workload, its latest charged attempt and the end of its latest charged hour: what
    #: its running attempt used since is not charged yet (``figures.OpenRun.uncharged``).
    charged_through: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: Latest event time seen (epoch seconds).
    latest_time: float = 0.0
    events: int = 0
    #: How long ended work stays in memory after it ended (see ``FORGET_AFTER_S``).
    forget_after_s: float = FORGET_AFTER_S
    #: Facts stated before the horizon (``latest_time - forget_after_s``), not folded: a
    #: redelivery of one whose id was already forgotten, or a fact too late to matter here.
    beyond_horizon: int = 0
    #: Ended workloads forgotten so far.
    forgotten: int = 0
    #: Ended work that ended before this instant has left memory (the horizon at the last
    #: tidying; what ended since is all still here).
    forgotten_before: float = float("-inf")
    #: The tidying period (``latest_time // _tidy_every_s``) last tidied in.
    _tidied_period: int = field(default=0, init=False, repr=False)
    #: Who may state what, from the key facts folded so far (``projections.trust``): a fact
    #: not believed is rejected before anything else, its id not even kept (a forgery must
    #: not make the genuine fact of the same id look like a redelivery).
    trust: Trust = field(default_factory=lambda: Trust(horizon_s=FORGET_AFTER_S))
    #: Held facts signed by a key not read yet, by (id, signature): judged again when they
    #: are retried (by signature too: a forgery held so must not stand for the genuine fact).
    _unvouched: set[tuple[str, str | None]] = field(default_factory=set, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """For a checkpoint (``projections.checkpoint``): held facts are envelopes of a generic
        model, which pickle cannot name, so they travel as the log states them."""
        state = self.__dict__.copy()
        state["waiting"] = [encode_structured(envelope) for envelope in self.waiting]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["waiting"] = [decode_structured(line) for line in state["waiting"]]
        # a checkpoint from before signed facts: no key was registered in what it folded
        state.setdefault("trust", Trust(horizon_s=state.get("forget_after_s", FORGET_AFTER_S)))
        state.setdefault("_unvouched", set())
        # a checkpoint from before group bindings: none was stated in what it folded
        state.setdefault("bindings", GroupBindings())
        self.__dict__.update(state)

    @property
    def horizon(self) -> float:
        """Facts stated before this instant are not folded, and ended work before it is gone
        from memory: what a live reader holds is bounded by the live state, not by history."""
        return self.latest_time - self.forget_after_s

    def apply(self, envelope: Envelope[Any]) -> bool:
        """Fold one event in; False if it was a duplicate, was rejected or has to wait."""
        at = float(envelope.epoch_seconds)
        if at < self.horizon:
            self.beyond_horizon += 1
            return False
        verdict = self.trust.judge(envelope, self)
        if verdict is not None:
            waits = verdict.kind == UNKNOWN_KEY and not self.trust.knows_every_key
            if waits and len(self.waiting) < MAX_WAITING:
                self._unvouched.add((envelope.id, envelope.signature))
                self._hold(envelope)
            else:
                self._distrust(envelope, verdict)
            return False
        if self.event_ids.seen(envelope.id, at):
            return False
        if not isinstance(envelope.data, _IDEMPOTENT):
            self.event_ids.add(envelope.id, at)
        applied = self._apply(envelope)
        if applied and self.waiting and not isinstance(envelope.data, _NEVER_UNBLOCKS):
            self._retry_waiting()
        if applied and int(self.latest_time // self._tidy_every_s) > self._tidied_period:
            self._tidy()
        return applied

    @property
    def _tidy_every_s(self) -> float:
        return max(1.0, min(DAY, self.forget_after_s))

    def _tidy(self) -> None:
        """Once a day of event time (or once a horizon, if shorter): forget the ids and the
        ended work before the horizon.
        Driven by event time only, so every reader of one log forgets the same things at the
        same fact (a checkpoint plus its tail is the whole fold; the audit re-derives passes
        from the same state the leader had)."""
        self._tidied_period = int(self.latest_time // self._tidy_every_s)
        horizon = self.horizon
        self.forgotten_before = max(self.forgotten_before, horizon)
        self.event_ids.forget_before(horizon)
        for workload_id in self.cluster.forget_ended_before(horizon):
            self.forgotten += 1
            for record in self.commands.pop(workload_id, ()):
                self.command_ids.discard(record.command_id)
            self.charged_gpu_s.pop(workload_id, None)
            self.free_gpu_s.pop(workload_id, None)
            self.charged_through.pop(workload_id, None)

    def _charged_through(self, charge: LedgerCharge) -> None:
        parsed = parse_charge_id(charge.charge_id)
        if parsed is None:
            return
        _workload, attempt, hour, _revision = parsed
        through = (attempt, float(hour + HOUR))
        known = self.charged_through.get(charge.workload_id)
        if known is None or through > known:
            self.charged_through[charge.workload_id] = through

    def _retry_waiting(self) -> None:
        progress = True
        while progress and self.waiting:
            waiting, self.waiting = self.waiting, []
            progress = False
            for envelope in waiting:
                progress |= self._apply(envelope)

    def hold_mark(self) -> int:
        """A mark to take *before* reading the log's end offsets: every fact held so far was
        read before those ends, and so was what it depends on (produced before it)."""
        return self._holds

    def reject_held_before(self, mark: int, reason: str = "") -> int:
        """The reader has read every partition to the ends it captured after ``mark``: a fact
        held before the mark that still cannot apply never will. Returns how many."""
        stale = [e for e in self.waiting if self._held_since(e, mark) < mark]
        if not stale:
            return 0
        self.waiting = [e for e in self.waiting if self._held_since(e, mark) >= mark]
        for envelope in stale:
            self._held_at.pop(envelope.id, None)
            if (envelope.id, envelope.signature) in self._unvouched:
                verdict = self.trust.judge(envelope, self)
                if verdict is not None:  # the key never came: not believed, whatever else
                    self._distrust(envelope, verdict)
                    continue
                self._unvouched.discard((envelope.id, envelope.signature))
            self._reject(
                envelope, reason or "still inapplicable after the whole log was read past it"
            )
        return len(stale)

    def _hold(self, envelope: Envelope[Any]) -> None:
        self.waiting.append(envelope)
        if envelope.id not in self._held_at:
            self._held_at[envelope.id] = self._holds
            self._holds += 1

    def _distrust(self, envelope: Envelope[Any], verdict: Distrust) -> None:
        self._unvouched.discard((envelope.id, envelope.signature))
        self.trust.refuse(envelope, verdict)
        self._reject(envelope, f"not believed ({verdict.kind}): {verdict.reason}")

    def _vouched(self, envelope: Envelope[Any]) -> bool:
        """A held fact signed by a key unknown when it was read: whether it may be folded
        now (judged and its id kept as :meth:`apply` would have), else held or refused."""
        verdict = self.trust.judge(envelope, self)
        if verdict is not None and verdict.kind == UNKNOWN_KEY:
            self.waiting.append(envelope)
            return False
        self._unvouched.discard((envelope.id, envelope.signature))
        if verdict is not None:
            self._held_at.pop(envelope.id, None)
            self._distrust(envelope, verdict)
            return False
        at = float(envelope.epoch_seconds)
        if self.event_ids.seen(envelope.id, at):
            self._held_at.pop(envelope.id, None)
            return False
        if not isinstance(envelope.data, _IDEMPOTENT):
            self.event_ids.add(envelope.id, at)
        return True

    # -- what the trust asks (projections.trust.Owners) --------------------------------------
    def node_cluster(self, node: str) -> str | None:
        state = self.cluster.nodes.get(node)
        return state.cluster if state is not None else None

    def run_cluster(self, workload_id: str, attempt: int) -> str | None:
        workload = self.cluster.workloads.get(workload_id)
        if workload is None or workload.attempt != attempt or not workload.placement:
            return None
        return self.node_cluster(workload.placement[0][0])

    def native_cluster_of(self, workload_id: str) -> str | None:
        workload = self.cluster.workloads.get(workload_id)
        if workload is None:
            return None
        return native_cluster(workload.spec) or ""

    def _held_since(self, envelope: Envelope[Any], mark: int) -> int:
        """When ``envelope`` was held; a fact held for its key whose id a genuine fact has
        since taken (and with it the hold's mark) counts as held before any mark."""
        unvouched = (envelope.id, envelope.signature) in self._unvouched
        return self._held_at.get(envelope.id, -1 if unvouched else mark)

    def _reject(self, envelope: Envelope[Any], reason: str) -> None:
        self.rejected_total += 1
        self.rejected.append(RejectedFact(envelope.id, envelope.type, reason))
        if len(self.rejected) > REJECTED_KEPT:
            del self.rejected[: len(self.rejected) - REJECTED_KEPT]
        log.warning(
            "fact rejected by the fold",
            extra={"event_id": envelope.id, "type": envelope.type, "reason": reason},
        )

    def _apply(self, envelope: Envelope[Any]) -> bool:
        unvouched = self._unvouched and (envelope.id, envelope.signature) in self._unvouched
        if unvouched and not self._vouched(envelope):
            return False
        data = envelope.data
        now = float(envelope.epoch_seconds)
        try:
            if isinstance(data, _KEY_FACTS):
                pass  # folded into the trust's key book when judged
            elif isinstance(data, _BUDGET_EVENTS):
                self.tree.apply(data, now)
            elif isinstance(data, _BINDING_FACTS):
                self.bindings.apply(data, now, self.tree)
            elif isinstance(data, LedgerCharge):
                totals = self.charged_gpu_s if data.kind == "allocated" else self.free_gpu_s
                totals[data.workload_id] = totals.get(data.workload_id, 0) + data.signed_gpu_seconds
                self._charged_through(data)
            elif isinstance(data, SchedulerSettings):
                self.settings = data
            elif isinstance(data, UsageSnapshot):
                current = self.usage.get(data.pool)
                if current is None or data.window_end >= current.window_end:
                    self.usage[data.pool] = data
            else:
                if isinstance(data, PlaceCommand | PreemptCommand):
                    if data.command_id in self.command_ids:
                        return False
                    self.cluster.apply(data, now)
                    self.command_ids.add(data.command_id)
                    self.commands.setdefault(data.workload_id, []).append(
                        CommandRecord.of(now, data)
                    )
                else:
                    self.cluster.apply(data, now)
        except MissingFact as error:
            if envelope.id in self._held_at or len(self.waiting) < MAX_WAITING:
                self._hold(envelope)
                return False
            self._reject(envelope, f"{error} (and {MAX_WAITING} facts already wait)")
            return False
        except FoldError as error:
            self._held_at.pop(envelope.id, None)
            self._reject(envelope, str(error))
            return False
        self._held_at.pop(envelope.id, None)
        self.latest_time = max(self.latest_time, now)
        self.events += 1
        return True

    def record_own(self, envelope: Envelope[Any]) -> None:
        """Note an event whose effect on the cluster was already folded in by the one who
        decided it (a scheduling pass folds its decisions as it makes them): when it comes back
        from the log it is known by id and not applied twice."""
        self.event_ids.add(envelope.id, float(envelope.epoch_seconds))
        data = envelope.data
        if (
            isinstance(data, PlaceCommand | PreemptCommand)
            and data.command_id not in self.command_ids
        ):
            self.command_ids.add(data.command_id)
            self.commands.setdefault(data.workload_id, []).append(
                CommandRecord.of(float(envelope.epoch_seconds), data)
            )

    # -- reading ---------------------------------------------------------------------------
    def usage_in_window(self, pool: str, now: float) -> RankedUsage:
        """What a pass ranks ``pool``'s budgets on at ``now``
        (:func:`projections.usage_snapshots.usage_to_rank`)."""
        return usage_to_rank(self.usage.get(pool), self.cluster, pool, now)

    def usage_source(self, now: float) -> _UsageAt:
        return _UsageAt(self, now)


class _UsageAt:
    """The scheduler core's usage source at one instant."""

    def __init__(self, state: LiveState, now: float) -> None:
        self._state, self._now = state, now
        self._cache: dict[str, Mapping[str, float]] = {}

    def __call__(self, pool: str) -> Mapping[str, float]:
        cached = self._cache.get(pool)
        if cached is None:
            cached = self._cache[pool] = self._state.usage_in_window(pool, self._now)
        return cached
