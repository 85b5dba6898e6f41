"""The bus contract (tests/bus_contract.py) against a real broker started by the test session."""

from __future__ import annotations

import pytest

from events import TopicKind, Topics
from services.brokers import BrokerHandle
from services.bus.admin import TopicSetupError, ensure_topics
from tests import bus_contract
from tests.integration.kafka_bus import KafkaBus

pytestmark = [pytest.mark.broker]


@pytest.mark.broker_fast
def test_every_event_type_round_trips_with_headers_and_keys(bus: KafkaBus) -> None:
    bus_contract.check_round_trip_of_every_event_type(bus)


@pytest.mark.broker_fast
def test_consumer_group_commits_restarts_and_resumes(bus: KafkaBus) -> None:
    bus_contract.check_commit_restart_resume(bus)


def test_redelivery_after_crash_before_commit_is_idempotent(bus: KafkaBus) -> None:
    bus_contract.check_redelivery_after_crash_is_idempotent(bus)


@pytest.mark.broker_fast
def test_poison_records_land_in_the_dead_letter_topic(bus: KafkaBus) -> None:
    bus_contract.check_poison_records_go_to_dead_letters(bus)


def test_topic_creation_is_idempotent_and_refuses_repartitioning(broker: BrokerHandle) -> None:
    topics = Topics(prefix="admin-test.")
    created = ensure_topics(broker.bootstrap, topics, partitions={TopicKind.HEARTBEATS: 6})
    assert created[topics.name(TopicKind.HEARTBEATS)] == 6
    assert created[topics.name(TopicKind.WORKLOADS)] == 3
    assert ensure_topics(broker.bootstrap, topics, partitions={TopicKind.HEARTBEATS: 6}) == created
    with pytest.raises(TopicSetupError, match="has 6 partitions, wanted 3"):
        ensure_topics(broker.bootstrap, topics, partitions=3)
