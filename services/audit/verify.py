"""The ledger's invariants, checked over a whole log (docs/design.md section 2.9):

* debits equal credits, per account and overall;
* no pool-hour carries more than the pool's capacity x 3600 GPU-seconds;
* no charge for an hour after its run ended (or before it started);
* no charge id posted twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from events.envelope import Envelope
from events.models import (
    LedgerCharge,
    NodeRegistered,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
)
from events.models.ledger import parse_charge_id
from events.ndjson import BadLine
from events.times import HOUR


def verify(log: Iterable[Envelope[Any] | BadLine]) -> tuple[int, list[str]]:
    """(number of charges checked, violations)."""
    problems: list[str] = []
    capacity: dict[str, int] = {}
    starts: dict[tuple[str, int], float] = {}
    ends: dict[tuple[str, int], float] = {}
    charges: list[LedgerCharge] = []
    for item in log:
        if isinstance(item, BadLine):
            problems.append(f"line {item.line}: {item.reason}")
            continue
        data = item.data
        if isinstance(data, NodeRegistered):
            capacity[data.pool] = capacity.get(data.pool, 0) + data.gpus
        elif isinstance(data, WorkloadStarted):
            starts[(data.workload_id, data.attempt)] = item.time.timestamp()
        elif isinstance(data, WorkloadFinished | WorkloadPreempted):
            ends.setdefault((data.workload_id, data.attempt), item.time.timestamp())
        elif isinstance(data, WorkloadLost):
            ends.setdefault((data.workload_id, data.attempt), data.last_heartbeat.timestamp())
        elif isinstance(data, LedgerCharge):
            charges.append(data)
    seen: set[str] = set()
    balances: dict[str, int] = {}
    per_pool_hour: dict[tuple[str, float], int] = {}
    for charge in charges:
        if charge.charge_id in seen:
            problems.append(f"duplicate charge id {charge.charge_id}")
        seen.add(charge.charge_id)
        balances[charge.debit_account] = balances.get(charge.debit_account, 0) - charge.amount
        balances[charge.credit_account] = balances.get(charge.credit_account, 0) + charge.amount
        key = (charge.pool, charge.bucket_start.timestamp())
        per_pool_hour[key] = per_pool_hour.get(key, 0) + charge.signed_gpu_seconds
        parsed = parse_charge_id(charge.charge_id)
        if parsed is not None:
            run = parsed[0], parsed[1]
            bucket = charge.bucket_start.timestamp()
            end, start = ends.get(run), starts.get(run)
            if end is not None and bucket >= end:
                problems.append(f"{charge.charge_id}: charged for an hour after the run ended")
            if start is not None and bucket + HOUR <= start:
                problems.append(f"{charge.charge_id}: charged for an hour before the run started")
    if sum(balances.values()) != 0:
        problems.append(f"debits and credits differ by {sum(balances.values())} GPU-s")
    for (pool, hour), used in sorted(per_pool_hour.items()):
        limit = capacity.get(pool, 0) * HOUR
        if used > limit:
            problems.append(f"pool {pool}, hour {hour:.0f}: {used} GPU-s > capacity {limit}")
        if used < 0:
            problems.append(f"pool {pool}, hour {hour:.0f}: negative total {used} GPU-s")
    return len(charges), problems
