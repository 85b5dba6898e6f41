"""Closed periods on a real broker (issue 23): charging with hour-long periods and a one-hour
horizon seals each hour once the horizon has passed it, every seal chained to the one before;
``audit replay --period`` re-derives each from where it opened and passes; a late fact becomes a
correction the open period holds (the closed seals still verify); a charge no fact supports and
a hand-written wrong seal are reported; and the audit of one period reads as much whatever the
history before it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from events import TopicKind, new_event
from events.models import LedgerCharge, PeriodClosed, WorkloadLost
from events.models.ledger import charge_id
from events.times import HOUR
from projections.periods import check_chain, period_name, seal_of
from services.audit.period import PeriodAudit, audit_period
from services.brokers import BrokerHandle
from services.charging.serve import kafka_charging_host
from tests.charging_facts import Facts, batch
from tests.integration.kafka_bus import KafkaBus
from tests.integration.test_charging_shards import _expected, _publish, _read
from tests.unit.test_ledger import T0, run_events

# Three minutes on a 2-core machine (charging runs several times over hours of facts): with
# the slow scenarios, so that the README's default test command stays under ten minutes.
pytestmark = [pytest.mark.broker, pytest.mark.slow]

OPTIONS = {
    "snapshot_every_s": 3600,
    "checkpoint_every_s": 3600,
    "period_length": "hour",
    "horizon_s": HOUR,
}


def _charge_until_idle(bus: KafkaBus, charges: int, timeout_s: float = 120.0) -> None:
    """Run charging (restored from its checkpoint, if any) until it has published ``charges``
    charges (every one the new facts give) and then read an idle second."""
    charging = kafka_charging_host(bus.broker.bootstrap, bus.topics, **OPTIONS)
    deadline = time.monotonic() + timeout_s
    idle_since: list[float] = []

    def done() -> bool:
        assert time.monotonic() < deadline, "charging did not catch up in time"
        if charging.host.published < charges:
            return False
        idle_since.append(time.monotonic())
        return idle_since[-1] - idle_since[0] > 1.0

    charging.run(done, poll_s=0.2)


def _seals(bus: KafkaBus) -> list[PeriodClosed]:
    """The seals on the ledger, in the order of their periods (they lie on several
    partitions)."""
    seals = [
        d.envelope.data
        for d in _read(bus, TopicKind.LEDGER)
        if isinstance(d.envelope.data, PeriodClosed)
    ]
    return sorted(seals, key=lambda s: s.start)


def _long_run(workload: str, start: int, until: int) -> Facts:
    """A run of one GPU still going at ``until`` (heartbeats every 10 minutes, no end)."""
    facts = run_events(workload, "lab/a", 1, start, until + 1, True, 600)
    return [(data, t) for data, t in facts if t <= until and "Finished" not in type(data).__name__]


def _audit(bus: KafkaBus, period: str) -> PeriodAudit:
    return audit_period(bus.broker.bootstrap, bus.topics, period)


def test_hours_are_sealed_chained_and_audited_and_a_late_fact_is_a_correction(
    bus: KafkaBus,
) -> None:
    facts = batch("a", 0) + batch("b", 4 * HOUR) + _long_run("long", T0 + 30, T0 + 10 * HOUR)
    facts.sort(key=lambda pair: pair[1])
    _publish(bus, facts)
    expected = _expected(facts)
    _charge_until_idle(bus, len(expected))

    seals = _seals(bus)
    names = [s.period for s in seals]
    assert names[0] == period_name(T0 - HOUR, "hour") or names[0] == period_name(T0, "hour")
    assert len(names) >= 4, names
    assert len(set(names)) == len(names), names
    assert check_chain([seal_of(s) for s in seals]) == [], "each chains to the one before"
    for sealed in seals:
        audit = _audit(bus, sealed.period)
        assert audit.identical, (sealed.period, audit.differences)
        assert audit.from_checkpoint
    assert sum(s.charges for s in seals) <= len(expected)

    # A late fact: the long run was lost in an hour already sealed. Its corrections for the
    # sealed hours are posted now, and held by the open period.
    lost_in = seals[2]
    last = int(lost_in.start.timestamp()) + 1200
    late = (
        WorkloadLost(
            workload_id="long",
            attempt=1,
            last_heartbeat=datetime.fromtimestamp(last, UTC),
            node="node-long",
        ),
        T0 + 10 * HOUR + 10,
    )
    more = batch("c", 10 * HOUR)
    _publish(bus, [late, *more])
    everything = sorted([*facts, late, *more], key=lambda pair: pair[1])
    _charge_until_idle(bus, len(_expected(everything)) - len(expected))
    later = _seals(bus)
    assert later[: len(seals)] == seals, "sealed periods are never edited"
    assert check_chain([seal_of(s) for s in later]) == []
    audits = [_audit(bus, s.period) for s in later[len(seals) :]]
    for audit in audits:
        assert audit.identical, (audit.period, audit.differences)
    assert any(a.late for a in audits), "the corrections count in the period open when posted"
    assert _audit(bus, lost_in.period).identical, "the closed seal still verifies"


def test_a_charge_no_fact_supports_and_a_wrong_seal_are_reported(bus: KafkaBus) -> None:
    facts = batch("a", 0) + _long_run("long", T0 + 30, T0 + 6 * HOUR)
    facts.sort(key=lambda pair: pair[1])
    _publish(bus, facts)
    expected = _expected(facts)
    _charge_until_idle(bus, len(expected))
    seals = _seals(bus)
    opened = seals[-1].end  # the first hour not sealed yet
    forged_charge = LedgerCharge(
        charge_id=charge_id("a1", 1, int(seals[0].start.timestamp()) // HOUR, 7),
        workload_id="a1",
        budget="lab/a",
        pool="p",
        bucket_start=seals[0].start,
        kind="allocated",
        debit_account="budget:lab/a",
        credit_account="capacity:p",
        gpu_seconds=60,
        amount=60,
    )
    next_name = period_name(int(opened.timestamp()), "hour")
    forged_seal = seals[-1].model_copy(
        update={"period": next_name, "start": opened, "end": datetime.fromtimestamp(
            int(opened.timestamp()) + HOUR, UTC), "previous_digest": seals[-1].digest}
    )  # fmt: skip
    publisher = bus.publisher()
    for data in (forged_charge, forged_seal):
        publisher.publish(new_event(data, source="tests", time=opened))
    publisher.flush()
    more = batch("b", 6 * HOUR)  # workload facts move the horizon on
    _publish(bus, more)
    _charge_until_idle(bus, len(_expected(facts + more)) - len(expected))

    audits = {s.period: _audit(bus, s.period) for s in _seals(bus) if s.start >= opened}
    assert len(audits) >= 2, "the forged seal was adopted and later periods sealed after it"
    wrong = audits[next_name].differences
    assert any("the seal's digest does not match" in d for d in wrong), wrong
    assert any("charges in the log" in d for d in wrong), wrong
    reported = [d for a in audits.values() for d in a.differences]
    assert any(f"not supported by the facts: {forged_charge.charge_id}" in d for d in reported)


def _history(bus: KafkaBus, batches_before: int) -> str:
    """``batches_before`` batches of 4 hours, then one in hour 40: the period audited."""
    facts: Facts = []
    for n in range(batches_before):
        facts += batch(f"h{n}", n * 4 * HOUR)
    facts += batch("target", 40 * HOUR) + batch("after", 44 * HOUR)
    facts.sort(key=lambda pair: pair[1])
    _publish(bus, facts)
    _charge_until_idle(bus, len(_expected(facts)), timeout_s=300)
    return period_name(T0 + 41 * HOUR, "hour")


def test_the_audit_of_a_period_reads_the_period_not_the_history(broker: BrokerHandle) -> None:
    short, long = KafkaBus(broker), KafkaBus(broker)
    try:
        period = _history(short, 0)
        assert _history(long, 9) == period
        audits = [_audit(short, period), _audit(long, period)]
    finally:
        short.close()
        long.close()
    for audit in audits:
        assert audit.identical, audit.differences
        assert audit.from_checkpoint
    # The period's own facts (and those up to its seal, a horizon later) whatever came before:
    # charging reads its partitions merged by event time, so it enters the period with every
    # partition at the period's start.
    assert audits[0].facts == audits[1].facts, "the same facts: the period's own"
    # Its own charges are the same; the late ones it holds depend on where the chain began.
    own = [a.recorded - a.late for a in audits]
    assert own[0] == own[1], own
    print(  # the figures for the report (pytest -s)
        f"audit of {period}: {audits[0].seconds:.2f} s after 0 h of history, "
        f"{audits[1].seconds:.2f} s after 36 h; {audits[0].facts} facts each"
    )


def _foreign_ledger_history(bus: KafkaBus, batches_before: int) -> str:
    """As ``_history``, but every charge is on the ledger before charging first runs (as a
    fleet's history restored from elsewhere, or the history bench's generator, leaves it):
    charging's first fold is a rebuild over a ledger it did not write."""
    facts: Facts = []
    for n in range(batches_before):
        facts += batch(f"h{n}", n * 4 * HOUR)
    facts += batch("target", 40 * HOUR) + batch("after", 44 * HOUR)
    facts.sort(key=lambda pair: pair[1])
    _publish(bus, facts)
    publisher = bus.publisher()
    charges = _expected(facts)
    for charge in charges.values():
        at = datetime.fromtimestamp(charge.bucket_start.timestamp() + HOUR, UTC)
        publisher.publish(new_event(charge, source="fairshare/charging", time=at))
    publisher.flush()
    charging = kafka_charging_host(bus.broker.bootstrap, bus.topics, **OPTIONS)
    deadline = time.monotonic() + 300

    def sealed() -> bool:
        assert time.monotonic() < deadline, "charging did not seal the period in time"
        last = charging.host.state.periods.last
        return last is not None and last.end.timestamp() >= T0 + 42 * HOUR

    charging.run(sealed, poll_s=0.2)
    assert charging.host.published == 0, "every charge was on the ledger already"
    return period_name(T0 + 41 * HOUR, "hour")


def test_a_rebuild_over_a_ledger_it_did_not_write_audits_a_period_from_its_own_charges(
    broker: BrokerHandle,
) -> None:
    """A rebuilt fold cannot say where the ledger stood when a period opened; it indexes the
    ledger it reads (the first offset of a charge per period) and seals the period from
    there, so the audit reads the period's charges, not the whole ledger."""
    short, long = KafkaBus(broker), KafkaBus(broker)
    try:
        period = _foreign_ledger_history(short, 0)
        assert _foreign_ledger_history(long, 9) == period
        audits = [_audit(short, period), _audit(long, period)]
        whole = [len(_read(bus, TopicKind.LEDGER)) for bus in (short, long)]
        seals = [len(_seals(bus)) for bus in (short, long)]
    finally:
        short.close()
        long.close()
    for audit in audits:
        assert audit.identical, audit.differences
    read = [a.ledger_records for a in audits]
    assert whole[1] > 4 * whole[0], whole  # the long ledger is much longer...
    # ...but the period's audit reads its own charges and what was appended up to its cut,
    # which after a rebuild is the seals of every period before it (one record each)
    assert read[1] < whole[1] / 3, (read, whole)
    assert read[1] - read[0] <= seals[1] - seals[0], (read, seals)
