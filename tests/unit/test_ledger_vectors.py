"""The ledger vectors (docs/spec/vectors/ledger/logs.json) against two folds: one written here
from docs/spec/log-v1.md sections 4.3 and 8 alone (orjson and the standard library, none of the
project's code), and the project's own. Every read order of every vector, sorted into the
canonical order (8.9), must post exactly the vector's charges; and the file is what the code
generates (``python -m services.audit.ledger_vectors --check``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from events.serde import decode_structured
from services.audit.ledger_vectors import VECTOR_FILE, fold, main

HOUR = 3600
# log-v1 3.1 (the topic of each type this fold reads) and 8.9 (the rank of each topic)
TOPIC = {
    "fairshare.workload.submitted.v1": "workloads",
    "fairshare.workload.started.v1": "workloads",
    "fairshare.workload.finished.v1": "workloads",
    "fairshare.workload.preempted.v1": "workloads",
    "fairshare.workload.lost.v1": "workloads",
    "fairshare.node.heartbeat.v1": "heartbeats",
}
RANK = {"budgets": 0, "cluster": 1, "workloads": 2, "commands": 3, "heartbeats": 4}

VECTORS: list[dict[str, Any]] = orjson.loads(VECTOR_FILE.read_bytes())["vectors"]


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _floor(text: str) -> int:
    return math.floor(_time(text).timestamp())  # 4.3: whole seconds, floored


class SpecLedger:
    """Section 8, as written."""

    def __init__(self) -> None:
        self.budgets: dict[str, str] = {}
        self.runs: dict[tuple[str, int], dict[str, Any]] = {}
        self.early: dict[tuple[str, int], int] = {}
        self.charges: list[dict[str, Any]] = []

    def read(self, record: dict[str, Any]) -> None:
        data, kind, at = record["data"], record["type"], _floor(record["time"])
        if kind == "fairshare.workload.submitted.v1":
            self.budgets.setdefault(data["workload_id"], data["budget"])
        elif kind == "fairshare.workload.started.v1":
            self._start(data, at)
        elif kind == "fairshare.node.heartbeat.v1":
            named = {
                (g["occupant"], g["attempt"])
                for g in data["gpus"]
                if g.get("occupant") is not None and g.get("attempt") is not None
            }
            for run in sorted(named):
                self._confirm(run, at)
        elif kind in ("fairshare.workload.finished.v1", "fairshare.workload.preempted.v1"):
            self._end((data["workload_id"], data["attempt"]), at)
        elif kind == "fairshare.workload.lost.v1":
            self._end((data["workload_id"], data["attempt"]), _floor(data["last_heartbeat"]))

    def _start(self, data: dict[str, Any], at: int) -> None:
        key = (data["workload_id"], data["attempt"])
        if key in self.runs:
            return
        self.runs[key] = {
            "budget": self.budgets[data["workload_id"]],
            "pool": data["pool"],
            "gpus": sum(len(node["gpus"]) for node in data["placement"]["nodes"]),
            "allocated": data["allocated"],
            "start": at,
            "confirmed": at,
            "end": None,
            "next": at // HOUR,
            "posted": {},
            "revision": {},
        }
        if key in self.early:
            self._confirm(key, self.early.pop(key))

    def _confirm(self, key: tuple[str, int], until: int) -> None:
        run = self.runs.get(key)
        if run is None:
            self.early[key] = max(self.early.get(key, until), until)
            return
        if run["end"] is not None:
            until = min(until, run["end"])
        if until <= run["confirmed"]:
            return
        run["confirmed"] = until
        self._post(key, run, range(run["next"], until // HOUR))
        run["next"] = max(run["next"], until // HOUR)

    def _end(self, key: tuple[str, int], end: int) -> None:
        run = self.runs.get(key)
        if run is None:
            return
        end = max(end, run["start"])
        if run["end"] is not None and end >= run["end"]:
            return
        run["end"] = run["confirmed"] = end
        last = end // HOUR
        buckets = set(range(run["next"], last + 1)) | {b for b in run["posted"] if b >= last}
        self._post(key, run, sorted(buckets))
        run["next"] = max(run["next"], last + 1)

    def _post(self, key: tuple[str, int], run: dict[str, Any], buckets: Any) -> None:
        until = run["end"] if run["end"] is not None else run["confirmed"]
        for bucket in buckets:
            lo, hi = max(run["start"], bucket * HOUR), min(until, (bucket + 1) * HOUR)
            total = run["gpus"] * max(0, hi - lo)
            posted = run["posted"].get(bucket)
            if (posted is None and total == 0) or posted == total:
                continue
            delta = total - (posted or 0)
            revision = run["revision"].get(bucket, -1) + 1
            run["revision"][bucket], run["posted"][bucket] = revision, total
            workload, attempt = key
            debit = f"budget:{run['budget']}" if run["allocated"] else f"free:{run['pool']}"
            credit = f"capacity:{run['pool']}"
            if delta < 0:
                debit, credit = credit, debit
            start = datetime.fromtimestamp(bucket * HOUR, UTC).isoformat()
            self.charges.append(
                {
                    "charge_id": f"charge:{workload}:{attempt}:{bucket * HOUR}:{revision}",
                    "workload_id": workload,
                    "budget": run["budget"],
                    "pool": run["pool"],
                    "bucket_start": start.replace("+00:00", "Z"),
                    "kind": "allocated" if run["allocated"] else "unallocated",
                    "debit_account": debit,
                    "credit_account": credit,
                    "gpu_seconds": abs(delta),
                    "amount": abs(delta) if run["allocated"] else 0,
                    "corrects": (
                        f"charge:{workload}:{attempt}:{bucket * HOUR}:0" if revision else None
                    ),
                }
            )


def _canonical(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: (_time(r["time"]), RANK[TOPIC[r["type"]]], r["id"]))


def _comparable(charge: dict[str, Any]) -> dict[str, Any]:
    return {**charge, "bucket_start": _time(charge["bucket_start"])}


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_spec_alone_folds_every_read_order_to_the_vector(vector: dict[str, Any]) -> None:
    records = [orjson.loads(line) for line in vector["records"]]
    assert _canonical(records) == records, "records are listed in the canonical order"
    expected = [_comparable(c) for c in vector["charges"]]
    for order in [list(range(len(records))), *vector["orders"]]:
        ledger = SpecLedger()
        for record in _canonical([records[i] for i in order]):
            ledger.read(record)
        assert [_comparable(c) for c in ledger.charges] == expected, order


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_project_folds_every_read_order_to_the_vector(vector: dict[str, Any]) -> None:
    records = [decode_structured(line.encode()) for line in vector["records"]]
    for order in [list(range(len(records))), *vector["orders"]]:
        charges = fold([records[i] for i in order])
        assert [c.model_dump(mode="json") for c in charges] == vector["charges"]


def test_the_vectors_show_corrections_and_are_what_the_code_generates(tmp_path: Path) -> None:
    revisions = {c["charge_id"].rsplit(":", 1)[1] for v in VECTORS for c in v["charges"]}
    assert "1" in revisions, "a correction among the vectors"
    assert main(["--check"]) == 0
    stale = tmp_path / "logs.json"
    stale.write_bytes(
        VECTOR_FILE.read_bytes().replace(b'"gpu_seconds": 200', b'"gpu_seconds": 201')
    )
    assert main(["--check", "--file", str(stale)]) == 1
