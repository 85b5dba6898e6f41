"""The charging host over the in-memory bus: it speaks only to the bus port, so its rules
(publish each charge once, recognise charges already recorded after a restart, snapshot usage
with the input positions) are tested here without a broker; tests/integration runs the same
host over Apache Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from events import TopicKind, Topics, decode_binary, new_event
from events.models import LedgerCharge, NodeRegistered
from projections.ledger import Ledger
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.charging.host import ChargingHost
from tests.unit.test_ledger import T0, run_events

TOPICS = Topics()


def facts() -> list[tuple[object, int]]:
    pairs = run_events("w1", "lab/a", 2, T0 + 60, T0 + 3 * 3600, True, 600)
    pairs += run_events("w2", "lab/b", 1, T0 + 900, T0 + 5000, False, 600)
    pairs.append(
        (NodeRegistered(node="node-w1", cluster="c", pool="p", gpus=8, gpu_type="x"), T0 - 60)
    )
    return sorted(pairs, key=lambda pair: pair[1])


def recorded(broker: InMemoryBroker) -> Iterator[LedgerCharge]:
    for record in broker.records(TOPICS.name(TopicKind.LEDGER)):
        data = decode_binary(record.value, record.headers).data
        assert isinstance(data, LedgerCharge)
        yield data


def host_on(broker: InMemoryBroker, group: str) -> ChargingHost:
    return ChargingHost(
        InMemoryPublisher(broker, TOPICS),
        lambda: recorded(broker),
        lambda: InMemorySubscriber(
            broker, group, [TopicKind.WORKLOADS, TopicKind.HEARTBEATS], TOPICS
        ),
        snapshot_every_s=0,
    )


def inputs() -> int:
    """Facts on the host's input topics (workloads, heartbeats; not the node registration)."""
    return sum(1 for data, _t in facts() if not isinstance(data, NodeRegistered))


def run_until_idle(host: ChargingHost, expected: int) -> None:
    polls = iter(range(1000))  # a bound, so a host that never catches up fails, not hangs

    def stop() -> bool:
        return sum(host.positions.values()) >= expected or next(polls, None) is None

    host.run(stop, poll_s=0)
    assert sum(host.positions.values()) == expected


def test_every_charge_is_published_once_even_after_a_restart_fed_everything_again() -> None:
    broker = InMemoryBroker()
    publisher = InMemoryPublisher(broker, TOPICS)
    expected = Ledger()
    for data, t in facts():
        expected.apply(data, float(t))  # type: ignore[arg-type]
        publisher.publish(new_event(data, source="t", time=datetime.fromtimestamp(t, UTC)))  # type: ignore[type-var]

    first = host_on(broker, "first")
    run_until_idle(first, inputs())
    assert first.published == len(expected.entries) > 0
    assert sorted(c.charge_id for c in recorded(broker)) == sorted(
        c.charge_id for c in expected.entries
    )

    restarted = host_on(broker, "second")
    run_until_idle(restarted, inputs())
    assert restarted.published == 0, "charges already on the ledger are never published again"
    assert len(list(recorded(broker))) == len(expected.entries)


def test_usage_snapshots_name_the_input_positions_they_were_computed_at() -> None:
    broker = InMemoryBroker()
    publisher = InMemoryPublisher(broker, TOPICS)
    for data, t in facts():
        publisher.publish(new_event(data, source="t", time=datetime.fromtimestamp(t, UTC)))  # type: ignore[type-var]
    host = host_on(broker, "snap")
    run_until_idle(host, inputs())
    (snapshot,) = host.snapshots()
    assert sum(p.offset for p in snapshot.as_of) == inputs()
    usage = {u.budget: u for u in snapshot.budgets}
    assert usage["lab/a"].allocated_gpu_s == 2 * (3 * 3600 - 60)
    assert usage["lab/b"].unallocated_gpu_s == 1 * (5000 - 900)
