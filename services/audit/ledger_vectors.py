"""Ledger test vectors: small logs and the exact ledger each must fold to, in any read order.

``docs/spec/vectors/ledger/logs.json`` holds, per vector, the records of a small log as export
lines (in the canonical order of log-v1 section 8.9), the charges a fold in that order posts
(corrections included), and several shuffled read orders: a reader of any of them that sorts
the records into the canonical order MUST post exactly those charges, with the same ids, in
the same order. ``python -m services.audit.ledger_vectors`` regenerates the file from the
project's own fold; ``--check`` exits 1 if that would change anything (CI runs it).
``tests/unit/test_ledger_vectors.py`` checks the file with a fold written from the
specification alone, and with the project's.

The vectors live beside the signature vectors (``events.spec_vectors``) but are made here: the
ledger fold is a projection, which the ``events`` package may not import.
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from events.envelope import Envelope
from events.fact_order import in_fact_order
from events.models import (
    EventData,
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    NodeGpus,
    Placement,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.spec_vectors import SPEC_VERSION, _event, _line
from projections.ledger import Ledger

VECTOR_FILE = (
    Path(__file__).resolve().parent.parent.parent / "docs" / "spec" / "vectors" / "ledger"
) / "logs.json"
GENERATOR = "python -m services.audit.ledger_vectors"
#: Shuffled read orders per vector.
ORDERS = 4
#: 2027-01-04T09:00:00Z, on the hour.
HOUR_9 = datetime(2027, 1, 4, 9, tzinfo=UTC)

Fact = tuple[EventData, datetime]
Json = dict[str, Any]


def _t(hours: float = 0.0, seconds: float = 0.0) -> datetime:
    return HOUR_9 + timedelta(hours=hours, seconds=seconds)


def _placement(*nodes: str) -> Placement:
    return Placement(nodes=tuple(NodeGpus(node=node, gpus=(0,)) for node in nodes))


def _submitted(workload: str, at: datetime, allocated: bool = True) -> Fact:
    data = WorkloadSubmitted(
        workload_id=workload,
        budget="lab/vision",
        pools=("a100",),
        gpus=2,
        min_runtime_s=3600 if allocated else 0,
        submitter="ana",
    )
    return data, at


def _started(workload: str, at: datetime, allocated: bool = True) -> Fact:
    data = WorkloadStarted(
        workload_id=workload,
        attempt=1,
        pool="a100",
        placement=_placement("node-01", "node-02"),
        allocated=allocated,
    )
    return data, at


def _heartbeat(node: str, workload: str, at: datetime) -> Fact:
    reading = GpuReading(
        index=0, occupant=workload, attempt=1, utilisation_pct=90.0, memory_used_bytes=1 << 30
    )
    return GpuHeartbeat(
        node=node, cluster="cluster-a", sequence=int(at.timestamp()), gpus=(reading,)
    ), at


def _lost(workload: str, last_heartbeat: datetime, at: datetime) -> Fact:
    data = WorkloadLost(
        workload_id=workload, attempt=1, node="node-02", last_heartbeat=last_heartbeat
    )
    return data, at


def _finished(workload: str, at: datetime) -> Fact:
    return WorkloadFinished(workload_id=workload, attempt=1, outcome="succeeded"), at


def _preempted(workload: str, at: datetime, ran_s: int) -> Fact:
    data = WorkloadPreempted(
        workload_id=workload, attempt=1, command_id="preempt-wl-1", ran_s=ran_s
    )
    return data, at


def scenarios() -> list[tuple[str, str, list[Fact]]]:
    """(name, what it shows, its facts) of every vector."""
    late_loss = [
        _submitted("wl-1", _t(0.9)),
        _started("wl-1", _t(1, -0.3)),
        _heartbeat("node-02", "wl-1", _t(2)),
        _lost("wl-1", _t(2, -99.000001), _t(2, 20)),
    ]
    hour_edge = [
        _submitted("wl-1", _t(1)),
        _started("wl-1", _t(1.25)),
        _heartbeat("node-01", "wl-1", _t(2)),
        _preempted("wl-1", _t(2), ran_s=2700),
        _heartbeat("node-02", "wl-1", _t(2)),
    ]
    two_ends = [
        _submitted("wl-1", _t(1)),
        _started("wl-1", _t(1.5)),
        _heartbeat("node-01", "wl-1", _t(2)),
        _heartbeat("node-02", "wl-1", _t(3)),
        _finished("wl-1", _t(3.5)),
        _lost("wl-1", _t(2, 3000), _t(3.5, 60)),
    ]
    duplicates = [
        _submitted("wl-1", _t(0.5)),
        _started("wl-1", _t(1)),
        _started("wl-1", _t(1)),
        _heartbeat("node-01", "wl-1", _t(2)),
        _heartbeat("node-01", "wl-1", _t(2)),
        _finished("wl-1", _t(2.25)),
        _finished("wl-1", _t(2.25)),
    ]
    burst = [
        _submitted("wl-2", _t(0.5), allocated=False),
        _started("wl-2", _t(1.75), allocated=False),
        _heartbeat("node-01", "wl-2", _t(2)),
        _finished("wl-2", _t(2.5)),
    ]
    return [
        (
            "late-loss",
            "log-v1 8.8: an hour confirmed by a heartbeat and cut short by a loss dated earlier "
            "and stated later: posted, then corrected (revision 1, accounts reversed)",
            late_loss,
        ),
        (
            "end-at-an-hour-edge",
            "a preemption and two heartbeats at the same microsecond, on the hour: the "
            "workload fact first (topic rank), and the empty hour after it is never posted",
            hour_edge,
        ),
        (
            "two-ends",
            "a finish, then a loss of the same run dated earlier: both hours it touched are "
            "corrected down to the earlier end",
            two_ends,
        ),
        (
            "duplicates",
            "a start, a heartbeat and a finish each delivered twice: each posts once",
            duplicates,
        ),
        (
            "burst",
            "unallocated (burst) work: amount 0, the free account debited, the budget named",
            burst,
        ),
    ]


def _envelopes(name: str, facts: list[Fact]) -> list[Envelope[Any]]:
    """The facts as records: fixed ids, a duplicated fact keeping its twin's id."""
    envelopes: list[Envelope[Any]] = []
    seen: dict[tuple[str, datetime], Envelope[Any]] = {}
    base = 1000 * (1 + [n for n, _, _ in scenarios()].index(name))
    for n, (data, at) in enumerate(facts):
        key = (data.model_dump_json(), at)
        twin = seen.get(key)
        envelope = twin or _event(data, base + n, at, source="fairshare/ledger-vectors")
        seen[key] = envelope
        envelopes.append(envelope)
    return envelopes


def fold(records: list[Envelope[Any]]) -> list[LedgerCharge]:
    """The charges the project's fold posts for ``records`` sorted into the canonical order."""
    ledger = Ledger()
    for record in in_fact_order(records):
        ledger.apply(record.data, record.epoch_seconds)
    return ledger.entries


def _vector(name: str, about: str, facts: list[Fact]) -> Json:
    records = in_fact_order(_envelopes(name, facts))
    charges = fold(records)
    shuffle = random.Random(name)
    orders: list[list[int]] = []
    while len(orders) < ORDERS:
        order = list(range(len(records)))
        shuffle.shuffle(order)
        if order not in orders and order != sorted(order):
            orders.append(order)
    for order in orders:
        if fold([records[i] for i in order]) != charges:
            raise AssertionError(f"{name}: a shuffled order folds to another ledger")
    return {
        "name": name,
        "about": about,
        "records": [_line(record) for record in records],
        "charges": [charge.model_dump(mode="json") for charge in charges],
        "orders": orders,
    }


def render() -> bytes:
    """The vector file's content (deterministic: the same bytes every run)."""
    document = {
        "spec": SPEC_VERSION,
        "generated_by": GENERATOR,
        "about": (
            "Small logs (records: export lines in the canonical order of log-v1 8.9) and the "
            "charges a fold of them posts, in posting order. Each of orders (indices into "
            "records) is a read order: sorted into the canonical order, it MUST fold to "
            "exactly these charges (log-v1 section 8)."
        ),
        "vectors": [_vector(name, about, facts) for name, about, facts in scenarios()],
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description=__doc__)
    parser.add_argument("--file", type=Path, default=VECTOR_FILE)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file would change")
    args = parser.parse_args(argv)
    content = render()
    if args.check:
        if not args.file.is_file() or args.file.read_bytes() != content:
            print(
                f"vector drift: {args.file} differs from what the code generates", file=sys.stderr
            )
            print(f"regenerate with: {GENERATOR}", file=sys.stderr)
            return 1
        print(f"ledger vectors up to date ({args.file})")
        return 0
    args.file.parent.mkdir(parents=True, exist_ok=True)
    args.file.write_bytes(content)
    print(f"wrote {args.file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
