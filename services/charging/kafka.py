"""The charging host wired to Kafka: the one place its adapters are chosen."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from events import TopicKind, Topics
from events.models import LedgerCharge
from events.positions import Delivery
from services.bus.export import read_to_end
from services.bus.kafka import KafkaEventPublisher, KafkaEventSubscriber
from services.bus.records import check, skip
from services.charging.host import ChargingHost

#: The charging host's stable name: what its dead letters are signed with and derived from,
#: whatever consumer group a start reads under.
CONSUMER = "charging"


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


def kafka_charging_host(
    bootstrap: str, topics: Topics | None = None, **options: Any
) -> ChargingHost:
    """A charging host over Kafka at ``bootstrap``; ``options`` as for :class:`ChargingHost`."""
    names = topics or Topics()
    return ChargingHost(
        KafkaEventPublisher(bootstrap, names, client_id=CONSUMER),
        lambda: charges_on_ledger(bootstrap, names),
        lambda: KafkaEventSubscriber(
            bootstrap,
            # A new group each start, to read from the first offset (the fold is rebuilt);
            # dead letters are still the one consumer's, whatever its group.
            f"{CONSUMER}-{time.time_ns()}",
            [TopicKind.WORKLOADS, TopicKind.HEARTBEATS],
            names,
            consumer=CONSUMER,
        ),
        **options,
    )
