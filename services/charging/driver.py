"""Charging's driver: one instance of charging, plain or a shard of the group, running a
:class:`~services.charging.host.ChargingHost` over the partitions its membership gives it
(:class:`~services.charging.shards.WholeLog`: every partition, without a group;
:class:`~services.charging.shards.ShardMembership`: its share of the group's, see
``services.charging.shards``).

Whenever what it holds changes, it checkpoints the fold it had and starts the fold of what it
holds now: from that partition set's own checkpoint where there is one
(:func:`~services.charging.shards.checkpoint_name`), reading the ledger topic and its inputs
from the checkpoint's positions; otherwise from the first offset, having first read the whole
ledger topic. It checkpoints the fold every ``checkpoints.every_s`` and when it stops, and,
while it holds every partition, seals closed periods (``services.charging.periods``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from events.models import LedgerCharge
from events.positions import TopicPartition
from projections.charging_state import ChargingState
from services.charging.host import ChargingHost
from services.charging.periods import ReadLedger, Sealer
from services.charging.reader import InputReader, LedgerTail
from services.charging.shards import Membership, checkpoint_name, owner_test
from services.runtime.fold_checkpoints import StateCheckpoints
from services.runtime.gc_pause import gc_paused

log = logging.getLogger(__name__)

OpenReader = Callable[[frozenset[int] | None, bool, Mapping[TopicPartition, int]], InputReader]
OpenTail = Callable[[Mapping[TopicPartition, int]], LedgerTail]
OpenCheckpoints = Callable[[str], StateCheckpoints[ChargingState]]


class ChargingDriver:
    """One charging instance, plain or a shard: drives a :class:`ChargingHost` over the
    partitions its membership gives it, starting the fold again (from a checkpoint where one
    fits) whenever they change, and checkpointing it every ``checkpoints.every_s`` and when it
    stops."""

    def __init__(
        self,
        host: ChargingHost,
        membership: Membership,
        open_reader: OpenReader,
        open_tail: OpenTail,
        ledger_topic: str,
        dead_letters: Any = None,
        open_checkpoints: OpenCheckpoints | None = None,
        ledger: tuple[Callable[[], dict[TopicPartition, int]], ReadLedger] | None = None,
        workloads_topic: str | None = None,
    ) -> None:
        """``ledger_topic``: its name (a checkpoint's positions on it are the tail's);
        ``dead_letters``: the office every reader of this instance posts to (closed at the end of
        :meth:`run`); ``open_checkpoints``: the checkpoints of a fold by name (None: every
        start rebuilds from the first offset); ``ledger``: the ledger's ends and a reader of a
        range of it, to seal closed periods while this instance holds every partition
        (``services.charging.periods``; None: it seals none); ``workloads_topic``: its name
        (sealing waits for each of its partitions: ``ChargingHost.await_partitions``)."""
        self.host = host
        self.ledger_topic = ledger_topic
        self.dead_letters = dead_letters
        self.membership = membership
        self._open_reader = open_reader
        self._open_tail = open_tail
        self._open_checkpoints = open_checkpoints
        self._ledger = ledger
        self._workloads_topic = workloads_topic
        #: The partitions the fold was built for; how often it was (re)built; whether the
        #: latest build started from a checkpoint.
        self.built_for: frozenset[int] = frozenset()
        self.builds = 0
        self.restored = False
        self.checkpoints: StateCheckpoints[ChargingState] | None = None
        self._reader: InputReader | None = None
        self._tail: LedgerTail | None = None
        #: Since when, and up to which ends, the latest build is reading the backlog.
        self._catching_up: tuple[float, dict[TopicPartition, int]] | None = None

    @property
    def speaks(self) -> bool:
        """Whether this instance publishes the usage snapshots (it holds partition 0)."""
        return 0 in self.built_for

    def _rebuild(self, owned: frozenset[int]) -> None:
        self._close_readers()
        self.built_for = owned
        partitions = self.membership.partitions
        whole = owned == frozenset(range(partitions))
        owns = None if whole else owner_test(owned, partitions)
        self.host.reset(owns=owns)
        self.host.sealer = self._sealer() if whole else None
        self.restored = False
        if not owned:
            return
        self.builds += 1
        name = checkpoint_name(owned, partitions)
        self.checkpoints = self._open_checkpoints(name) if self._open_checkpoints else None
        checkpoint = self.checkpoints.restore() if self.checkpoints is not None else None
        inputs: dict[TopicPartition, int] = {}
        ledger: dict[TopicPartition, int] = {}
        if checkpoint is not None:
            for key, offset in checkpoint.positions.items():
                (ledger if key[0] == self.ledger_topic else inputs)[key] = offset
            self.host.adopt(checkpoint.state, inputs, owns)
            self.restored = True
        self._tail = self._open_tail(ledger)
        self._tail.on_charge = self._note_charge
        known = sum(self.host.count_recorded(charge) for charge in self._tail.read_to_end())
        self._note_seals()
        self._reader = self._open_reader(None if whole else owned, self.speaks, inputs)
        ends = self._reader.ends()
        self._catching_up = (time.monotonic(), ends)
        self.host.await_partitions({k: e for k, e in ends.items() if k[0] == self._workloads_topic})
        log.info(
            "charging fold started",
            extra={
                "partitions": sorted(owned),
                "from_checkpoint": checkpoint is not None,
                "charges_read": known,
            },
        )

    def _sealer(self) -> Sealer | None:
        if self._ledger is None:
            return None
        ends, read = self._ledger
        return Sealer(
            self.host,
            self.ledger_topic,
            ends,
            read,
            lambda: dict(self._tail.positions) if self._tail is not None else {},
            self._open_checkpoints,
            lambda: self.checkpoint(force=True),
        )

    def _note_charge(self, key: TopicPartition, offset: int, charge: LedgerCharge) -> None:
        self.host.state.periods.note_charge(key, offset, int(charge.bucket_start.timestamp()))

    def _note_seals(self) -> None:
        """Seals on the ledger: a rebuilt fold adopts them when it reaches their period."""
        if self._tail is not None:
            for closed in self._tail.take_seals():
                self.host.state.periods.note_on_log(closed)

    def checkpoint(self, force: bool = False) -> bool:
        """Save the fold with the positions it covers when one is due (``force``: now), once
        every charge published so far is acknowledged."""
        if self.checkpoints is None or self._tail is None or not self.built_for:
            return False
        if not (force or self.checkpoints.due()):
            return False
        self.host.flush_charges(always=True)
        positions = {**self.host.positions, **self._tail.positions}
        return self.checkpoints.save(self.host.state, positions)

    def run(self, should_stop: Callable[[], bool], poll_s: float = 0.5) -> None:
        host = self.host
        try:
            while not should_stop():
                owned = self.membership.poll()
                if owned != self.built_for:
                    host.flush_charges()
                    self.checkpoint(force=True)
                    self._rebuild(owned)
                if self._reader is None or self._tail is None:
                    time.sleep(min(poll_s, 0.2))  # nothing held: wait for the group
                    continue
                with gc_paused():  # decoding and the fold allocate no cycles; see gc_pause.py
                    host.take(self._reader.poll(timeout_s=poll_s, max_records=5000))
                    for charge in self._tail.read():
                        host.count_recorded(charge)
                    self._note_seals()
                if self.speaks:
                    host.snapshot_if_due()
                self._note_caught_up()
                self.checkpoint()
            host.flush_charges()
            self.checkpoint(force=True)
        finally:
            self._close_readers()
            self.membership.close()
            host.publisher.close()
            if self.dead_letters is not None:
                self.dead_letters.close()

    def _note_caught_up(self) -> None:
        """Say once per build when the fold has read the backlog its inputs had when it
        started (operators and ``fairshare bench kills`` time restarts by it)."""
        if self._catching_up is None:
            return
        since, ends = self._catching_up
        positions = self.host.positions
        if any(positions.get(key, 0) < end for key, end in ends.items() if end > 0):
            return
        self._catching_up = None
        self.host.awaited.clear()  # records dead-lettered at a backlog's end are no facts
        log.info(
            "charging caught up with the log",
            extra={
                "from_checkpoint": self.restored,
                "seconds": round(time.monotonic() - since, 3),
            },
        )
        if self.checkpoints is not None and not self.restored:
            self.checkpoints.due_now()  # the backlog just read is not read again after a crash

    def _close_readers(self) -> None:
        for reader in (self._reader, self._tail):
            if reader is not None:
                reader.close()
        self._reader = self._tail = None
