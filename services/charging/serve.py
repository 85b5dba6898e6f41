"""The charging host wired to Kafka: the one place its adapters are chosen.

Plain charging and a shard of the group are the same driver
(:class:`~services.charging.driver.ChargingDriver`) over a different membership; both keep
checkpoints of their fold on the log's broker (``services.bus.checkpoints``) unless
``checkpoint_every_s`` is None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from events import TopicKind, Topics
from events.models import LedgerCharge
from events.positions import Delivery, TopicPartition
from projections.charging_state import ChargingState
from services.bus.deadletters import DeadLetters
from services.bus.export import end_offsets, read_to_end
from services.bus.kafka import KafkaEventPublisher
from services.bus.records import check, skip
from services.bus.signing import signed
from services.bus.trust import KeysFromLog, kafka_keys
from services.charging.driver import ChargingDriver
from services.charging.host import ChargingHost
from services.charging.periods import kafka_ledger
from services.charging.reader import GROUP, InputReader, LedgerTail
from services.charging.shards import Membership, ShardMembership, WholeLog
from services.metrics.trust import watch_refusals
from services.runtime.fold_checkpoints import StateCheckpoints

#: The charging host's stable name: what its dead letters are signed with and derived from.
CONSUMER = GROUP


def charges_on_ledger(bootstrap: str, topics: Topics) -> Iterator[LedgerCharge]:
    """Every charge on the ledger topic up to its end now. A record that fails the check every
    reader applies is skipped here (the ledger topic's consumer, the projector, dead-letters
    it): a charge keyed by another workload is no charge any reader of the ledger counts."""
    for record in read_to_end(bootstrap, [topics.name(TopicKind.LEDGER)]):
        checked = check(record, topics)
        if not isinstance(checked, Delivery):
            skip(checked, CONSUMER)
        elif isinstance(checked.envelope.data, LedgerCharge):
            yield checked.envelope.data


def kafka_charging_fold(bootstrap: str, topics: Topics, **options: Any) -> ChargingHost:
    """A host that is fed its facts by someone else (the faust worker): it learns the recorded
    charges from the whole ledger topic (:meth:`ChargingHost.restore`)."""
    return ChargingHost(
        signed(KafkaEventPublisher(bootstrap, topics, client_id=CONSUMER)),
        lambda: charges_on_ledger(bootstrap, topics),
        **options,
    )


def kafka_charging_host(
    bootstrap: str, topics: Topics | None = None, **options: Any
) -> ChargingDriver:
    """Plain charging over Kafka at ``bootstrap``: one instance holding every partition.
    ``options`` as for :class:`ChargingHost`, and ``checkpoint_every_s`` (default 300; None:
    no checkpoints, every start folds from the first offset)."""
    names = topics or Topics()
    partitions = len(end_offsets(bootstrap, [names.name(TopicKind.WORKLOADS)]))
    if not partitions:
        raise RuntimeError(f"topic {names.name(TopicKind.WORKLOADS)} does not exist")
    return _charging(bootstrap, names, WholeLog(partitions), CONSUMER, **options)


def kafka_charging_shard(
    bootstrap: str, topics: Topics, instance: str, **options: Any
) -> ChargingDriver:
    """A charging shard named ``instance`` over Kafka at ``bootstrap`` (``options`` as for
    :func:`kafka_charging_host`; ``session_timeout_ms`` for the group)."""
    session_timeout_ms = int(options.pop("session_timeout_ms", 10_000))
    membership = ShardMembership(bootstrap, topics, instance, session_timeout_ms=session_timeout_ms)
    return _charging(bootstrap, topics, membership, f"{GROUP}-{instance}", **options)


def _charging(
    bootstrap: str,
    topics: Topics,
    membership: Membership,
    client_id: str,
    checkpoint_every_s: float | None = 300.0,
    **options: Any,
) -> ChargingDriver:
    host = ChargingHost(
        # charges, usage snapshots and seals are signed with charging's key
        signed(KafkaEventPublisher(bootstrap, topics, client_id=client_id)),
        lambda: iter(()),  # the driver learns the recorded charges from its ledger tail
        **options,
    )
    dead_letters = DeadLetters(
        CONSUMER,
        lambda: KafkaEventPublisher(bootstrap, topics, client_id=f"{CONSUMER}-deadletter"),
        lambda: read_to_end(bootstrap, [topics.name(TopicKind.DEADLETTER)]),
        topics,
    )

    # one judgement of what charging reads, its inputs and the ledger (services.bus.trust)
    trust = KeysFromLog(kafka_keys(bootstrap, topics))
    watch_refusals("charging", lambda: trust.trust.refused)

    def open_reader(
        owned: frozenset[int] | None, speaks: bool, start: Mapping[TopicPartition, int]
    ) -> InputReader:
        return InputReader(
            bootstrap, topics, owned, dead_letters, speaks=speaks, start=start, trust=trust
        )

    def open_checkpoints(name: str) -> StateCheckpoints[ChargingState]:
        from services.bus.checkpoints import KafkaCheckpoints

        store = KafkaCheckpoints(bootstrap, topics, name)
        assert checkpoint_every_s is not None
        return StateCheckpoints(store, checkpoint_every_s, name=name, expect=ChargingState)

    return ChargingDriver(
        host,
        membership,
        open_reader,
        lambda start: LedgerTail(bootstrap, topics, start, trust),
        topics.name(TopicKind.LEDGER),
        dead_letters,
        open_checkpoints if checkpoint_every_s is not None else None,
        kafka_ledger(bootstrap, topics),
        topics.name(TopicKind.WORKLOADS),
    )
