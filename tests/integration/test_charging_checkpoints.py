"""Charging restarted from its checkpoint on a real broker (issue 23): it reads only the tail of
its inputs and of the ledger topic, and posts no charge twice and none missing, even when the
previous run published charges after its checkpoint and was then killed."""

from __future__ import annotations

import time

import pytest

from services.charging.driver import ChargingDriver
from services.charging.serve import kafka_charging_host
from tests.charging_facts import batch
from tests.integration.kafka_bus import KafkaBus
from tests.integration.test_charging_shards import _charges, _expected, _publish

pytestmark = [pytest.mark.broker]


def _run_until(charging: ChargingDriver, charges: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    charging.run(
        lambda: charging.host.published >= charges or time.monotonic() > deadline, poll_s=0.2
    )
    assert charging.host.published == charges


def test_charging_restarts_from_its_checkpoint_and_reads_only_the_tail(bus: KafkaBus) -> None:
    first, second, third = batch("a", 0), batch("b", 4 * 3600), batch("c", 8 * 3600)
    options = {"snapshot_every_s": 3600, "checkpoint_every_s": 3600}
    bootstrap = bus.broker.bootstrap

    _publish(bus, first)
    saver = kafka_charging_host(bootstrap, bus.topics, **options)
    # it saves a checkpoint once it has caught up from the first offset, and as it stops
    _run_until(saver, len(_expected(first)))
    assert saver.checkpoints is not None
    assert 1 <= saver.checkpoints.saved <= 2

    # A run that publishes the second batch's charges and is killed before any checkpoint
    # (one that never saves: the checkpoint stays the first run's).
    _publish(bus, second)
    killed = kafka_charging_host(
        bootstrap, bus.topics, snapshot_every_s=3600, checkpoint_every_s=None
    )
    _run_until(killed, len(_expected(first + second)) - len(_expected(first)))

    _publish(bus, third)
    resumed = kafka_charging_host(bootstrap, bus.topics, **options)
    expected = _expected(first + second + third)
    new = len(expected) - len(_expected(first + second))
    _run_until(resumed, new)
    assert resumed.restored, "it started from the checkpoint"
    tail = resumed.host.state.events - saver.host.state.events
    assert 0 < tail <= len(second) + len(third), "it folded the tail only, never the first"

    charges = _charges(bus)
    ids = [c.charge_id for c in charges]
    assert len(ids) == len(set(ids)), "no charge published twice"
    assert {c.charge_id: c for c in charges} == expected, "and none missing"

    # Its usage counts every charge once: those it restored, read back, and posted.
    (snapshot,) = resumed.host.snapshots()
    totals: dict[str, int] = {}
    for charge in expected.values():
        if charge.kind == "allocated":
            totals[charge.budget] = totals.get(charge.budget, 0) + charge.signed_gpu_seconds
    window = {u.budget: u.allocated_gpu_s for u in snapshot.budgets}
    assert {b: s for b, s in window.items() if s} == totals
