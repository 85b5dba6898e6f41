"""The charging host wired to Kafka: the one place its adapters are chosen."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from events import EventDecodeError, TopicKind, Topics, decode_binary
from events.models import LedgerCharge
from services.bus.export import read_to_end
from services.bus.kafka import KafkaEventPublisher, KafkaEventSubscriber
from services.charging.host import ChargingHost


def charges_on_ledger(bootstrap: str, topics: Topics) -> Iterator[LedgerCharge]:
    """Every charge on the ledger topic up to its end now; a record that is not a valid charge
    is skipped here (the ledger topic's consumers dead-letter it)."""
    for record in read_to_end(bootstrap, [topics.name(TopicKind.LEDGER)]):
        try:
            charge = decode_binary(record.value, record.headers).data
        except EventDecodeError:
            continue
        if isinstance(charge, LedgerCharge):
            yield charge


def kafka_charging_host(
    bootstrap: str, topics: Topics | None = None, **options: Any
) -> ChargingHost:
    """A charging host over Kafka at ``bootstrap``; ``options`` as for :class:`ChargingHost`."""
    names = topics or Topics()
    return ChargingHost(
        KafkaEventPublisher(bootstrap, names, client_id="charging"),
        lambda: charges_on_ledger(bootstrap, names),
        lambda: KafkaEventSubscriber(
            bootstrap,
            f"charging-{time.time_ns()}",  # always from the first offset: the fold is rebuilt
            [TopicKind.WORKLOADS, TopicKind.HEARTBEATS],
            names,
        ),
        **options,
    )
