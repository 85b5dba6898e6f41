"""What a restart of charging costs from its checkpoint against a rebuild from the first offset,
on a generated fleet history (issue 23), measured on the fold itself (no broker: the reads a
restart saves are in proportion to the facts it does not fold).

``python -m services.bench.charging_restart --nodes 8 --lengths 1d,1w,4w``

For each length the history is generated (``services.bench.history.gen``) and folded as it
comes by charging's own state (``ChargingState``, charges read back as the ledger topic gives
them); the fold's CPU time is the rebuild's cost. Five minutes before the end the state is
checkpointed (as charging does every 5 minutes); the restart's cost is decoding that checkpoint
and folding the five minutes after it. Reported too: the checkpoint's bytes and the runs the
fold holds, which stay flat when runs leave the fold a horizon after their end.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from events import Topics
from events.envelope import Envelope
from events.models import LedgerCharge
from projections.charging_state import ChargingState
from projections.checkpoint import decode, encode
from services.bench.history.gen import HistoryConfig, HistoryGenerator, parse_length
from services.bus.partitioning import partition_for_key

PARTITIONS = 3
TAIL_S = 300


def measure(nodes: int, length_s: int, end: float = 1_790_000_000.0) -> dict[str, Any]:
    topics = Topics()
    cut = end - TAIL_S
    state = ChargingState.new()
    tail: list[Envelope[Any]] = []
    checkpoint: bytes | None = None
    fold_s = 0.0
    records = 0

    def sink(envelope: Envelope[Any]) -> None:
        nonlocal checkpoint, fold_s, records
        records += 1
        if checkpoint is None and envelope.time.timestamp() >= cut:
            checkpoint = encode(state, {}, "bench")
        if checkpoint is not None:
            tail.append(envelope)
        started = time.process_time()
        _fold(state, envelope, topics)
        fold_s += time.process_time() - started

    config = HistoryConfig(nodes=nodes, length_s=length_s, end=end)
    generator = HistoryGenerator(config, topics, sink)
    generator.generate(end)
    started = time.process_time()
    restored = decode(checkpoint or encode(state, {}, "bench"), "bench", ChargingState).state
    for envelope in tail:
        _fold(restored, envelope, topics)
    restart_s = time.process_time() - started
    return {
        "records": records,
        "rebuild_cpu_s": round(fold_s, 2),
        "restart_cpu_s": round(restart_s, 3),
        "tail_records": len(tail),
        "checkpoint_kb": round(len(checkpoint or b"") / 1024, 1),
        "runs_held": len(state.ledger.runs),
        "workloads_remembered": len(state.ledger.budgets),
    }


def _fold(state: ChargingState, envelope: Envelope[Any], topics: Topics) -> None:
    data = envelope.data
    if isinstance(data, LedgerCharge):
        state.count_recorded(data)  # as read from the ledger topic
        return
    kind = type(data).topic
    source = (topics.name(kind), partition_for_key(envelope.subject.encode(), PARTITIONS))
    state.fold(data, envelope.epoch_seconds, source, envelope.time.timestamp())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--lengths", default="1d,1w")
    args = parser.parse_args()
    for text in args.lengths.split(","):
        print(text, measure(args.nodes, parse_length(text)), flush=True)


if __name__ == "__main__":
    main()
