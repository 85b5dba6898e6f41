"""Recompute every charge from the facts in a log and compare with the charges it records.

The facts (submissions, starts, heartbeats, ends) go through the same ledger fold the live
projector uses; the recorded charges are taken as they are. The audit passes only when both
lists are identical entry for entry; otherwise every difference is listed, with totals per
budget and hour so that a reader sees what the differences amount to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from events.envelope import Envelope
from events.models import LedgerCharge
from events.ndjson import BadLine
from projections.ledger import Ledger, charge_totals
from services.scheduler.gc_pause import gc_paused


@dataclass
class ReplayResult:
    events: int = 0
    recorded: list[LedgerCharge] = field(default_factory=list)
    recomputed: list[LedgerCharge] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences and not self.bad_lines


def replay(log: Iterable[Envelope[Any] | BadLine]) -> ReplayResult:
    """Streams the log once; the cyclic GC is paused (the log creates no cycles, and scanning
    the growing ledger on every allocation burst would dominate the replay)."""
    with gc_paused():
        return _replay(log)


def _replay(log: Iterable[Envelope[Any] | BadLine]) -> ReplayResult:
    result = ReplayResult()
    ledger = Ledger()
    for item in log:
        if isinstance(item, BadLine):
            result.bad_lines.append(item)
            continue
        result.events += 1
        if isinstance(item.data, LedgerCharge):
            result.recorded.append(item.data)
        else:
            ledger.apply(item.data, item.time)
    result.recomputed = ledger.entries
    result.differences = compare(result.recorded, result.recomputed)
    return result


def compare(
    recorded: list[LedgerCharge], recomputed: list[LedgerCharge], check_order: bool = True
) -> list[str]:
    differences: list[str] = []
    by_id_recorded = {c.charge_id: c for c in recorded}
    by_id_recomputed = {c.charge_id: c for c in recomputed}
    if len(by_id_recorded) != len(recorded):
        differences.append("recorded: duplicate charge ids")
    for charge_id in sorted(by_id_recomputed.keys() - by_id_recorded.keys()):
        c = by_id_recomputed[charge_id]
        differences.append(f"missing in the log: {charge_id} ({c.gpu_seconds} GPU-s)")
    for charge_id in sorted(by_id_recorded.keys() - by_id_recomputed.keys()):
        c = by_id_recorded[charge_id]
        differences.append(f"not supported by the facts: {charge_id} ({c.gpu_seconds} GPU-s)")
    for charge_id in sorted(by_id_recorded.keys() & by_id_recomputed.keys()):
        a, b = by_id_recorded[charge_id], by_id_recomputed[charge_id]
        if a != b:
            fields = [
                f"{name}: log {getattr(a, name)!r} != facts {getattr(b, name)!r}"
                for name in type(a).model_fields
                if getattr(a, name) != getattr(b, name)
            ]
            differences.append(f"differs: {charge_id}: " + "; ".join(fields))
    if not differences and check_order:
        # Order is only meaningful within one workload (one key, one partition): an export
        # interleaves partitions as it reads them.
        def per_workload(charges: list[LedgerCharge]) -> dict[str, list[str]]:
            grouped: dict[str, list[str]] = {}
            for c in charges:
                grouped.setdefault(c.workload_id, []).append(c.charge_id)
            return grouped

        recorded_order, recomputed_order = per_workload(recorded), per_workload(recomputed)
        for workload in sorted(recorded_order):
            if recorded_order[workload] != recomputed_order.get(workload):
                differences.append(f"charges of {workload} are in another order")
    if differences:
        totals_log, totals_facts = charge_totals(recorded), charge_totals(recomputed)
        for key in sorted(totals_log.keys() | totals_facts.keys()):
            have, want = totals_log.get(key, 0), totals_facts.get(key, 0)
            if have != want:
                budget, pool, hour = key
                when = datetime.fromtimestamp(hour, UTC).isoformat()
                differences.append(
                    f"total {budget} in {pool}, hour {when}: log {have} GPU-s, facts {want} GPU-s"
                )
    return differences
