"""The scheduler service over the bus port: the pure scheduling pass run by the lease holder.

The leader folds the whole log into a :class:`LiveState` (workloads, budgets, cluster, usage
snapshots, heartbeats and its own past commands), so a restarted or standby instance has
exactly the state the previous leader had once it has read the log. Only the lease holder runs
passes: after each batch of changes, and on a timer (contracts end and heartbeats stop with the
passage of time alone). When it takes the lease it first reads the log to its end, so it sees
every command the previous leader issued; command ids are derived from (kind, workload,
attempt), so a decision already in the log is never issued again.

**A cold standby** (the default where the fold is checkpointed): an instance that does not
hold the lease reads the lease and nothing else. Folding every fact as the leader does cost
each standby as much CPU per submission as the leader's fold (about a tenth of all the services'
CPU per submission was spent by readers that acted on nothing); it drops its state and stops
reading the log, and when it wins the lease it restores the latest checkpoint (the leader
saves one every few minutes) and reads the tail from there, as a restart does. Failover is
the lease's ttl plus that catch-up (``SchedulerConfig.warm_standby`` keeps every instance
folding, as before, for whoever would rather pay the CPU than the catch-up).

Every command carries the lease epoch it was decided in (its fencing token), and the lease is
checked again after the pass, just before publishing: a leader that stalled in a pass past its
lease publishes nothing, and rebuilds its state from the log (the pass had folded decisions the
log will not have). Whatever it still manages to publish is refused by the agents and the folds
once the new leader's commands are in the log.

Liveness is published here too, before each pass; which nodes are down, or up again, is decided
by the pure :func:`~scheduling.liveness.liveness_facts` from the heartbeats folded.

**Scaling out by pool** (``pool_leases``, ``fairshare scheduler --lease-per-pool``): instead of
one whole-cluster lease, each pool has its own (``lease.py``), and an instance leads the pools
whose leases it holds. It competes for every pool its state has seen registered (and the pools
it prefers); its passes decide for the pools it leads only (``PassContext.pools``: their
maintenance and liveness, and the pending work whose first listed pool it leads), and every
command carries its pool's epoch. A pool newly gained is acted on only after a catch-up to the
log's end, as a whole-cluster leader does. After the pass every pool is asked again: if any was
lost or changed epoch, nothing of the pass is published.

The service speaks only to the bus port (a follower of the log, a publisher, leases), so it runs
on fakes in unit tests; ``services.scheduler.serve`` wires it to Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from events import TopicKind, new_event
from events.envelope import Envelope, derived_event_id
from events.models import EventData, GpuHeartbeat, InputPosition, NodeAlive, UsageSnapshot
from events.positions import Delivery
from events.times import DEFAULT_WINDOW_S, as_logged, fold_instant
from projections.live_state import LiveState
from scheduling.liveness import liveness_facts
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import (
    SOURCE,
    PassContext,
    PassResult,
    next_contract_expiry,
    run_pass,
)
from scheduling.settings import settings_of
from services.bus.port import EventPublisher, PublishError
from services.metrics.trust import watch_refusals
from services.runtime.fold_checkpoints import FoldCheckpoints
from services.runtime.gc_pause import gc_paused
from services.scheduler.lease import Lease, PoolLeases, SoleInstance
from services.scheduler.metrics import (
    LEASE_LOST_PASSES,
    WHOLE_CLUSTER,
    SchedulerFigures,
    observe_pass,
    observe_published,
)

log = logging.getLogger(__name__)


class Follower(Protocol):
    """What the service needs from the log (``LogFollower`` over Kafka; fakes in tests)."""

    positions: dict[tuple[str, int], int]

    def poll(self, timeout_s: float = 0.5, max_records: int = 1000) -> list[Delivery]: ...

    def catch_up_in_batches(self, stall_timeout_s: float = 60.0) -> Iterator[list[Delivery]]: ...

    def close(self) -> None: ...


INPUTS = (
    TopicKind.KEYS,
    TopicKind.BUDGETS,
    TopicKind.CLUSTER,
    TopicKind.WORKLOADS,
    TopicKind.COMMANDS,
    TopicKind.USAGE,
    TopicKind.HEARTBEATS,
    TopicKind.LIVENESS,
)
#: Inputs that only move time forward; they trigger no pass by themselves.
_QUIET = (GpuHeartbeat, NodeAlive, UsageSnapshot)
#: A node heard from (a down one is then declared up by the next pass).
_SEEN = (GpuHeartbeat, NodeAlive)


@dataclass(frozen=True)
class SchedulerConfig:
    #: A pass at least this often, even with no new facts.
    tick_s: float = 5.0
    #: A node silent for this long is down.
    heartbeat_timeout_s: float = 60.0
    grace_period_s: int = 30
    window_s: int = DEFAULT_WINDOW_S
    poll_s: float = 0.2
    #: At most one pass per this interval: under a burst, the facts that arrive meanwhile are
    #: folded and decided together, so a large cluster is not re-planned per fact.
    min_pass_interval_s: float = 0.2
    #: A standby keeps folding the log (True), or reads only the lease and catches up from the
    #: latest checkpoint when it wins it (False; only where the fold is checkpointed).
    warm_standby: bool = False


class SchedulerService:
    def __init__(
        self,
        follow: Callable[[], Follower],
        publisher: EventPublisher,
        *,
        lease: Lease | None = None,
        pool_leases: PoolLeases | None = None,
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] = time.time,
        pace_clock: Callable[[], float] = time.monotonic,
        checkpoints: FoldCheckpoints | None = None,
        resume: Callable[[Mapping[tuple[str, int], int]], Follower] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``clock`` is the passes' ``now``; ``pace_clock`` paces them (real seconds, whatever
        time the domain clock says it is: tests freeze the one, never the other). ``lease``
        (one for every pool) or ``pool_leases`` (one per pool), not both. ``checkpoints``
        and ``resume`` (a follower from given positions): start from the latest checkpoint
        of the fold and read only the log's tail, and save one now and then; with them (and one
        lease for every pool), a standby is cold. ``sleep``: a cold standby's wait between
        looks at the lease."""
        if lease is not None and pool_leases is not None:
            raise ValueError("lease, pool_leases: one or the other")
        self.follow = follow
        self.follower = follow()
        self.checkpoints = checkpoints if resume is not None else None
        self.resume = resume
        self.publisher = publisher
        self.lease = lease or SoleInstance()
        #: A lease per pool (None: ``lease`` covers every pool).
        self.pool_leases = pool_leases
        #: With ``pool_leases``: the pools led now, with their epochs.
        self.held: dict[str, int] = {}
        self.config = config or SchedulerConfig()
        self.clock = clock
        self.pace_clock = pace_clock
        self.sleep = sleep
        #: A standby parks: no state, no reader of the log (per-pool leases fold everything:
        #: an instance leads some pools and must know every pool to compete for them).
        self.cold_standby = (
            self.checkpoints is not None and pool_leases is None and not self.config.warm_standby
        )
        #: Parked now: neither folding nor reading the log, waiting for the lease.
        self.parked = False
        self._last_paced = float("-inf")
        self.state = LiveState()
        watch_refusals("scheduler", lambda: self.state.trust.refused)
        #: What passes keep between them; the first pass over a ``state`` rebuilt from the log
        #: starts them over (``PassMemos.serving``).
        self.memos = PassMemos()
        self.passes = 0
        self.published = 0
        self._dirty = True
        self._leading = False
        self._last_pass = float("-inf")
        #: When time alone next changes what a pass may do (a contract ends); found after each
        #: pass, since only new facts, which trigger a pass anyway, can move it.
        self._next_expiry: float | None = None
        self._last_pass_id = 0
        #: The lease (epoch, pools led) whose settings were stated last.
        self._settings_stated: tuple[int, tuple[tuple[str, int], ...] | None] | None = None
        #: Passes whose decisions were dropped because the lease ran out before publishing.
        self.lease_lost_passes = 0
        #: Queues and leases as its metrics report them (refreshed by :meth:`run`).
        self.figures = SchedulerFigures()

    # -- the loop ------------------------------------------------------------------------
    def fold(self, deliveries: list[Delivery]) -> None:
        cluster = self.state.cluster
        for delivery in deliveries:
            data = delivery.envelope.data
            if not self.state.apply(delivery.envelope):
                continue
            if not isinstance(data, _QUIET):
                self._dirty = True
            elif isinstance(data, _SEEN):
                node = cluster.nodes.get(data.node)
                if node is not None and node.down:
                    self._dirty = True  # it is back: declare it up

    def _catch_up(self, renewing: bool = False) -> None:
        """Fold the whole log as it is now; then a fact held since before it still cannot
        apply never will (the one ordering rule every reader follows: see LiveState).
        ``renewing``: a lease just won is renewed between batches (a renewal is appended only
        by a turn of the lease; a cold standby's catch-up from a checkpoint may outlast the
        lease's ttl, and the lease it has just won must not lapse under it)."""
        mark = self.state.hold_mark()
        for batch in self.follower.catch_up_in_batches():
            self.fold(batch)
            if renewing:
                self._renew()
        self.state.reject_held_before(mark)

    def _renew(self) -> None:
        """A turn of the lease(s): renewals that are due are appended."""
        if self.pool_leases is not None:
            self.pool_leases.held_pools()
        else:
            self.lease.held()

    def step(self) -> PassResult | None:
        """One turn: read what is new; if leading and something is due, run a pass (at most
        one per ``min_pass_interval_s``: a poll while a pass is held back waits no longer than
        until it may run)."""
        if self.parked:
            self._leading = self._lead()
            if not self._leading:
                self.sleep(self.config.poll_s)
                return None
            return self._pass_if_due()
        timeout = self.config.poll_s
        if self._dirty and self._leading:
            # (only a leader has a pass to hold back: a standby folds with the plain poll, or
            # it would spin on a zero timeout while its facts wait for a lease it lacks)
            wait = self._last_paced + self.config.min_pass_interval_s - self.pace_clock()
            timeout = max(0.0, min(timeout, wait))
        self.fold(self.follower.poll(timeout_s=timeout))
        leading = self._lead_pools() if self.pool_leases is not None else self._lead()
        self._leading = leading
        if not leading:
            if self.cold_standby:
                self._park()
            return None
        return self._pass_if_due()

    def _pass_if_due(self) -> PassResult | None:
        now = as_logged(self.clock())  # the instant its outputs will state (an audit's too)
        if not (self._dirty or now - self._last_pass >= self.config.tick_s or self._expired(now)):
            return None
        paced = self.pace_clock()
        if paced - self._last_paced < self.config.min_pass_interval_s:
            return None  # paced: the next turn runs it, with whatever arrives meanwhile
        self._last_paced = paced
        return self.schedule(now)

    def _lead(self) -> bool:
        """One turn of the whole-cluster lease."""
        leading = self.lease.held()
        if leading and not self._leading:
            if self.parked:
                self._unpark()
                self._renew()
            # Act only on the whole log: the previous leader's last commands included.
            self._catch_up(renewing=True)
            self._dirty = True
            log.info(
                "scheduler leading", extra={"events": self.state.events, "epoch": self.lease.epoch}
            )
        elif self._leading and not leading:
            log.warning("scheduler no longer leading", extra={"epoch": self.lease.epoch})
        return leading

    def _lead_pools(self) -> bool:
        """One turn of the per-pool leases: compete for every pool seen; a pool newly led (or
        led in a new epoch) is acted on only once the log has been read to its end."""
        assert self.pool_leases is not None
        self.pool_leases.track(self.state.cluster.pools)
        held = self.pool_leases.held_pools()
        gained = sorted(pool for pool, epoch in held.items() if self.held.get(pool) != epoch)
        lost = sorted(pool for pool in self.held if pool not in held)
        if gained:
            self._catch_up(renewing=True)
            self._dirty = True
            log.info(
                "scheduler leading pools",
                extra={
                    "pools": gained,
                    "epochs": [held[pool] for pool in gained],
                    "events": self.state.events,
                },
            )
        if lost:
            log.warning("scheduler no longer leading pools", extra={"pools": lost})
        self.held = held
        return bool(held)

    def _expired(self, now: float) -> bool:
        return self._next_expiry is not None and self._next_expiry <= now

    def run(self, should_stop: Callable[[], bool]) -> None:
        try:
            started = time.monotonic()
            restored = self._restore()
            self._catch_up()
            log.info(
                "scheduler caught up with the log",
                extra={
                    "events": self.state.events,
                    "from_checkpoint": restored,
                    "seconds": round(time.monotonic() - started, 3),
                },
            )
            if self.checkpoints is not None and not restored:
                self.checkpoints.due_now()
            while not should_stop():
                try:
                    self.step()
                except PublishError as error:
                    # The pass folded decisions the log did not take: start again from the log.
                    log.error("publishing a pass failed; rebuilding from the log: %s", error)
                    self._rebuild()
                    continue
                if self.checkpoints is not None and not self.parked and self.checkpoints.due():
                    self.checkpoints.save(self.state, self.follower.positions)
                if self.figures.due():
                    self.refresh_figures()
        finally:
            self.close()

    def refresh_figures(self) -> None:
        """Count the queues of the pools led, and state the leases, for the metrics."""
        led: tuple[str, ...] | None
        if self.pool_leases is None:
            led = None if self._leading else ()
            leases = {WHOLE_CLUSTER: (self.lease.epoch, self._leading)}
        else:
            held = dict(self.held)
            led = tuple(held)
            leases = {
                pool: (held.get(pool, self.pool_leases.epoch(pool)), pool in held)
                for pool in self.state.cluster.pools
            }
        self.figures.refresh(self.state.cluster, led, leases)

    def _restore(self) -> bool:
        """The latest checkpoint of the fold, if one can be restored: its state, and a follower
        from the positions it covers (only the tail is read). Whether one was."""
        if self.checkpoints is None or self.resume is None:
            return False
        checkpoint = self.checkpoints.restore()
        if checkpoint is None:
            return False
        if not self.parked:
            self.follower.close()
        self.follower = self.resume(checkpoint.positions)
        self.state = checkpoint.state
        return True

    def _rebuild(self) -> None:
        """Start again from the log (from its latest checkpoint where there is one)."""
        self.state = LiveState()
        self.follower.close()
        self.follower = self.follow()
        self._restore()
        self._catch_up()

    def _park(self) -> None:
        """A cold standby: stop reading the log and let the state go."""
        log.info("scheduler standing by: reading the lease only", extra={"epoch": self.lease.epoch})
        self.follower.close()
        self.state = LiveState()
        self.memos = PassMemos()
        self.parked = True

    def _unpark(self) -> None:
        """Won the lease: the latest checkpoint, then (the caller) the log from there."""
        started = time.monotonic()
        restored = self._restore()
        if not restored:
            self.follower = self.follow()
        self.parked = False
        log.info(
            "scheduler restored to lead",
            extra={"from_checkpoint": restored, "seconds": round(time.monotonic() - started, 3)},
        )

    def close(self) -> None:
        if not self.parked:
            self.follower.close()
        self.publisher.close()
        self.lease.close()

    # -- one pass ------------------------------------------------------------------------
    def schedule(self, now: float) -> PassResult:
        cluster = self.state.cluster
        held = dict(self.held) if self.pool_leases is not None else None
        liveness = liveness_facts(cluster, now, self.config.heartbeat_timeout_s)
        if held is not None:  # a node's liveness is its pool's leader's to state
            liveness = [fact for fact in liveness if cluster.nodes[fact.node].pool in held]
        for fact in liveness:
            cluster.apply(fact, fold_instant(now))
        pass_id = max(self._last_pass_id + 1, int(now * 1000))
        epoch = self.lease.epoch if held is None else max(held.values(), default=0)
        ctx = PassContext(
            now=now,
            pass_id=pass_id,
            input_position=self._input_position(),
            window_s=self.config.window_s,
            grace_period_s=self.config.grace_period_s,
            epoch=epoch,
            pools=None if held is None else frozenset(held),
            pool_epochs=held,
        )
        started = time.perf_counter()
        with gc_paused():
            result = run_pass(
                cluster, self.state.tree, self.state.usage_source(now), ctx, self.memos
            )
        observe_pass(time.perf_counter() - started)
        # The settings it decides with, once per lease it holds (a new epoch, other pools):
        # stated before its passes, so an audit re-runs them with these settings.
        leading = (epoch, None if held is None else tuple(sorted(held.items())))
        stated = [settings_of(ctx)] if leading != self._settings_stated else []
        decided = [*stated, *liveness, *result.ordered]
        if decided and not self._still_leading(epoch, held):
            self._forget_unpublished_pass()
            return PassResult()
        envelopes = [
            self._envelope(data, now, self._epoch_of(data, epoch, held)) for data in decided
        ]
        for envelope in envelopes:
            self.publisher.publish(envelope)
        if envelopes:
            self.publisher.flush()
        for envelope in envelopes:
            self.state.record_own(envelope)
        observe_published(result.commands, cluster.workloads, now)
        self._settings_stated = leading
        self.passes += 1
        self.published += len(envelopes)
        self._dirty = False
        self._last_pass = now
        expiry = next_contract_expiry(cluster, now)
        if result.wake_at is not None and (expiry is None or result.wake_at < expiry):
            expiry = result.wake_at  # time alone lets the pass decide more then (debug lane)
        self._next_expiry = expiry
        self._last_pass_id = pass_id
        if decided:
            log.info(
                "scheduling pass",
                extra={
                    "pass_id": pass_id,
                    "commands": len(result.commands),
                    "facts": len(result.events) + len(liveness),
                },
            )
        return result

    def _still_leading(self, epoch: int, held: dict[str, int] | None = None) -> bool:
        """Asked again after the pass: it may have outlasted the lease (a stall, a long pass).
        With per-pool leases, every pool the pass decided for must still be led, in the same
        epoch."""
        if held is not None:
            assert self.pool_leases is not None
            now_held = self.pool_leases.held_pools()
            return all(now_held.get(pool) == e for pool, e in held.items())
        return self.lease.held() and self.lease.epoch == epoch

    @staticmethod
    def _epoch_of(data: EventData, epoch: int, held: dict[str, int] | None) -> int:
        """The epoch in a published event's derived id: with per-pool leases, a command's own,
        a fact's pool's where it names one (a placement), else the highest led (the other
        facts are folded by node, workload and attempt: two leaders' ids need only differ)."""
        if held is None:
            return epoch
        own = getattr(data, "epoch", None)
        if isinstance(own, int):
            return own
        pool = getattr(data, "pool", None)
        return held.get(pool, epoch) if isinstance(pool, str) else epoch

    def _forget_unpublished_pass(self) -> None:
        """The pass folded decisions that will never be published: the state is rebuilt from
        the log, as after a failed publish."""
        self.lease_lost_passes += 1
        LEASE_LOST_PASSES.inc()
        self._leading = False
        self.held = {}
        log.warning("lease lost during a pass; nothing published, rebuilding from the log")
        self._rebuild()

    def _input_position(self) -> tuple[InputPosition, ...]:
        return tuple(
            InputPosition(topic=topic, partition=partition, offset=offset)
            for (topic, partition), offset in sorted(self.follower.positions.items())
        )

    def _envelope(self, data: EventData, now: float, epoch: int = 0) -> Envelope[Any]:
        """Ids derived from what was decided and the epoch it was decided in: a leader that
        publishes a pass again gives its events the same ids. Two leaders' events differ
        even for the same decision: a deposed leader's command is refused by its readers, and
        must not make them take the current leader's for a repeat of it."""
        identity = getattr(data, "command_id", None)
        if identity is None and hasattr(data, "attempt"):
            identity = f"{data.subject()}:{data.attempt}"
        if identity is None:
            identity = f"{data.subject()}:{int(now)}"
        if epoch:
            identity = f"{identity}@{epoch}"
        return new_event(
            data,
            source=SOURCE,
            time=datetime.fromtimestamp(now, UTC),
            event_id=derived_event_id("scheduler", data.event_type, identity),
        )
