"""Charging seals a period only once every workloads partition has passed it (issue 23).

A catch-up reads its partitions unevenly: one can be read to its end before another is touched.
The horizon is measured on the partitions folded from, so without the wait the untouched
partition's runs would be missing from the seal (and the audit of the period would differ).
Any interleaving of the partitions, each read in order, must seal only periods whose facts are
all folded."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from events import TopicKind, Topics, new_event
from events.models import EventData
from events.positions import Delivery, Position, TopicPartition
from events.times import HOUR
from projections.periods import period_end
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.charging.host import ChargingHost
from tests.unit.test_ledger import T0, run_events

TOPICS = Topics()
WORKLOADS = TOPICS.name(TopicKind.WORKLOADS)
HEARTBEATS = TOPICS.name(TopicKind.HEARTBEATS)


class RecordingSealer:
    """Notes, at each close, which facts the host had folded."""

    def __init__(self, host: ChargingHost) -> None:
        self.host = host
        self.closed: list[tuple[int, dict[TopicPartition, int]]] = []

    def open(self, start: int) -> None:
        self.host.state.periods.open(start, dict(self.host.positions))

    def close(self, start: int) -> None:
        self.closed.append((start, dict(self.host.positions)))
        self.host.state.periods.opened.pop(start)


def _streams() -> dict[TopicPartition, list[tuple[EventData, int]]]:
    """Two workloads, each on its own workloads partition, hours long; their heartbeats on one
    heartbeats partition."""
    streams: dict[TopicPartition, list[tuple[EventData, int]]] = {
        (WORKLOADS, 0): [],
        (WORKLOADS, 1): [],
        (HEARTBEATS, 0): [],
    }
    for partition, (workload, start) in enumerate((("a", T0 + 60), ("b", T0 + 120))):
        for data, t in run_events(workload, "lab/a", 1, start, start + 6 * HOUR, True, 600):
            on = WORKLOADS if type(data).topic is TopicKind.WORKLOADS else HEARTBEATS
            streams[(on, partition if on == WORKLOADS else 0)].append((data, t))
    for facts in streams.values():
        facts.sort(key=lambda pair: pair[1])
    return streams


def _deliveries(order: list[TopicPartition]) -> list[Delivery]:
    streams = _streams()
    taken = dict.fromkeys(streams, 0)
    out = []
    for key in order:
        data, t = streams[key][taken[key]]
        at = datetime.fromtimestamp(t, UTC)
        out.append(Delivery(new_event(data, source="test", time=at), Position(*key, taken[key])))
        taken[key] += 1
    return out


@st.composite
def interleavings(draw: st.DrawFn) -> list[TopicPartition]:
    """Each partition read in order, the partitions in any interleaving."""
    remaining = {key: len(facts) for key, facts in _streams().items()}
    order = []
    while any(remaining.values()):
        key = draw(st.sampled_from(sorted(k for k, n in remaining.items() if n)))
        run = draw(st.integers(1, remaining[key]))
        order += [key] * run
        remaining[key] -= run
    return order


def _seal_times(
    order: list[TopicPartition],
) -> tuple[list[tuple[int, dict[TopicPartition, int]]], dict[TopicPartition, list[int]]]:
    host = ChargingHost(
        InMemoryPublisher(InMemoryBroker(), TOPICS),
        lambda: iter(()),
        horizon_s=HOUR,
        period_length="hour",
    )
    sealer = RecordingSealer(host)
    host.sealer = sealer
    streams = _streams()
    host.await_partitions({k: len(f) for k, f in streams.items() if k[0] == WORKLOADS})
    for delivery in _deliveries(order):
        host.handle(delivery)
    return sealer.closed, {k: [t for _, t in facts] for k, facts in streams.items()}


def _unfolded_at_seal(order: list[TopicPartition]) -> list[str]:
    closed, times = _seal_times(order)
    problems = []
    for start, positions in closed:
        end = period_end(start, "hour")
        for key in times:
            if key[0] != WORKLOADS:
                continue
            missing = [t for t in times[key][positions.get(key, 0) :] if t < end]
            if missing:
                problems.append(f"{start}: {len(missing)} facts of {key} unfolded")
    return problems


def test_a_partition_read_to_its_end_first_does_not_seal_the_other_ones_hours() -> None:
    streams = _streams()
    order = [key for key in ((WORKLOADS, 0), (HEARTBEATS, 0), (WORKLOADS, 1)) for _ in streams[key]]
    closed, _ = _seal_times(order)
    assert closed, "periods are sealed once both partitions are read"
    assert _unfolded_at_seal(order) == []


@settings(max_examples=60, deadline=None)
@given(interleavings())
def test_every_seal_comes_after_every_workload_fact_of_its_period(
    order: list[TopicPartition],
) -> None:
    assert _unfolded_at_seal(order) == []
