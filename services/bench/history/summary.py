"""The summary of ``fairshare bench history``: each figure per history, the ratio of the longest
history's to the shortest's, and each against the targets of issue 23."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from events import TopicKind
from events.topics import TRANSIENT_KINDS

TARGET_RESTART_S = 30.0
TARGET_RATIO = 1.5
TARGET_BUDGETS_P99_MS = 100.0
TARGET_GB_PER_DAY = 1.0
FLEET_NODES = 1000
SERVICES = ("projector", "charging", "scheduler", "api")
#: Topics whose volume grows with the nodes (their heartbeats, the work they run and its
#: charges); the others (budgets, usage snapshots per pool) do not.
_PER_NODE = (
    TopicKind.HEARTBEATS,
    TopicKind.LIVENESS,
    TopicKind.WORKLOADS,
    TopicKind.COMMANDS,
    TopicKind.LEDGER,
    TopicKind.CLUSTER,
)


def extrapolate(on_disk: dict[str, int], length_s: int, nodes: int) -> dict[str, Any]:
    """Bytes on the broker, per fleet-day, and per day for 1,000 nodes of 8 GPUs: the topics
    that grow with the nodes scaled by ``1000 / nodes``, the others as they are. The durable
    log leaves out the transient topics (liveness: kept for its retention only), which are
    given apart."""
    days = length_s / 86_400

    def per_day_1000(kinds: Sequence[str]) -> float:
        grows = sum(on_disk.get(k, 0) for k in kinds if TopicKind(k) in _PER_NODE)
        flat = sum(on_disk.get(k, 0) for k in kinds if TopicKind(k) not in _PER_NODE)
        return round((grows * FLEET_NODES / nodes + flat) / days / 1e9, 3)

    kinds = [kind.value for kind in TopicKind if kind.value in on_disk]
    durable = [k for k in kinds if TopicKind(k) not in TRANSIENT_KINDS]
    transient = [k for k in kinds if TopicKind(k) in TRANSIENT_KINDS]
    total = sum(on_disk.values())
    return {
        "bytes": total,
        "by_topic": {kind: size for kind, size in on_disk.items() if size},
        "bytes_per_fleet_day": round(total / days),
        "durable_bytes_per_fleet_day": round(sum(on_disk.get(k, 0) for k in durable) / days),
        "gb_per_day_1000_nodes": per_day_1000(durable),
        "transient_gb_per_day_1000_nodes": per_day_1000(transient),
        "extrapolation": (
            f"topics that grow with the fleet x {FLEET_NODES}/{nodes} nodes; budgets and usage "
            "as measured; per day of history; gb_per_day_1000_nodes is the durable log "
            "(liveness apart: kept for its retention only)"
        ),
    }


def _figures(histories: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    figures: dict[str, list[float | None]] = {}
    for service in SERVICES:
        figures[f"restart_s.{service}"] = [h["services"][service]["caught_up_s"] for h in histories]
    for service in SERVICES:
        figures[f"peak_rss_mb.{service}"] = [
            h["services"][service].get("peak_rss_mb") for h in histories
        ]
    figures["projector_cold_s"] = [
        h["services"]["projector_cold"]["caught_up_s"] for h in histories
    ]
    for service in ("charging", "scheduler", "api"):
        figures[f"first_start_s.{service}"] = [
            h["services"][f"{service}_first_start"]["caught_up_s"] for h in histories
        ]
    figures["closed_period_audit_s"] = [
        (h.get("closed_period_audit") or {}).get("s") for h in histories
    ]
    figures["budgets_p50_ms"] = [h["budgets_ms"]["p50"] for h in histories]
    figures["budgets_p99_ms"] = [h["budgets_ms"]["p99"] for h in histories]
    figures["charges_report_s"] = [h["charges_report"]["s"] for h in histories]
    figures["bytes_per_fleet_day"] = [h["broker"]["bytes_per_fleet_day"] for h in histories]
    figures["gb_per_day_1000_nodes"] = [h["broker"]["gb_per_day_1000_nodes"] for h in histories]
    return figures


def _ratio(values: list[float | None], skip_missing: bool = False) -> float | None:
    """The longest history's figure over the shortest's (``skip_missing``: over the shortest
    that has one: a day's history has no closed period yet)."""
    if skip_missing:
        values = [v for v in values if v is not None]
    if len(values) < 2 or values[0] is None or values[-1] is None or values[0] <= 0:
        return None
    return round(values[-1] / values[0], 2)


def _verdict(name: str, values: list[float | None], ratio: float | None) -> dict[str, Any]:
    """The figure's targets, met or missed (and by how much: the worst value over the
    target)."""
    verdict: dict[str, Any] = {}
    worst = None if any(v is None for v in values) else max(v for v in values if v is not None)
    limit = None
    if name.startswith("restart_s."):
        limit = TARGET_RESTART_S
    elif name == "budgets_p99_ms":
        limit = TARGET_BUDGETS_P99_MS
    elif name == "gb_per_day_1000_nodes":
        limit = TARGET_GB_PER_DAY
    if limit is not None:
        verdict["target"] = limit
        verdict["met"] = worst is not None and worst <= limit
        verdict["worst_over_target"] = None if worst is None else round(worst / limit, 2)
    if name.startswith(("restart_s.", "peak_rss_mb.")) or name == "closed_period_audit_s":
        verdict["ratio_target"] = TARGET_RATIO
        # one history has no ratio: not judged (None), neither met nor missed
        verdict["ratio_met"] = None if ratio is None else ratio <= TARGET_RATIO
    return verdict


def _total(counts: dict[str, Any]) -> int:
    """Every count of a history's ``rejected_facts``, nested ones (per start) included."""
    return sum(_total(v) if isinstance(v, dict) else (v or 0) for v in counts.values())


def summarize(histories: list[dict[str, Any]], nodes: int) -> dict[str, Any]:
    """Shortest history first (``history_benchmark`` runs them so)."""
    lengths = [h["history"] for h in histories]
    table: dict[str, Any] = {}
    missed = []
    for name, values in _figures(histories).items():
        ratio = _ratio(values, skip_missing=name == "closed_period_audit_s")
        row: dict[str, Any] = {
            "by_history": dict(zip(lengths, values, strict=True)),
            "ratio_longest_to_shortest": ratio,
            **_verdict(name, values, ratio),
        }
        if row.get("met") is False or row.get("ratio_met") is False:
            missed.append(name)
        table[name] = row
    rejected = {h["history"]: _total(h["rejected_facts"]) for h in histories}
    return {
        "summary": "bench history",
        "nodes": nodes,
        "gpus_per_node": histories[0]["gpus"] // nodes if histories else None,
        "histories": lengths,
        "records": {h["history"]: h["generated"]["records"] for h in histories},
        "figures": table,
        "closed_period_audit": {h["history"]: h.get("closed_period_audit") for h in histories},
        "rejected_facts": rejected,
        "missed": [*missed, *_audits_not_identical(histories)],
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_end": round(os.getloadavg()[0], 2)},
    }


def _audits_not_identical(histories: list[dict[str, Any]]) -> list[str]:
    """A closed period whose audit found differences is a miss, whatever it cost."""
    return [
        f"closed_period_audit.{h['history']}"
        for h in histories
        if (h.get("closed_period_audit") or {}).get("identical") is False
    ]
