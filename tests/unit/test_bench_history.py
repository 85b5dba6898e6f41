"""``fairshare bench history``'s generator alone: a tiny history (2 nodes, 1 hour) is a log the
services fold as they would a real one, with the charges the ledger re-derives, and liveness
signals and heartbeats at the agents' cadences; and the parts of the bench that judge its
figures."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import pytest

from events import Topics
from events.envelope import Envelope
from events.models import (
    GpuHeartbeat,
    LedgerCharge,
    NodeAlive,
    PlaceCommand,
    UsageSnapshot,
    WorkloadFinished,
    WorkloadStarted,
)
from events.serde import decode_binary, encode_binary
from projections.live_state import LiveState
from services.audit.replay import replay
from services.bench.history.gen import HistoryConfig, HistoryGenerator, parse_length
from services.bench.history.summary import extrapolate, summarize

END = 1_796_000_000.0  # 2026-11-29, a few days before these tests were written
TOPICS = Topics(prefix="history.")


def _history(nodes: int = 2, length_s: int = 3600) -> tuple[HistoryGenerator, list[Envelope[Any]]]:
    written: list[Envelope[Any]] = []
    config = HistoryConfig(nodes=nodes, length_s=length_s, end=END)
    generator = HistoryGenerator(config, TOPICS, written.append)
    generator.finish(END)
    # through the bytes, as every consumer reads them: the strict decode checks every model,
    # the heartbeats built without validation included
    decoded = [decode_binary(r.value, r.headers) for r in map(encode_binary, written)]
    return generator, decoded


@pytest.fixture(scope="module")
def history() -> tuple[HistoryGenerator, list[Envelope[Any]]]:
    return _history()


def test_the_history_folds_into_live_state_with_nothing_rejected(
    history: tuple[HistoryGenerator, list[Envelope[Any]]],
) -> None:
    _generator, log = history
    times = [e.time for e in log]
    assert times == sorted(times), "written in event-time order"
    assert times[-1].timestamp() <= END + 3, "nothing after the end (but the last starts)"
    state = LiveState()
    for envelope in log:
        state.apply(envelope)
    assert state.rejected == []
    assert state.waiting == []
    assert len(state.cluster.nodes) == 2
    statuses = {w.status for w in state.cluster.workloads.values()}
    assert "pending" not in statuses, "every submission is placed: nothing left to schedule"
    assert "running" in statuses
    assert statuses & {"succeeded", "failed"}
    assert state.settings is not None
    assert state.tree.nodes.keys() >= {"lab", "lab/vision", "lab/robotics", "lab/nlp"}


def test_the_ledger_recomputed_by_the_audit_matches_the_charges_in_the_log(
    history: tuple[HistoryGenerator, list[Envelope[Any]]],
) -> None:
    _generator, log = history
    result = replay(log)
    assert result.identical, result.differences[:5]
    charges = [e for e in log if isinstance(e.data, LedgerCharge)]
    assert result.recorded_count == len(charges) > 0
    assert all(e.source == "fairshare/charging" and e.causationid for e in charges)


def test_liveness_every_10_s_per_node_with_every_gpu_and_its_occupant(
    history: tuple[HistoryGenerator, list[Envelope[Any]]],
) -> None:
    _generator, log = history
    beats: dict[str, list[float]] = defaultdict(list)
    started: dict[str, float] = {}
    finished: dict[str, float] = {}
    for envelope in log:
        data, at = envelope.data, envelope.time.timestamp()
        if isinstance(data, WorkloadStarted):
            started[data.workload_id] = at
        elif isinstance(data, WorkloadFinished):
            finished[data.workload_id] = at
        elif isinstance(data, NodeAlive):
            beats[data.node].append(at)
            assert [g.index for g in data.gpus] == list(range(8))
            for gpu in data.gpus:
                if gpu.occupant is not None:
                    assert gpu.attempt == 1
                    assert started[gpu.occupant] <= at < finished.get(gpu.occupant, 1e12)
    assert len(beats) == 2
    for times in beats.values():
        assert {b - a for a, b in itertools.pairwise(times)} == {10.0}
        assert len(times) in (360, 361)  # [start, end] an hour apart


def test_durable_heartbeats_at_start_on_every_change_of_occupants_and_every_5_minutes(
    history: tuple[HistoryGenerator, list[Envelope[Any]]],
) -> None:
    _generator, log = history
    alive: dict[tuple[str, float], NodeAlive] = {}
    beats: dict[str, list[tuple[float, GpuHeartbeat]]] = defaultdict(list)
    for envelope in log:
        data, at = envelope.data, envelope.time.timestamp()
        if isinstance(data, NodeAlive):
            alive[(data.node, at)] = data
        elif isinstance(data, GpuHeartbeat):
            beats[data.node].append((at, data))
    assert len(beats) == 2
    for node, sent in beats.items():
        signals = sorted(t for n, t in alive if n == node)
        assert sent[0][0] == signals[0], "at the node's first round"
        for at, beat in sent:
            assert beat.gpus == alive[(node, at)].gpus, "the readings of that round's signal"
        for (a, before), (b, after) in itertools.pairwise(sent):
            assert b - a <= 300
            changed = [g.occupant for g in before.gpus] != [g.occupant for g in after.gpus]
            assert changed or b - a == 300, "only when due or when its occupants changed"
        for a, b in itertools.pairwise(signals):
            occupants = [[g.occupant for g in alive[(node, t)].gpus] for t in (a, b)]
            if occupants[0] != occupants[1]:
                assert b in {at for at, _ in sent}, "at once when its occupants change"


def test_decisions_and_snapshots_name_positions_of_the_log(
    history: tuple[HistoryGenerator, list[Envelope[Any]]],
) -> None:
    generator, log = history
    commands = [e.data for e in log if isinstance(e.data, PlaceCommand)]
    snapshots = [e.data for e in log if isinstance(e.data, UsageSnapshot)]
    assert commands
    assert len(snapshots) >= 100  # every 30 s
    assert len(commands[0].decision.input_position) == 8 * 3  # every partition of 8 topics
    last = snapshots[-1].as_of
    assert {p.topic for p in last} == {"history.workloads", "history.heartbeats"}
    assert sum(p.offset for p in last) <= generator.records
    assert generator.by_topic()["liveness"] == generator.liveness() == 721
    assert generator.by_topic()["heartbeats"] == generator.heartbeats()
    assert 2 * 12 < generator.heartbeats() < 721 / 5, "every 5 minutes, and on changes"


def test_keep_alive_sends_one_signal_per_node_naming_the_runs_of_the_end() -> None:
    written: list[Envelope[Any]] = []
    generator = HistoryGenerator(
        HistoryConfig(nodes=3, length_s=3600, end=END), TOPICS, written.append
    )
    generator.finish(END)
    running = {
        g.occupant for e in written[-30:] if isinstance(e.data, NodeAlive) for g in e.data.gpus
    }
    before = len(written)
    assert generator.keep_alive(END + 60) == 3
    assert generator.keep_alive(END + 61) == 0  # not due again for 10 s
    late = len(written)
    assert generator.keep_alive(END + 500) == 3  # a late call does not burst
    fresh = written[before:]
    assert all(isinstance(e.data, NodeAlive | GpuHeartbeat) for e in fresh)
    assert sum(isinstance(e.data, NodeAlive) for e in fresh) == 6
    beats = sum(isinstance(e.data, GpuHeartbeat) for e in written[late:])
    assert beats == 3, "over 5 minutes later: every node's heartbeat is due again"
    assert {g.occupant for e in fresh for g in e.data.gpus} == running
    assert not any(isinstance(e.data, LedgerCharge) for e in fresh)


def test_lengths() -> None:
    assert [parse_length(t) for t in ("30m", "1h", "6h", "1d", "1w", "4w")] == [
        1800,
        3600,
        21_600,
        86_400,
        604_800,
        2_419_200,
    ]
    for bad in ("", "h", "1y", "0d", "-1h", "1.5h"):
        with pytest.raises(ValueError, match="history length"):
            parse_length(bad)


def _fake(length: str, restart: float, rss: float, p99: float, disk: int) -> dict[str, Any]:
    service = {"caught_up_s": restart, "peak_rss_mb": rss}
    services = {name: dict(service) for name in ("projector", "charging", "scheduler", "api")}
    services |= {
        "projector_cold": service,
        "charging_first_start": service,
        "scheduler_first_start": service,
        "api_first_start": service,
    }
    return {
        "history": length,
        "gpus": 16,
        "generated": {"records": 1},
        "services": services,
        "budgets_ms": {"p50": p99 / 2, "p99": p99},
        "charges_report": {"s": 0.1},
        "broker": extrapolate(
            {"heartbeats": disk, "liveness": 30 * disk, "usage": 1000}, parse_length(length), 2
        ),
        "rejected_facts": {"api_rejected": 0, "in_service_logs": {"scheduler": 1}},
        "closed_period_audit": (
            {"period": None} if length == "1h" else {"s": 1.0, "identical": length != "1w"}
        ),
    }


def test_the_summary_puts_each_figure_against_its_target() -> None:
    summary = summarize([_fake("1h", 2.0, 100, 40, 10_000), _fake("1d", 40.0, 120, 90, 240_000)], 2)
    figures = summary["figures"]
    charging = figures["restart_s.charging"]
    assert charging["by_history"] == {"1h": 2.0, "1d": 40.0}
    assert charging["ratio_longest_to_shortest"] == 20.0
    assert (charging["met"], charging["ratio_met"], charging["worst_over_target"]) == (
        False,
        False,
        1.33,
    )
    rss = figures["peak_rss_mb.api"]
    assert (rss["ratio_longest_to_shortest"], rss["ratio_met"]) == (1.2, True)
    assert figures["budgets_p99_ms"]["met"] is True
    # 240 kB a day of heartbeats for 2 nodes: 120 MB for 1,000 (usage as it is)
    assert figures["gb_per_day_1000_nodes"]["by_history"]["1d"] == 0.12
    # liveness is kept for its retention only: apart from the durable log
    broker = _fake("1d", 40.0, 120, 90, 240_000)["broker"]
    assert broker["transient_gb_per_day_1000_nodes"] == 3.6
    assert "restart_s.charging" in summary["missed"]
    audit = figures["closed_period_audit_s"]
    assert audit["by_history"] == {"1h": None, "1d": 1.0}
    assert "closed_period_audit.1d" not in summary["missed"]
    assert "budgets_p99_ms" not in summary["missed"]
    assert summary["rejected_facts"] == {"1h": 1, "1d": 1}


def test_the_end_places_and_starts_only_what_was_submitted_by_then() -> None:
    """The history ends a second before a submission whose placement would be due within the
    end's grace (the scheduler and the agent act at once): that placement is not written
    without its submission (the folds would hold it for ever), and nothing is left pending
    (the scheduler would act on it)."""
    from services.bench.history import gen

    written: list[Envelope[Any]] = []
    config = HistoryConfig(nodes=6, length_s=1800, end=END)
    generator = HistoryGenerator(config, TOPICS, written.append)
    until = END - 600
    while not (submits := [t for t, kind, *_ in generator._queue if kind == gen._SUBMIT]):
        until += 10
        generator.generate(until)
    generator.finish(min(submits) - 1)
    state = LiveState()
    for envelope in written:
        state.apply(envelope)
    assert (state.rejected, state.waiting) == ([], [])
    assert "pending" not in {w.status for w in state.cluster.workloads.values()}


def test_the_closed_period_audit_is_judged_from_the_first_history_that_has_one() -> None:
    histories = [
        _fake("1h", 2.0, 100, 40, 10_000),
        _fake("1d", 2.0, 100, 40, 240_000),
        _fake("1w", 2.0, 100, 40, 1_680_000),
    ]
    histories[2]["closed_period_audit"] = {"s": 1.2, "identical": False}
    summary = summarize(histories, 2)
    audit = summary["figures"]["closed_period_audit_s"]
    assert audit["ratio_longest_to_shortest"] == 1.2
    assert audit["ratio_met"] is True
    assert summary["missed"] == ["closed_period_audit.1w"]
