"""Whether a record may be believed: the one judgement every reader of the log makes.

The log is written by many hands: the API, the schedulers, charging, an agent per cluster,
the operators. Access control on the broker decides who may write a topic; it cannot say
that an agent of cluster A wrote a heartbeat for a node of cluster B, nor that a charge on the
ledger was posted by charging and not typed in by hand, and an export file carries no broker
at all. So every fact is signed by whoever states it (``events.signing``), the keys are facts
themselves (``events.models.keys``), and :func:`judge` decides, from the record, the keys and
what the reader knows of nodes and runs, whether the record may be believed:

* signed by a registered key whose signature verifies over the record as it is;
* not after that key's revocation (by event time: see below);
* by a role that may state that fact (:data:`STATED_BY`): the API what the API accepts, the
  scheduler its decisions, charging the ledger and usage, an agent only facts of its own
  cluster's nodes and runs, and the submission and cancellation of work its own cluster's
  users sent there natively (``events.native_work``; :func:`_agent_scope`);
* and, where no key of the stating role is registered yet, or the record is dated before
  the registration's ``required_from``, unsigned (history written before signing began).

Every reader uses it: the live state (scheduler, API view, agents, decision audit) through
:class:`Trust` inside ``LiveState``, charging and the projector through the same
:class:`Trust` over the keys they read, the charge audit over the whole log. What is refused
is never folded; the consumers that own dead letters dead-letter it with :attr:`Distrust.reason`.

**Event time, not log position, is the clock of keys.** A revocation takes effect at its
event time and a key's records dated before it stay believed; ``required_from`` compares with
the record's event time too. Event time is the one order every reader shares: the live
readers merge partitions by it, an export file has no offsets, and the keys topic's offsets
are not comparable with any other partition's. Its price: a thief of a key can date forgeries
before the key's revocation, and anyone who can write the log can date an unsigned record
before ``required_from``. A log signed from its first record (``fairshare up``: the epoch)
has no such window for unsigned records; docs/signed-facts.md says what a revocation does
and does not undo.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from events.envelope import Envelope
from events.models import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    DeadLetter,
    EventData,
    GpuHeartbeat,
    GroupBound,
    GroupUnbound,
    LedgerCharge,
    MembershipGranted,
    MembershipRevoked,
    NodeAlive,
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeForeignGpus,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
    PeriodClosed,
    PlaceCommand,
    PreemptCommand,
    PriceSet,
    SchedulerSettings,
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
)
from events.models.keys import identity, public_key_bytes
from events.native_work import native_cluster
from events.signing import content_bytes, verifies

ADMIN, API, SCHEDULER, CHARGING, AGENT = "admin", "api", "scheduler", "charging", "agent"
_ACCEPTED_BY_API = frozenset({API, ADMIN})

#: Who may state each fact. The admin may state what the API accepts (the operators' own
#: writes: the demo lab, a budget tree set up by hand) and is the only one who states keys.
#: A fact missing here is believed from no one: tests/unit/test_trust.py keeps it complete.
STATED_BY: Mapping[type[EventData], frozenset[str]] = {
    # and an agent for work its own cluster's users sent there natively (a Kubernetes Job
    # applied with Fairshare's scheduler name), which only that agent sees arrive and go
    WorkloadSubmitted: _ACCEPTED_BY_API | {AGENT},
    WorkloadArraySubmitted: _ACCEPTED_BY_API,
    WorkloadCancelled: _ACCEPTED_BY_API | {AGENT},
    BudgetCreated: _ACCEPTED_BY_API,
    BudgetClosed: _ACCEPTED_BY_API,
    BudgetWeightChanged: _ACCEPTED_BY_API,
    MembershipGranted: _ACCEPTED_BY_API,
    MembershipRevoked: _ACCEPTED_BY_API,
    # a budget's manager binds a namespace to it through the API (who manages is the API's
    # check, as for members): the binding stops a team charging another team's budget
    GroupBound: _ACCEPTED_BY_API,
    GroupUnbound: _ACCEPTED_BY_API,
    PriceSet: _ACCEPTED_BY_API,
    # an admin through the API, or a shared cluster's agent for its own node
    NodeCordoned: frozenset({API, ADMIN, AGENT}),
    NodeUncordoned: frozenset({API, ADMIN, AGENT}),
    WorkloadPlaced: frozenset({SCHEDULER}),
    WorkloadRequeued: frozenset({SCHEDULER}),
    PlaceCommand: frozenset({SCHEDULER}),
    PreemptCommand: frozenset({SCHEDULER}),
    SchedulerSettings: frozenset({SCHEDULER}),
    NodeDrained: frozenset({SCHEDULER}),
    NodeDown: frozenset({SCHEDULER}),
    NodeUp: frozenset({SCHEDULER}),
    # the scheduler for a dead node's runs, an agent for a run it cannot recover
    WorkloadLost: frozenset({SCHEDULER, AGENT}),
    WorkloadStarted: frozenset({AGENT}),
    WorkloadPreempted: frozenset({AGENT}),
    WorkloadFinished: frozenset({AGENT}),
    NodeRegistered: frozenset({AGENT}),
    # GPUs of its own node held by work Fairshare did not place
    NodeForeignGpus: frozenset({AGENT}),
    GpuHeartbeat: frozenset({AGENT}),
    NodeAlive: frozenset({AGENT}),
    LedgerCharge: frozenset({CHARGING}),
    UsageSnapshot: frozenset({CHARGING}),
    PeriodClosed: frozenset({CHARGING}),
    SigningKeyRegistered: frozenset({ADMIN}),
    SigningKeyRevoked: frozenset({ADMIN}),
}
#: Believed signed or not: a consumer's report of a record it could not use changes no figure,
#: and the dead-letter office of a consumer that holds no key must still be able to write it.
UNJUDGED: tuple[type[EventData], ...] = (DeadLetter,)
KEY_FACTS = (SigningKeyRegistered, SigningKeyRevoked)
#: Signed facts whose ids are not kept against replays: re-stating one changes nothing (a
#: last-seen time, the newest snapshot), and they are most of the log.
_NOT_TRACKED = (GpuHeartbeat, NodeAlive, UsageSnapshot)

#: Batch signatures remembered per key (``events.signing``, "Batches"): a reader meets a
#: batch's records within a few thousand records of each other.
_BATCHES_KEPT = 4096

#: Why a record is not believed (:attr:`Distrust.kind`).
UNSIGNED = "unsigned"
UNKNOWN_KEY = "unknown-key"
BAD_SIGNATURE = "bad-signature"
REVOKED = "revoked"
NOT_ITS_FACT = "not-its-fact"
REPLAYED = "replayed"


@dataclass(frozen=True, slots=True)
class Distrust:
    """A record that must not be believed: the kind (above) and a sentence naming the fact,
    the key and the rule (what a dead letter and an audit report say)."""

    kind: str
    reason: str


class Owners(Protocol):
    """What a reader knows of whose nodes and runs are whose (None: it does not know)."""

    def node_cluster(self, node: str) -> str | None: ...

    def run_cluster(self, workload_id: str, attempt: int) -> str | None: ...

    def native_cluster_of(self, workload_id: str) -> str | None:
        """The cluster whose users sent the workload natively; "" for work submitted through
        the API; None when the reader does not know the workload."""
        ...


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A registered key as of everything the book has folded."""

    key_id: str
    public_key: bytes
    role: str
    cluster: str | None
    registered_at: float
    required_from: float
    revoked_at: float | None = None

    @property
    def identity(self) -> str:
        return identity(self.role, self.cluster)

    def speaks_at(self, at: float) -> bool:
        return self.revoked_at is None or at < self.revoked_at


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _event_time(envelope: Envelope[Any]) -> float:
    """To the microsecond: a revocation half a second after a record must not refuse it."""
    return envelope.time.timestamp()


class KeyBook:
    """The fold of the key facts: which key speaks for whom, from when, until when.

    A key fact is itself judged here: only an admin key may register or revoke, and the very
    first admin key registers itself (its registration signed by the key it registers): the
    log's first admin is its trust anchor, so a log is trusted as far as its first key fact
    is (docs/signed-facts.md, "Where trust starts")."""

    def __init__(self) -> None:
        self.keys: dict[str, KeyEntry] = {}
        #: The earliest ``required_from`` of each identity's keys (``agent:<cluster>`` too).
        self._required: dict[str, float] = {}
        #: Verifying keys, made once per key, and each key's batch signatures found good
        #: (not state: rebuilt after unpickling; a cache, so it changes no judgement).
        self._verifiers: dict[str, Ed25519PublicKey] = {}
        self._batches: dict[str, dict[bytes, None]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"keys": self.keys, "_required": self._required}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._verifiers = {}
        self._batches = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyBook) and self.keys == other.keys

    __hash__ = None  # type: ignore[assignment]  # mutable

    def key(self, key_id: str) -> KeyEntry | None:
        return self.keys.get(key_id)

    @property
    def requires_any(self) -> bool:
        """Whether any signer but the admin must sign (else every unsigned fact stands)."""
        return any(not name.startswith(ADMIN) for name in self._required)

    def verifies(self, envelope: Envelope[Any], key: KeyEntry) -> bool:
        verifier = self._verifiers.get(key.key_id)
        if verifier is None:
            verifier = self._verifiers[key.key_id] = Ed25519PublicKey.from_public_bytes(
                key.public_key
            )
        batches = self._batches.get(key.key_id)
        if batches is None:
            batches = self._batches[key.key_id] = {}
        elif len(batches) >= _BATCHES_KEPT:
            # the oldest half goes: a batch's records are read close together in the log
            for old in list(batches)[: _BATCHES_KEPT // 2]:
                del batches[old]
        return verifies(envelope, verifier, batches)

    def required_from(self, roles: Iterable[str], cluster: str | None) -> float | None:
        """Since when records of a fact stated by ``roles`` must be signed (None: not yet).
        The admin does not count: an admin key alone does not oblige the API to sign. For an
        agent's fact of an unknown cluster, any agent's key counts."""
        since: float | None = None
        for role in roles:
            if role == ADMIN:
                continue
            if role == AGENT and cluster is None:
                found = [at for name, at in self._required.items() if name.startswith("agent:")]
            else:
                at = self._required.get(identity(role, cluster if role == AGENT else None))
                found = [] if at is None else [at]
            for at in found:
                since = at if since is None else min(since, at)
        return since

    def apply(self, envelope: Envelope[Any]) -> Distrust | None:
        """Fold a key fact if it may be believed; else say why not (nothing changes)."""
        data = envelope.data
        at = _event_time(envelope)
        if envelope.signer is None:
            return Distrust(UNSIGNED, f"{envelope.type} {envelope.subject}: key facts are signed")
        if isinstance(data, SigningKeyRegistered):
            return self._register(envelope, data, at)
        assert isinstance(data, SigningKeyRevoked)
        return self._revoke(envelope, data, at)

    def _admin_signed(self, envelope: Envelope[Any], at: float) -> Distrust | None:
        signer = self.keys.get(envelope.signer or "")
        what = f"{envelope.type} {envelope.subject}"
        if signer is None:
            return Distrust(UNKNOWN_KEY, f"{what}: signed by {envelope.signer}, no registered key")
        if not self.verifies(envelope, signer):
            return Distrust(BAD_SIGNATURE, f"{what}: the signature is not {signer.identity}'s")
        if signer.role != ADMIN:
            return Distrust(NOT_ITS_FACT, f"{what}: {signer.identity} may not state keys (admin)")
        if not signer.speaks_at(at):
            return Distrust(REVOKED, f"{what}: signed by {signer.key_id} after its revocation")
        return None

    def _register(
        self, envelope: Envelope[Any], data: SigningKeyRegistered, at: float
    ) -> Distrust | None:
        known = self.keys.get(data.key_id)
        raw = public_key_bytes(data.public_key)
        first_admin = not any(key.role == ADMIN for key in self.keys.values())
        if envelope.signer == data.key_id and data.role == ADMIN and first_admin:
            # The anchor: self-signed, so at least it proves the holder of the key wrote it.
            verifier = Ed25519PublicKey.from_public_bytes(raw)
            if not verifies(envelope, verifier):
                return Distrust(BAD_SIGNATURE, f"{envelope.type} {data.key_id}: bad self-signature")
        else:
            problem = self._admin_signed(envelope, at)
            if problem is not None:
                return problem
        entry = KeyEntry(
            data.key_id, raw, data.role, data.cluster, at, data.required_from.timestamp()
        )
        if known is not None:
            if (known.public_key, known.role, known.cluster) == (raw, data.role, data.cluster):
                return None  # stated again: the first registration stands
            return Distrust(
                NOT_ITS_FACT, f"{envelope.type} {data.key_id}: registered already as "
                f"{known.identity}; a key speaks for one signer"
            )  # fmt: skip
        self.keys[data.key_id] = entry
        since = self._required.get(entry.identity, entry.required_from)
        self._required[entry.identity] = min(since, entry.required_from)
        return None

    def _revoke(
        self, envelope: Envelope[Any], data: SigningKeyRevoked, at: float
    ) -> Distrust | None:
        problem = self._admin_signed(envelope, at)
        if problem is not None:
            return problem
        known = self.keys.get(data.key_id)
        if known is None:
            return Distrust(UNKNOWN_KEY, f"{envelope.type} {data.key_id}: no such key registered")
        if known.revoked_at is None or at < known.revoked_at:
            self.keys[data.key_id] = KeyEntry(
                known.key_id,
                known.public_key,
                known.role,
                known.cluster,
                known.registered_at,
                known.required_from,
                at,
            )
        return None


def _claimed_cluster(data: EventData, owners: Owners) -> str | None:
    """The cluster an agent's fact is about, as the record or the reader knows it."""
    cluster = getattr(data, "cluster", None)
    if isinstance(cluster, str):
        return cluster
    if isinstance(data, NodeCordoned | NodeUncordoned):
        return owners.node_cluster(data.node)
    if isinstance(data, WorkloadStarted):
        nodes = data.placement.nodes
        return owners.node_cluster(nodes[0].node) if nodes else None
    if isinstance(data, WorkloadPreempted | WorkloadFinished | WorkloadLost):
        return owners.run_cluster(data.workload_id, data.attempt)
    if isinstance(data, WorkloadSubmitted):
        return native_cluster(data.spec)
    if isinstance(data, WorkloadCancelled):
        return owners.native_cluster_of(data.workload_id) or None
    return None


def _agent_scope(data: EventData, cluster: str | None, owners: Owners) -> str | None:
    """Why an agent of ``cluster`` may not state ``data`` (None: it may). A reader refuses
    what it knows to be another cluster's; a node or run it knows nothing of is taken on the
    record's word (its cluster field, its placement), which is the signer's own."""
    nodes: list[str] = []
    if isinstance(data, NodeRegistered | NodeForeignGpus | GpuHeartbeat | NodeAlive):
        if data.cluster != cluster:
            return f"it names cluster {data.cluster}"
        nodes = [data.node]
    elif isinstance(data, NodeCordoned | NodeUncordoned):
        nodes = [data.node]
    elif isinstance(data, WorkloadSubmitted):
        origin = native_cluster(data.spec)
        if origin != cluster:
            return "it is not native work of its cluster" + (
                f" (its spec names cluster {origin})" if origin else ""
            )
    elif isinstance(data, WorkloadCancelled):
        origin = owners.native_cluster_of(data.workload_id)
        if origin is not None and origin != cluster:
            return f"workload {data.workload_id} is not native work of its cluster" + (
                f" (but of cluster {origin})" if origin else " (it came through the API)"
            )
    elif isinstance(data, WorkloadStarted):
        nodes = [gpus.node for gpus in data.placement.nodes]
    elif isinstance(data, WorkloadPreempted | WorkloadFinished | WorkloadLost):
        run = owners.run_cluster(data.workload_id, data.attempt)
        if run is not None and run != cluster:
            return f"run {data.workload_id}#{data.attempt} is on cluster {run}"
        nodes = [data.node] if isinstance(data, WorkloadLost) else []
    for node in nodes:
        owner = owners.node_cluster(node)
        if owner is not None and owner != cluster:
            return f"node {node} is cluster {owner}'s"
    return None


def judge(envelope: Envelope[Any], book: KeyBook, owners: Owners) -> Distrust | None:
    """None if ``envelope`` may be believed, else why not (see the module docstring). Pure
    but for the book's cache of verifying keys; a key fact is judged by :meth:`KeyBook.apply`
    (which folds it), so here it is only checked, never folded."""
    data = envelope.data
    if envelope.signer is None and not book.requires_any and not isinstance(data, KEY_FACTS):
        return None  # a log before signed facts: the path of every unsigned log, kept short
    if isinstance(data, UNJUDGED):
        return None
    roles = STATED_BY.get(type(data), frozenset())
    at = _event_time(envelope)
    what = f"{envelope.type} {envelope.subject}"
    if envelope.signer is None:
        if isinstance(data, KEY_FACTS):
            return Distrust(UNSIGNED, f"{what}: key facts are signed")
        since = book.required_from(roles, _claimed_cluster(data, owners))
        if since is not None and at >= since:
            who = " or ".join(sorted(roles - {ADMIN}))
            return Distrust(UNSIGNED, f"{what}: unsigned, and {who} signs since {_iso(since)}")
        return None
    key = book.key(envelope.signer)
    if key is None:
        return Distrust(UNKNOWN_KEY, f"{what}: signed by {envelope.signer}, no registered key")
    if not book.verifies(envelope, key):
        return Distrust(
            BAD_SIGNATURE, f"{what}: the signature is not {key.identity}'s key {key.key_id}"
        )
    if not key.speaks_at(at):
        assert key.revoked_at is not None
        return Distrust(
            REVOKED, f"{what}: signed by {key.identity}'s key {key.key_id}, revoked at "
            f"{_iso(key.revoked_at)}, for an event at {_iso(at)}"
        )  # fmt: skip
    if key.role not in roles:
        allowed = " or ".join(sorted(roles)) or "no one"
        return Distrust(NOT_ITS_FACT, f"{what}: {key.identity} may not state it ({allowed} may)")
    if key.role != AGENT and isinstance(data, WorkloadSubmitted) and native_cluster(data.spec):
        return Distrust(
            NOT_ITS_FACT, f"{what}: {key.identity} may not state native work (its cluster's "
            "agent may)",
        )  # fmt: skip
    if key.role == AGENT:
        problem = _agent_scope(data, key.cluster, owners)
        if problem is not None:
            return Distrust(NOT_ITS_FACT, f"{what}: {key.identity} may not state it: {problem}")
    return None


def content_digest(envelope: Envelope[Any]) -> bytes:
    """What a replay is compared on: the record's content, whoever signed it
    (:func:`events.signing.content_bytes`), in 16 bytes."""
    return hashlib.blake2b(content_bytes(envelope), digest_size=16).digest()


def _key_fact_rank(envelope: Envelope[Any]) -> int:
    """At equal times: the anchor (a self-signed registration) vouches for the other
    registrations, and a key is registered before it is revoked."""
    if isinstance(envelope.data, SigningKeyRevoked):
        return 2
    return 0 if envelope.signer == envelope.subject else 1


@dataclass(frozen=True, slots=True)
class Refusal:
    """A record a reader did not believe, for its health, its dead letters and the audit."""

    event_id: str
    type: str
    subject: str
    signer: str | None
    kind: str
    reason: str


#: Facts a believed one of which tells whose a node is when no registration said (spec 7.6):
#: the first such fact of a node decides, so a reader of part of a log must meet every one of
#: them up to that first believed one (``services.audit.parallel``).
NODE_WITNESSES = (GpuHeartbeat, NodeAlive)


class NodesAndRuns:
    """Whose nodes and runs are whose, for a reader that has no cluster fold of its own
    (charging, the projector, the charge audit): learned from believed facts only."""

    def __init__(self) -> None:
        self.nodes: dict[str, str] = {}
        #: Each workload's latest run: (attempt, cluster); gone when the run ends.
        self.runs: dict[str, tuple[int, str]] = {}

    def node_cluster(self, node: str) -> str | None:
        return self.nodes.get(node)

    def run_cluster(self, workload_id: str, attempt: int) -> str | None:
        run = self.runs.get(workload_id)
        return run[1] if run is not None and run[0] == attempt else None

    def native_cluster_of(self, workload_id: str) -> str | None:
        """Not known here (submissions are not followed): a cancellation is taken on the
        signer's word, as the live state's readers, who decide on it, are not."""
        return None

    def note(self, data: EventData) -> None:
        if isinstance(data, NodeRegistered):
            self.nodes[data.node] = data.cluster
        elif isinstance(data, NODE_WITNESSES):
            self.nodes.setdefault(data.node, data.cluster)
        elif isinstance(data, WorkloadPlaced | WorkloadStarted):
            nodes = data.placement.nodes
            cluster = self.nodes.get(nodes[0].node) if nodes else None
            if cluster is not None:
                self.runs[data.workload_id] = (data.attempt, cluster)
        elif isinstance(data, WorkloadPreempted | WorkloadFinished | WorkloadLost):
            run = self.runs.get(data.workload_id)
            if run is not None and run[0] == data.attempt:
                del self.runs[data.workload_id]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodesAndRuns) and (self.nodes, self.runs) == (
            other.nodes,
            other.runs,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable


_DAY = 86_400


class Trust:
    """:func:`judge` with the state a reader keeps for it: the key book, the nodes and runs
    it learned (unless the reader passes its own :class:`Owners`), the content of every
    signed fact by id (a replay of an id with other content is refused), and the refusals.

    Ids are kept by the day of their event time and dropped past ``horizon_s`` behind the
    newest fact (None: never, for an audit), as the live state drops its seen ids."""

    #: Whether every key there will be is known already (an audit's): then a record signed by
    #: an unknown key is refused at once, never held for its key.
    knows_every_key = False

    def __init__(self, horizon_s: float | None = None, keep_refusals: int | None = 1000) -> None:
        self.book = KeyBook()
        self.owners = NodesAndRuns()
        self.horizon_s = horizon_s
        self.keep_refusals = keep_refusals
        self.refusals: list[Refusal] = []
        #: Refusals per kind, all of them.
        self.refused: dict[str, int] = {}
        self._contents: dict[int, dict[str, bytes]] = {}
        self._latest = 0.0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trust) and (self.book, self.owners, self._contents) == (
            other.book,
            other.owners,
            other._contents,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def judge(self, envelope: Envelope[Any], owners: Owners | None = None) -> Distrust | None:
        """Judge ``envelope`` and, if it is believed, learn from it: a key fact is folded into
        the book, a node or run noted (unless ``owners`` is the reader's own), its content
        kept against replays. A refusal is not recorded here (:meth:`refuse`): a reader that
        holds a record signed by a key it has not read yet judges it again later."""
        data = envelope.data
        if isinstance(data, KEY_FACTS):
            verdict = self.book.apply(envelope)
        else:
            verdict = judge(envelope, self.book, owners if owners is not None else self.owners)
        if verdict is None and envelope.signer is not None and not isinstance(data, _NOT_TRACKED):
            verdict = self._same_content(envelope)
        if verdict is None and owners is None:
            self.owners.note(data)
        return verdict

    @property
    def stated(self) -> Mapping[int, Mapping[str, bytes]]:
        """The content digest of every signed fact believed, by the day of its event time and
        its id: what a record re-stated under one of these ids is checked against. A reader
        that splits a log between processes compares theirs (``services.audit.parallel``)."""
        return self._contents

    def _same_content(self, envelope: Envelope[Any]) -> Distrust | None:
        at = _event_time(envelope)
        digest = content_digest(envelope)
        day = self._contents.setdefault(int(at // _DAY), {})
        known = day.setdefault(envelope.id, digest)
        if known != digest:
            return Distrust(
                REPLAYED, f"{envelope.type} {envelope.subject}: id {envelope.id} was stated "
                "before with other content"
            )  # fmt: skip
        if at > self._latest:
            self._latest = at
            if self.horizon_s is not None:
                first = int((at - self.horizon_s) // _DAY)
                for old in [d for d in self._contents if d < first]:
                    del self._contents[old]
        return None

    def refuse(self, envelope: Envelope[Any], verdict: Distrust) -> Refusal:
        refusal = Refusal(
            envelope.id,
            envelope.type,
            envelope.subject,
            envelope.signer,
            verdict.kind,
            verdict.reason,
        )
        self.refused[verdict.kind] = self.refused.get(verdict.kind, 0) + 1
        self.refusals.append(refusal)
        if self.keep_refusals is not None and len(self.refusals) > self.keep_refusals:
            del self.refusals[: len(self.refusals) - self.keep_refusals]
        return refusal

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    def learn_keys(self, envelopes: Iterable[Envelope[Any]]) -> list[Refusal]:
        """Fold key facts read apart from the records they vouch for (a reader that does not
        merge the keys topic with its inputs), in event-time order, registrations first."""
        refusals = []
        ordered = sorted(
            (e for e in envelopes if isinstance(e.data, KEY_FACTS)),
            key=lambda e: (_event_time(e), _key_fact_rank(e), e.id),
        )
        for envelope in ordered:
            verdict = self.book.apply(envelope)
            if verdict is not None:
                refusals.append(self.refuse(envelope, verdict))
        return refusals
