"""Who may issue commands: exactly one active scheduler per lease, a standby taking over on
failure.

The lease lives on the log itself, on a one-partition topic (``<prefix>scheduler-lease``), and
waits on no group coordinator: every instance reads the topic from its first offset by plain
assignment, like the log follower. The partition's order is the referee:

* the leader appends a **renewal** (its holder id and epoch) every ``renew_s``;
* a standby that has read no renewal of the current epoch for ``ttl_s``, by its own monotonic
  clock since it last read one, appends a **claim** for epoch + 1;
* the **first** claim of an epoch in the log wins; later claims of that epoch lose. Each
  instance reads its own claim back to learn which it was;
* a leader stops leading as soon as it reads a higher epoch, and fences itself when the
  renewal of its own that the broker last acknowledged was *sent* more than ``ttl_s -
  margin_s`` ago. A standby starts its ``ttl_s`` only when it *reads* a renewal, which is after
  it was sent, so a leader always stops believing it leads at least ``margin_s`` before any
  standby may claim.

**Leases by name.** Every record names its lease: ``*`` is the whole-cluster lease (the default
mode: one scheduler leads every pool; a record without a name, as every record written before
names existed, is one of ``*``), and a pool's name is that pool's own lease (``fairshare
scheduler --lease-per-pool``: instances lead disjoint sets of pools). Each name has its own
epochs, owner and clock; the rules above apply per name. :class:`LeaseSet` holds one
:class:`LeaseCore` per name an instance reads or competes for. Which names it competes for: the
whole-cluster lease, or every pool it knows (:meth:`LeaseSet.track`: the pools its state has
seen registered) plus the pools it *prefers*. A preferred pool is claimed as soon as nobody
renews it (at once on a topic where nobody ever held it, as ``*`` is), any other only after
``adopt_s`` (2 x ``ttl_s`` by default) without a renewal: the preferred owners win at start,
and the survivors adopt a dead instance's pools after ``adopt_s``.

Epochs of one pool's lease and of ``*`` fence the same commands (the fence is per cluster and
pool, see ``projections/cluster_state.py``), so a claim of a pool's lease is for one above both
that pool's epoch and ``*``'s, and a claim of ``*`` for one above every pool's: a log that
switches mode keeps every new leader of a pool above every earlier one. While instances of one
mode run, the other mode's epochs do not move, so every caught-up claimant of a name claims the
same epoch and the first claim still decides. (Should both modes run at once, a misuse, a
higher epoch still supersedes a lower one in every reader alike, and the fence refuses the
commands of the superseded one.)

Lease records are plain JSON records, not events: they are how the scheduler processes
coordinate, not facts of the domain (no fold, audit, report or projector has anything to learn
from "instance X was alive at 12:00:02"), so they stay out of the event registry, the schemas
and every consumer of the event topics. What the domain does see is the epoch: every command
carries its leader's epoch as a fencing token (``events/models/commands.py``), and agents and
the cluster fold refuse a command of a lower epoch than one they already saw for its cluster
and pool, so a leader that stalled past its lease cannot act after a takeover even if it
publishes.

The topic is created compacted with the lease name and epoch as key (the epoch alone for
``*``, as before names), so it keeps one record per epoch of each name for ever: epochs never
go backwards, and a new instance reads a short topic.

:class:`LeaseCore` is the pure state machine of one name, :class:`LeaseSet` the pure set of
them (records and a clock in, decisions out; unit tested with a fake clock); :class:`LogLease`
(whole-cluster) and :class:`LogPoolLeases` (per pool) drive them over a :class:`LeaseLog`, the
topic's one partition as bytes. Nothing here touches Kafka: the adapter is
``services.bus.lease.KafkaLeaseLog``, beside the bus's other adapters, and it is crash-only like
every Kafka reader (a fatal client error ends the scheduler, which its supervisor restarts).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

import orjson

log = logging.getLogger(__name__)


class Lease(Protocol):
    def held(self) -> bool:
        """Whether this instance leads now; called on every loop turn (renews, reads)."""

    @property
    def epoch(self) -> int:
        """The epoch this instance leads (or last led) in: stamped on its commands."""

    def close(self) -> None: ...


class SoleInstance:
    """For a deployment that runs one scheduler (and for tests of the loop): always leads, in
    a fixed epoch (0 unless told; commands of epoch 0 are fenced once a leased scheduler of a
    higher epoch has issued one for the same cluster)."""

    def __init__(self, epoch: int = 0) -> None:
        self._epoch = epoch

    def held(self) -> bool:
        return True

    @property
    def epoch(self) -> int:
        return self._epoch

    def close(self) -> None:
        pass


# -- the pure core ---------------------------------------------------------------------------
RecordKind = Literal["claim", "renew"]

#: The name of the whole-cluster lease (no pool is named ``*``: see ``PoolName``).
WHOLE = "*"


@dataclass(frozen=True)
class LeaseRecord:
    kind: RecordKind
    holder: str
    epoch: int
    #: The lease: a pool, or :data:`WHOLE`.
    name: str = WHOLE

    def encode(self) -> bytes:
        raw: dict[str, object] = {"kind": self.kind, "holder": self.holder, "epoch": self.epoch}
        if self.name != WHOLE:
            raw["name"] = self.name  # a whole-cluster record stays as it always was
        return orjson.dumps(raw)

    def key(self) -> bytes:
        """The compaction key: one record per epoch of each lease is kept."""
        return (
            str(self.epoch).encode() if self.name == WHOLE else f"{self.name}:{self.epoch}".encode()
        )

    @classmethod
    def decode(cls, value: bytes | None) -> LeaseRecord | None:
        """None for anything that is not a lease record (such records are skipped)."""
        try:
            raw = orjson.loads(value or b"")
            kind, holder, epoch = raw["kind"], raw["holder"], raw["epoch"]
            name = raw.get("name", WHOLE)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None
        valid = (
            kind in ("claim", "renew")
            and isinstance(holder, str)
            and bool(holder)
            and type(epoch) is int
            and epoch >= 1
            and isinstance(name, str)
            and bool(name)
        )
        return cls(kind, holder, epoch, name) if valid else None


@dataclass(frozen=True)
class LeaseTiming:
    #: A standby claims after reading no renewal for this long.
    ttl_s: float = 10.0
    #: The leader renews this often.
    renew_s: float = 2.0
    #: The leader stops this long before a standby may claim (publishing time, clock drift).
    margin_s: float = 3.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_s < self.ttl_s - self.margin_s or self.margin_s <= 0:
            raise ValueError("lease timing: need 0 < renew_s < ttl_s - margin_s and margin_s > 0")


class LeaseCore:
    """One lease as seen by one instance: fed the records it reads (in log order) and the
    acknowledgements of its own, with monotonic times; it says what to append and whether this
    instance leads. No I/O and no clock of its own.

    ``patience_s`` (``ttl_s`` unless told, never less) is how long the owner must have been
    silent before this instance claims; ``eager`` claims at once where the log has no owner of
    this lease at all (False: ``patience_s`` after this core was made)."""

    def __init__(
        self,
        holder: str,
        timing: LeaseTiming,
        now: float,
        *,
        name: str = WHOLE,
        patience_s: float | None = None,
        eager: bool = True,
    ) -> None:
        self.holder = holder
        self.timing = timing
        self.name = name
        self.patience_s = max(timing.ttl_s, patience_s or timing.ttl_s)
        self.eager = eager
        #: The highest epoch the log has decided, and who won it.
        self.epoch = 0
        self.owner: str | None = None
        #: When a record of the current epoch's owner was last read (start: not yet any).
        self._last_seen = now
        #: Our claim in flight (not read back yet), and when it was sent.
        self._claiming: int | None = None
        self._claim_sent = float("-inf")
        self._last_renew_sent = float("-inf")
        #: Our latest record the broker acknowledged: its epoch and when it was sent.
        self._acked_epoch = 0
        self._acked_sent = float("-inf")

    def read(self, record: LeaseRecord, now: float) -> None:
        """One record of the lease topic, in log order (another lease's records are ignored)."""
        if record.name != self.name:
            return
        if record.epoch > self.epoch:
            # The first claim of an epoch wins. (A renewal can only be first where compaction
            # removed the claim; it is sent by the winner only, so it names the owner too.)
            if self.owner == self.holder:
                log.warning(
                    "scheduler lease lost", extra={"lease": self.name, "epoch": record.epoch}
                )
            self.epoch, self.owner = record.epoch, record.holder
            self._last_seen = now
            if record.holder == self.holder:
                log.info("scheduler lease won", extra={"lease": self.name, "epoch": record.epoch})
        elif record.epoch == self.epoch and record.holder == self.owner:
            self._last_seen = now
        mine = record.kind == "claim" and record.holder == self.holder
        if mine and self._claiming == record.epoch:
            self._claiming = None  # read back: won or lost, the log has spoken

    def acknowledged(self, record: LeaseRecord, sent_at: float) -> None:
        """The broker appended our ``record``, which was sent at ``sent_at``."""
        if record.holder != self.holder or record.name != self.name:
            return
        if (record.epoch, sent_at) > (self._acked_epoch, self._acked_sent):
            self._acked_epoch, self._acked_sent = record.epoch, sent_at

    def leading(self, now: float) -> bool:
        """We won the current epoch and the broker took a record of ours of that epoch recently
        enough that no standby can have claimed yet."""
        return (
            self.owner == self.holder
            and self._acked_epoch == self.epoch
            and now - self._acked_sent < self.timing.ttl_s - self.timing.margin_s
        )

    def wants_claim(self, now: float) -> bool:
        """A standby's turn: nobody ever led (and this core is eager), or the owner has been
        silent for ``patience_s``."""
        if self.owner == self.holder:
            return False
        if self._claiming is not None and now - self._claim_sent < self.timing.ttl_s:
            return False  # our claim has not come back yet
        if self.owner is None and self.eager:
            return True
        return now - self._last_seen >= self.patience_s

    def due(self, now: float, caught_up: Callable[[], bool], floor: int = 0) -> LeaseRecord | None:
        """What to append now, if anything (and noted as sent at ``now``). A claim only once
        this instance has read the topic to its end (``caught_up``), so that it claims the
        epoch after the last one decided (and above ``floor``: see the module's docstring)."""
        if self.owner == self.holder:
            if now - self._last_renew_sent < self.timing.renew_s:
                return None
            self._last_renew_sent = now
            return LeaseRecord("renew", self.holder, self.epoch, self.name)
        if not self.wants_claim(now) or not caught_up():
            return None
        epoch = max(self.epoch, floor) + 1
        self._claiming, self._claim_sent = epoch, now
        self._last_renew_sent = now  # the claim counts as the first renewal
        return LeaseRecord("claim", self.holder, epoch, self.name)


class LeaseSet:
    """Every lease one instance reads, and the ones it competes for: pure, like
    :class:`LeaseCore` (one per name). ``whole``: compete for the whole-cluster lease only;
    otherwise for the pools given to :meth:`track` and the ``preferred`` ones (these claimed
    after ``ttl_s`` of silence, at once on a log where nobody held them; the others after
    ``adopt_s``, 2 x ``ttl_s`` unless told)."""

    def __init__(
        self,
        holder: str,
        timing: LeaseTiming,
        now: float,
        *,
        whole: bool = True,
        preferred: Iterable[str] = (),
        adopt_s: float | None = None,
    ) -> None:
        self.holder = holder
        self.timing = timing
        self.whole = whole
        self.preferred = frozenset(preferred)
        if WHOLE in self.preferred:
            raise ValueError("preferred: '*' names the whole-cluster lease, not a pool")
        self.adopt_s = 2 * timing.ttl_s if adopt_s is None else adopt_s
        if self.adopt_s < timing.ttl_s:
            raise ValueError("adopt_s: must be at least ttl_s")
        self.cores: dict[str, LeaseCore] = {}
        #: The leases this instance competes for (the others it only reads).
        self.competing: set[str] = set()
        self.track([WHOLE] if whole else sorted(self.preferred), now)

    def _core(self, name: str, now: float) -> LeaseCore:
        core = self.cores.get(name)
        if core is None:
            eager = name == WHOLE or name in self.preferred
            patience = self.timing.ttl_s if eager else self.adopt_s
            core = LeaseCore(
                self.holder, self.timing, now, name=name, patience_s=patience, eager=eager
            )
            self.cores[name] = core
        return core

    def track(self, names: Iterable[str], now: float) -> None:
        """Compete for these leases too (the pools this instance has seen: ignored when it
        competes for the whole-cluster lease)."""
        for name in names:
            if self.whole and name != WHOLE:
                continue
            if name not in self.competing:
                self._core(name, now)
                self.competing.add(name)

    def read(self, record: LeaseRecord, now: float) -> None:
        self._core(record.name, now).read(record, now)

    def acknowledged(self, record: LeaseRecord, sent_at: float) -> None:
        core = self.cores.get(record.name)
        if core is not None:
            core.acknowledged(record, sent_at)

    def floor(self, name: str) -> int:
        """The epoch a claim of ``name`` must exceed besides its own: the whole-cluster lease's
        for a pool, every pool's for the whole-cluster lease (they fence the same commands)."""
        if name != WHOLE:
            whole = self.cores.get(WHOLE)
            return 0 if whole is None else whole.epoch
        return max((c.epoch for n, c in self.cores.items() if n != WHOLE), default=0)

    def due(self, now: float, caught_up: Callable[[], bool]) -> list[LeaseRecord]:
        """What to append now, in name order (``caught_up`` asked at most once)."""
        answer: list[bool] = []

        def once() -> bool:
            if not answer:
                answer.append(caught_up())
            return answer[0]

        records = []
        for name in sorted(self.competing):
            record = self.cores[name].due(now, once, self.floor(name))
            if record is not None:
                records.append(record)
        return records

    def held(self, now: float) -> dict[str, int]:
        """The leases this instance leads now, with their epochs."""
        return {
            name: core.epoch
            for name, core in sorted(self.cores.items())
            if name in self.competing and core.leading(now)
        }

    def epoch(self, name: str) -> int:
        core = self.cores.get(name)
        return 0 if core is None else core.epoch


# -- over a log -----------------------------------------------------------------------------
class LeaseLog(Protocol):
    """The lease topic's one partition, as the drivers below need it: bytes in log order, so
    that the adapter (``services.bus.lease.KafkaLeaseLog``) knows nothing of leases, and tests
    can play the partition in memory."""

    def read(self) -> list[bytes | None]:
        """Serve the acknowledgements of appended records (their callbacks run here), then
        the values appended since the last read, in log order; never waits."""

    def caught_up(self) -> bool:
        """Whether :meth:`read` has returned everything up to the partition's end now."""

    def append(self, key: bytes, value: bytes, on_appended: Callable[[], None]) -> None:
        """Queue a record; ``on_appended`` runs inside a later :meth:`read` once it is in."""

    def close(self) -> None: ...


def default_holder() -> str:
    """``host:pid:random``: unique per process, and says where the leader runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class _OverLog:
    """A :class:`LeaseSet` over a :class:`LeaseLog`, at the times ``clock`` gives (monotonic).
    Single-threaded: one :meth:`turn` reads, decides and appends."""

    def __init__(
        self,
        lease_log: LeaseLog,
        *,
        timing: LeaseTiming | None,
        holder: str | None,
        clock: Callable[[], float],
        whole: bool,
        preferred: Iterable[str] = (),
        adopt_s: float | None = None,
    ) -> None:
        self.log = lease_log
        self.timing = timing or LeaseTiming()
        self.holder = holder or default_holder()
        self.clock = clock
        #: Records of the topic that are not lease records (never read into the leases).
        self.skipped = 0
        self.leases = LeaseSet(
            self.holder,
            self.timing,
            clock(),
            whole=whole,
            preferred=preferred,
            adopt_s=adopt_s,
        )

    def turn(self) -> dict[str, int]:
        """Read what is new, append what is due; the leases held now."""
        for value in self.log.read():
            record = LeaseRecord.decode(value)
            if record is None:
                self.skipped += 1
                continue
            self.leases.read(record, self.clock())
        for record in self.leases.due(self.clock(), self.log.caught_up):
            self._append(record)
        return self.leases.held(self.clock())

    def _append(self, record: LeaseRecord) -> None:
        sent_at = self.clock()
        self.log.append(
            record.key(), record.encode(), lambda: self.leases.acknowledged(record, sent_at)
        )

    def close(self) -> None:
        """Leaves without a word: a standby takes over ``ttl_s`` after the last renewal."""
        self.log.close()


class LogLease(_OverLog):
    """The whole-cluster lease (:data:`WHOLE`) over the lease log: one instance leads every
    pool."""

    def __init__(
        self,
        lease_log: LeaseLog,
        *,
        timing: LeaseTiming | None = None,
        holder: str | None = None,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(lease_log, timing=timing, holder=holder, clock=clock, whole=True)

    @property
    def core(self) -> LeaseCore:
        return self.leases.cores[WHOLE]

    @property
    def epoch(self) -> int:
        return self.core.epoch

    def held(self) -> bool:
        return WHOLE in self.turn()


class PoolLeases(Protocol):
    """A lease per pool (``fairshare scheduler --lease-per-pool``)."""

    def track(self, pools: Iterable[str]) -> None:
        """Compete for these pools too (every pool the state has seen)."""

    def held_pools(self) -> dict[str, int]:
        """The pools this instance leads now, each with its epoch; called on every loop turn
        (renews, reads, claims)."""

    def epoch(self, pool: str) -> int:
        """The epoch of ``pool``'s lease as this instance last read it."""

    def close(self) -> None: ...


class LogPoolLeases(_OverLog):
    """A lease per pool over the lease log, on the same topic as the whole-cluster lease."""

    def __init__(
        self,
        lease_log: LeaseLog,
        *,
        preferred: Iterable[str] = (),
        adopt_s: float | None = None,
        timing: LeaseTiming | None = None,
        holder: str | None = None,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(
            lease_log,
            timing=timing,
            holder=holder,
            clock=clock,
            whole=False,
            preferred=preferred,
            adopt_s=adopt_s,
        )

    def track(self, pools: Iterable[str]) -> None:
        self.leases.track(pools, self.clock())

    def held_pools(self) -> dict[str, int]:
        return self.turn()

    def epoch(self, pool: str) -> int:
        return self.leases.epoch(pool)
