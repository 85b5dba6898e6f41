"""Crash-only services: a fatal Kafka client error ends the process with a non-zero exit and one
structured log line (so a supervisor restarts it), loops that retry publish failures do not
swallow it, and SIGTERM stops a service within its grace period even while librdkafka holds
the main thread."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from events import TopicKind
from events.envelope import Envelope
from events.positions import Delivery, Position
from services.agents import AgentSettings, ClusterAgent, SimulatedAdapter, simulated_nodes
from services.api.view import LiveView
from services.bus.export import read_to_end
from services.bus.follower import LogFollower
from services.bus.kafka import (
    FatalBusError,
    FatalLatch,
    KafkaEventPublisher,
    KafkaEventSubscriber,
)
from services.bus.lease import KafkaLeaseLog
from services.bus.memory import InMemoryBroker, InMemorySubscriber
from services.bus.port import PublishError
from services.runtime.service import EXIT_CRASH, EXIT_STOP_TIMEOUT, run_service
from services.runtime.signals import StopRequest, stop_requested_on_signals
from services.scheduler.lease import LogLease, LogPoolLeases

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "127.0.0.1:1"  # nothing listens: the clients are built, never connected
QUIET = {"log_level": 0}
OUT_OF_ORDER = KafkaError(
    KafkaError._FATAL, "Broker: Broker received an out of order sequence number", fatal=True
)


class FatalPublisher:
    """A publisher whose client librdkafka has declared dead."""

    def publish(self, envelope: Envelope[Any]) -> None:
        raise FatalBusError("producer agent-c1: _FATAL: out of order sequence number")

    def flush(self, timeout_s: float = 30.0) -> None:
        return None

    def close(self) -> None:
        return None


def test_a_fatal_error_is_latched_and_raised_on_the_next_call_not_a_transient_one() -> None:
    latch = FatalLatch("producer test")
    latch.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "all brokers down"))
    latch.check()  # transient: librdkafka retries by itself
    latch.on_error(OUT_OF_ORDER)
    with pytest.raises(FatalBusError, match="out of order sequence number"):
        latch.check()
    fenced = FatalLatch("producer fenced")
    with pytest.raises(FatalBusError, match="fenced"):
        fenced.raise_if_fatal(KafkaException(KafkaError(KafkaError._FENCED, "fenced")))
    FatalLatch("other").raise_if_fatal(KafkaException(KafkaError(KafkaError._TIMED_OUT, "t/o")))


def test_fatal_bus_error_is_not_a_publish_error_so_retry_loops_cannot_catch_it() -> None:
    assert not issubclass(FatalBusError, PublishError)


def test_a_publisher_whose_client_reported_a_fatal_error_refuses_every_call() -> None:
    publisher = KafkaEventPublisher(NOWHERE, client_id="t", config=QUIET)
    publisher.fatal.on_error(OUT_OF_ORDER)  # as librdkafka's error_cb would
    with pytest.raises(FatalBusError):
        publisher.publish_raw("t", b"k", b"v")
    with pytest.raises(FatalBusError):
        publisher.flush(1)
    started = time.monotonic()
    publisher.close()  # does not wait for acknowledgements a dead client cannot get
    assert time.monotonic() - started < 5


def test_a_subscriber_raises_the_fatal_error_of_its_consumer() -> None:
    subscriber = KafkaEventSubscriber(NOWHERE, "g", [TopicKind.WORKLOADS], config=QUIET)
    real = subscriber._consumer

    class Dead:
        def consume(self, num_messages: int, timeout: float) -> list[object]:
            raise KafkaException(OUT_OF_ORDER)

    subscriber._consumer = Dead()  # type: ignore[assignment]
    try:
        with pytest.raises(FatalBusError):
            subscriber.poll(0)
        with pytest.raises(FatalBusError):  # and on every call after
            subscriber.poll(0)
    finally:
        real.close()


class _Message:
    def __init__(self, error: KafkaError | None, value: bytes = b"") -> None:
        self._error, self.value = error, value

    def error(self) -> KafkaError | None:
        return self._error


class _Consumer:
    def __init__(self, *messages: _Message) -> None:
        self.messages = list(messages)

    def consume(self, num_messages: int, timeout: float) -> list[_Message]:
        return self.messages[:num_messages]


def test_every_reader_drops_a_transient_error_of_a_message_and_raises_a_fatal_one() -> None:
    latch = FatalLatch("consumer t")
    transient = KafkaError(KafkaError._PARTITION_EOF, "end of partition")
    good = [_Message(None, b"a"), _Message(None, b"b")]
    consumer = _Consumer(good[0], _Message(transient), good[1])
    assert latch.consume(consumer, 10, 0) == good  # type: ignore[arg-type, comparison-overlap]
    with pytest.raises(FatalBusError, match="out of order"):
        latch.consume(_Consumer(good[0], _Message(OUT_OF_ORDER)), 10, 0)  # type: ignore[arg-type]
    with pytest.raises(FatalBusError):  # and on every call after, whatever comes
        latch.consume(_Consumer(*good), 10, 0)  # type: ignore[arg-type]


class _DeadConsumer:
    """A consumer whose every consume fails as librdkafka fails a dead client; it answers
    what the follower asks of a consumer before it reads (one topic of one partition)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.consumed = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return SimpleNamespace(topics={"fairshare.workloads": SimpleNamespace(partitions={0: 0})})

    def get_watermark_offsets(
        self, partition: object, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        return 0, 1

    def assign(self, partitions: list[object]) -> None:
        return None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[_Message]:
        self.consumed += 1
        raise KafkaException(OUT_OF_ORDER)

    def close(self) -> None:
        return None


@pytest.mark.parametrize("eager", [False, True])
def test_a_follower_raises_the_fatal_error_of_its_consumer_instead_of_skipping_it(
    monkeypatch: pytest.MonkeyPatch, eager: bool
) -> None:
    """The scheduler, the agents and the API's view read with a follower: a dead consumer ends
    them (through FatalLatch.consume) instead of leaving them reading nothing for ever."""
    monkeypatch.setattr("services.bus.follower.Consumer", _DeadConsumer)
    follower = LogFollower(NOWHERE, [TopicKind.WORKLOADS], eager=eager)
    with pytest.raises(FatalBusError, match="out of order"):
        follower.poll(0)
    with pytest.raises(FatalBusError):  # latched: the end offsets too, from any thread
        follower.end_offsets()


def test_a_follower_raises_a_fatal_error_its_client_reported_through_the_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("services.bus.follower.Consumer", _DeadConsumer)
    follower = LogFollower(NOWHERE, [TopicKind.WORKLOADS])
    follower.kafka.fatal.on_error(OUT_OF_ORDER)  # as librdkafka's error_cb would
    with pytest.raises(FatalBusError):
        follower.poll(0)
    consumer = follower.kafka._consumer
    assert isinstance(consumer, _DeadConsumer)
    assert consumer.consumed == 0, "a dead client is not called again"


def test_a_one_shot_reader_raises_the_fatal_error_of_its_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """read_to_end (the dead letters already published, the charging rebuild, the export)
    went on reading past a dead client until its stall timeout, as if the log had ended."""
    monkeypatch.setattr("services.bus.export.Consumer", _DeadConsumer)
    with pytest.raises(FatalBusError, match="out of order"):
        list(read_to_end(NOWHERE, ["fairshare.workloads"]))


def _lease_log(monkeypatch: pytest.MonkeyPatch) -> KafkaLeaseLog:
    """A lease log whose clients are built, never connected (no topic to create)."""
    monkeypatch.setattr("services.bus.lease.ensure_lease_topic", lambda *_args: None)
    return KafkaLeaseLog(NOWHERE, config=QUIET)


def test_the_lease_raises_the_fatal_error_of_its_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler whose lease client died exits: it is no standby, nor a leader whose
    renewals reach the log."""
    lease_log = _lease_log(monkeypatch)
    real = lease_log._consumer
    lease_log._consumer = _DeadConsumer({})  # type: ignore[assignment]
    lease = LogLease(lease_log, holder="a", clock=time.monotonic)
    try:
        with pytest.raises(FatalBusError, match="out of order"):
            lease.held()
        with pytest.raises(FatalBusError):  # and on every call after
            lease.held()
    finally:
        real.close()


def test_the_lease_raises_a_fatal_error_its_producer_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lease_log = _lease_log(monkeypatch)
    leases = LogPoolLeases(lease_log, preferred=["p1"], holder="a", clock=time.monotonic)
    lease_log.fatal.on_error(OUT_OF_ORDER)  # the producer's error_cb, as librdkafka calls it
    with pytest.raises(FatalBusError):
        leases.held_pools()
    started = time.monotonic()
    leases.close()  # does not wait for acknowledgements a dead client cannot get
    assert time.monotonic() - started < 5


class _FailingSource:
    """A partition source whose reads fail with ``error`` (an empty log otherwise)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.closed = False

    def partitions(self) -> list[tuple[str, int]]:
        return [("fairshare.workloads", 0)]

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        raise self.error

    def end_offsets(self, cached: bool = False) -> dict[tuple[str, int], int]:
        return {("fairshare.workloads", 0): 0}

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "error",
    [FatalBusError("consumer follower: _FATAL: out of order"), RuntimeError("a fold bug")],
    ids=["fatal-bus-error", "unexpected"],
)
def test_the_api_ends_when_its_view_thread_cannot_go_on(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """No retrying for ever in the thread (an API answering from a state that no longer moves):
    the process exits 70 with one line saying why, and its supervisor restarts it."""
    caplog.set_level(logging.ERROR, logger="services.runtime")
    ended: list[int] = []
    view = LiveView(_FailingSource(error), end_process=ended.append)
    view.start()
    thread = view._thread
    assert thread is not None
    thread.join(timeout=10)
    assert ended == [EXIT_CRASH]
    [line] = [r for r in caplog.records if r.getMessage() == "service exiting"]
    assert str(error) in line.__dict__["reason"]


def test_a_view_stopped_in_good_order_does_not_end_the_process() -> None:
    ended: list[int] = []
    source = _FailingSource(RuntimeError("never raised"))
    source.fetch = lambda timeout_s, max_records: []  # type: ignore[method-assign]
    view = LiveView(source, end_process=ended.append)
    view.start()
    view.stop()
    assert ended == []
    assert source.closed


def test_the_agent_does_not_retry_a_dead_publisher() -> None:
    broker = InMemoryBroker()
    agent = ClusterAgent(
        SimulatedAdapter(simulated_nodes("c1", 1, 4, "h100")),
        FatalPublisher(),
        AgentSettings("c1", "p1"),
    )
    subscriber = InMemorySubscriber(broker, "agent", [])
    with pytest.raises(FatalBusError):
        agent.run(subscriber, lambda: False, poll_s=0, history=[])


def test_a_fatal_error_in_a_service_loop_exits_70_with_one_structured_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="services.runtime")
    with pytest.raises(SystemExit) as exited, stop_requested_on_signals():
        raise FatalBusError("producer scheduler: _FATAL: out of order sequence number")
    assert exited.value.code == EXIT_CRASH
    [line] = [r for r in caplog.records if r.name == "services.runtime"]
    assert line.getMessage() == "service exiting"
    assert line.__dict__["exit_code"] == EXIT_CRASH
    assert "out of order sequence number" in line.__dict__["reason"]
    assert line.exc_info is None  # the reason is the whole story


def test_other_exceptions_pass_through_the_signal_scope_unchanged() -> None:
    with pytest.raises(ValueError, match="mine"), stop_requested_on_signals():
        raise ValueError("mine")


def test_run_service_maps_an_unexpected_exception_to_exit_70(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def main() -> None:
        raise KeyError("budget")

    with pytest.raises(SystemExit) as exited:
        run_service(main)
    assert exited.value.code == EXIT_CRASH
    [line] = [r for r in caplog.records if r.name == "services.runtime"]
    assert "unexpected KeyError" in line.__dict__["reason"]
    assert line.exc_info is not None
    assert run_service(lambda: 3) == 3


def test_the_grace_timer_fires_once_after_the_first_request_and_not_when_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Joins the timers instead of sleeping past them: a timer's thread ends once it has fired
    or been cancelled, so what it did is known then, on a loaded machine too."""
    timers: list[threading.Timer] = []

    class Recorded(threading.Timer):
        def start(self) -> None:
            timers.append(self)
            super().start()

    monkeypatch.setattr(threading, "Timer", Recorded)
    fired: list[float] = []
    stop = StopRequest(0.05, on_expiry=lambda: fired.append(time.monotonic()))
    assert not stop()
    requested = time.monotonic()
    stop.request(15)
    stop.request(15)
    assert stop()
    [timer] = timers  # the second request starts no timer of its own
    timer.join(timeout=10)
    assert len(fired) == 1
    assert fired[0] - requested >= 0.04, "at the end of the grace period, not at once"
    cancelled = StopRequest(60, on_expiry=lambda: fired.append(0))
    cancelled.request(15)
    cancelled.cancel()
    timers[1].join(timeout=10)
    assert not timers[1].is_alive(), "a cancelled timer ends at once, without calling"
    assert len(fired) == 1


def test_sigterm_is_seen_while_librdkafka_holds_the_main_thread_and_bounded_by_grace() -> None:
    """A flush to a broker that does not answer keeps the main thread in C for 20 s; the stop
    flag is still set at once, and the process exits 71 when its grace period (2 s) ends."""
    script = textwrap.dedent(
        """
        import os, signal, sys, threading
        from confluent_kafka import Producer
        from services.runtime.signals import stop_requested_on_signals
        from tests.waiting import wait_until

        producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
        producer.produce("t", b"x")
        main = threading.main_thread().ident

        def hold():
            producer.flush(20)

        with stop_requested_on_signals(grace_s=2) as stop:
            def kill():
                in_hold = lambda: sys._current_frames()[main].f_code.co_name == "hold"
                wait_until(in_hold, "the main thread to call flush")
                os.kill(os.getpid(), signal.SIGTERM)
                wait_until(stop, "the stop flag", timeout_s=1.5)  # inside the grace
                print("flag set", flush=True)
            threading.Thread(target=kill, daemon=True).start()
            hold()
            print("flush returned", flush=True)
        """
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,  # the script imports tests.waiting
    )
    said = result.stdout + result.stderr
    assert result.returncode == EXIT_STOP_TIMEOUT, said
    assert "flag set" in result.stdout, said
    assert "flush returned" not in result.stdout
    assert time.monotonic() - started < 15


# -- what charging did during the same outage ----------------------------------------------
def test_charging_holds_a_run_whose_submission_it_has_not_read_instead_of_charging_no_budget() -> (
    None
):
    """A broker that came back without its last writes can hand the charging host a start
    whose submission it never read. Folded at once it posted charges to the budget ``''``
    and the usage snapshot failed (``ValidationError BudgetUsage budget ''``); held, the run
    is charged to its real budget once the submission arrives."""
    from datetime import UTC, datetime

    from events import decode_binary, new_event
    from events.models import LedgerCharge, WorkloadSubmitted
    from events.positions import Delivery, Position
    from projections.ledger import Ledger
    from services.bus.memory import InMemoryPublisher
    from services.charging.host import ChargingHost
    from tests.unit.test_ledger import T0, run_events

    broker = InMemoryBroker()
    host = ChargingHost(InMemoryPublisher(broker), list, snapshot_every_s=0)
    facts = run_events("w1", "lab/a", 2, T0 + 60, T0 + 3 * 3600, True, 600)
    submission = next(pair for pair in facts if isinstance(pair[0], WorkloadSubmitted))
    early = [pair for pair in facts if pair is not submission]  # the submission comes last
    for offset, (data, t) in enumerate([*early, submission]):
        envelope = new_event(data, source="t", time=datetime.fromtimestamp(t, UTC))  # type: ignore[type-var]
        host.handle(Delivery(envelope, Position("fairshare.workloads", 0, offset)))
        if data is not submission[0]:
            # builds (validates: budget '' would raise) and names no empty budget
            assert all(u.budget for s in host.snapshots() for u in s.budgets)

    expected = Ledger()
    for data, t in facts:
        expected.apply(data, float(t))
    charges = [decode_binary(r.value, r.headers).data for r in broker.records("fairshare.ledger")]
    assert charges, "charged at all (all() of nothing holds)"
    assert all(isinstance(c, LedgerCharge) and c.budget == "lab/a" for c in charges)
    assert sorted(c.charge_id for c in charges) == sorted(c.charge_id for c in expected.entries)
    assert not host.ledger.held
    assert {u.budget for s in host.snapshots() for u in s.budgets} == {"lab/a"}
