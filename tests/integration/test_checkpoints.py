"""Checkpoints of the scheduler's fold on a real broker (issue 23): stored in chunks on the
log's own broker and read back whole, and a scheduler that starts from one reads only the
log's tail and ends up with the fold of the whole log."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from services.bus.checkpoints import CHUNK_BYTES, KafkaCheckpoints
from tests.factories import submitted
from tests.integration.kafka_bus import KafkaBus
from tests.integration.test_scheduler_service import T0, Clock, _lab, _publish, _service, _until
from tests.unit.test_checkpoint import _facts

pytestmark = [pytest.mark.broker]


def test_a_checkpoint_of_several_chunks_reads_back_whole_and_the_latest_wins(
    bus: KafkaBus,
) -> None:
    store = KafkaCheckpoints(bus.broker.bootstrap, bus.topics, "tests")
    assert store.load() is None
    first = os.urandom(2 * CHUNK_BYTES + 1000)
    manifest = store.save(first)
    assert len(manifest.chunks) == 3
    again = KafkaCheckpoints(bus.broker.bootstrap, bus.topics, "tests")
    assert again.load() == first
    second = os.urandom(CHUNK_BYTES // 2)
    again.save(second)
    assert KafkaCheckpoints(bus.broker.bootstrap, bus.topics, "tests").load() == second
    assert KafkaCheckpoints(bus.broker.bootstrap, bus.topics, "other").load() is None


def test_a_scheduler_restarted_from_a_checkpoint_reads_only_the_tail(bus: KafkaBus) -> None:
    _publish(
        bus,
        [
            *_lab(nodes=2),
            (submitted("w1", budget="lab/a", pools=("p",), gpus=4, min_runtime_s=600), T0 + 1),
        ],
    )
    clock = Clock(T0 + 5)
    first = _service(bus, clock)
    _until(first, lambda: first.published >= 3)  # settings, the place command, the placement
    assert first.checkpoints is not None
    assert first.checkpoints.save(first.state, first.follower.positions)
    saved_at = dict(first.follower.positions)
    first.close()

    _publish(
        bus, [(submitted("w2", budget="lab/b", pools=("p",), gpus=2, min_runtime_s=600), T0 + 6)]
    )
    clock.now += 10
    resumed = _service(bus, clock)
    resumed._restore()
    assert resumed.follower.positions == saved_at, "it reads from where the checkpoint ends"
    restored = resumed.state.events
    assert restored > 0
    resumed._catch_up()
    tail = resumed.state.events - restored
    from_zero = _service(bus, clock, checkpoint_every_s=None)
    from_zero._catch_up()
    assert _facts(resumed.state)[:2] == _facts(from_zero.state)[:2]
    assert "w2" in resumed.state.cluster.workloads
    assert tail <= 2, "the tail: w2's submission (the first's own outputs are known)"
    assert from_zero.state.events > restored
    resumed.close()
    from_zero.close()


def test_the_api_view_restarts_from_its_checkpoint(bus: KafkaBus) -> None:
    from services.api.view import LiveView

    _publish(
        bus,
        [
            *_lab(nodes=2),
            (submitted("w1", budget="lab/a", pools=("p",), gpus=4, min_runtime_s=600), T0 + 1),
        ],
    )
    first = LiveView.from_kafka(bus.broker.bootstrap, bus.topics, checkpoint_every_s=3600)
    first.start()
    assert first.wait_caught_up(30)
    assert first.checkpoints is not None
    first.stop()  # the thread stops first: its state is still there to save
    assert first.checkpoints.save(first.state, first._folded)
    _publish(
        bus, [(submitted("w2", budget="lab/b", pools=("p",), gpus=2, min_runtime_s=600), T0 + 6)]
    )
    resumed = LiveView.from_kafka(bus.broker.bootstrap, bus.topics, checkpoint_every_s=3600)
    restored = resumed.state.events
    assert restored > 0, "the view starts from its checkpoint"
    resumed.start()
    assert resumed.wait_caught_up(30)
    assert resumed.state.events - restored == 1  # the tail only: w2's submission
    from_zero = LiveView.from_kafka(bus.broker.bootstrap, bus.topics)
    from_zero.start()
    assert from_zero.wait_caught_up(30)
    assert _facts(resumed.state) == _facts(from_zero.state)
    resumed.stop()
    from_zero.stop()


def test_a_view_that_read_the_log_from_its_first_offset_checkpoints_at_once(
    bus: KafkaBus,
) -> None:
    """A first start on a long history must not be read again after a crash an interval
    later: the fold saves a checkpoint as soon as it has caught up, then every interval; one
    restored from a checkpoint waits the interval."""
    from services.api.view import LiveView

    _publish(bus, _lab(nodes=2))
    first = LiveView.from_kafka(bus.broker.bootstrap, bus.topics, checkpoint_every_s=3600)
    first.start()
    assert first.wait_caught_up(30)
    assert first.checkpoints is not None
    _until_true(lambda: first.checkpoints is not None and first.checkpoints.saved == 1)
    first.stop()
    again = LiveView.from_kafka(bus.broker.bootstrap, bus.topics, checkpoint_every_s=3600)
    assert again.state.events > 0
    again.start()
    assert again.wait_caught_up(30)
    time.sleep(1.0)
    assert again.checkpoints is not None
    assert again.checkpoints.saved == 0, "restored: the next one is an interval away"
    again.stop()


def _until_true(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
