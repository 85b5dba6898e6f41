"""The run's figures from the pods' times (``watch.py``) and the Jobs' create calls, and the
table a person reads them in.

Rates are (n - 1) / span over the first to the last event of their kind: the number of
intervals over the time they took, the same for creation and binding, so their ratio compares
like with like. Latencies are per pod, from its Job's create call (the time just before the
call was sent) to the arrival of the event that showed it bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from services.bench.kubernetes.watch import PodTimes
from services.bench.latency.bench import percentiles

#: The issue's target: pods bound per second at least this fraction of pods created per second.
TARGET_RATIO = 0.9


def spread(times: Sequence[float]) -> dict[str, float | int | None]:
    """Count, span (first to last) and rate of ``times``."""
    if not times:
        return {"count": 0, "span_s": None, "per_s": None}
    span = max(times) - min(times)
    return {
        "count": len(times),
        "span_s": round(span, 3),
        "per_s": round((len(times) - 1) / span, 1) if span > 0 else None,
    }


def figures(
    pods: Mapping[str, PodTimes],
    sent: Mapping[str, float],
    answered: Mapping[str, float],
    expected: int,
) -> dict[str, Any]:
    """``sent``/``answered``: Job name -> epoch seconds its create call was sent/answered."""
    ours = {name: p for name, p in pods.items() if p.job in sent}
    created = [p.seen_at for p in ours.values()]
    bound = [p.bound_at for p in ours.values() if p.bound_at is not None]
    stamps = [p.created for p in ours.values() if p.created is not None]
    creation, binding = spread(created), spread(bound)
    created_rate, bound_rate = creation["per_s"], binding["per_s"]
    ratio = round(bound_rate / created_rate, 3) if created_rate and bound_rate else None
    first_sent = min(sent.values()) if sent else None
    last_bound = max(bound) if bound else None
    stamp_span = (max(stamps) - min(stamps)) if stamps else None
    nodes = {p.node for p in ours.values() if p.node}
    # a Job is one gang on one node here (it fits one): pods of one Job on several nodes would
    # be a wrong placement, not a slow one
    nodes_of: dict[str, set[str]] = {}
    for pod in ours.values():
        if pod.node:
            nodes_of.setdefault(pod.job, set()).add(pod.node)
    return {
        "pods": {
            "expected": expected,
            "created": len(ours),
            "bound": len(bound),
            "nodes_used": len(nodes),
            "jobs_on_several_nodes": sum(1 for used in nodes_of.values() if len(used) > 1),
        },
        "jobs": {
            "created": len(sent),
            "create_calls": spread(list(sent.values())),
            "answer_ms": percentiles([answered[j] - sent[j] for j in answered if j in sent]),
        },
        # the baseline: the Job controller's pods, as the watch saw them stored
        "created": {
            **creation,
            "by_creation_timestamp": {
                "span_s": stamp_span,
                "per_s": (round((len(stamps) - 1) / stamp_span, 1) if stamp_span else None),
                "resolution_s": 1,
            },
        },
        "bound": binding,
        "ratio_bound_to_created": ratio,
        "target": {"ratio": TARGET_RATIO, "met": ratio is not None and ratio >= TARGET_RATIO},
        "submit_to_bound_ms": percentiles(
            [p.bound_at - sent[p.job] for p in ours.values() if p.bound_at is not None]
        ),
        "submit_to_created_ms": percentiles([p.seen_at - sent[p.job] for p in ours.values()]),
        "created_to_bound_ms": percentiles(
            [p.bound_at - p.seen_at for p in ours.values() if p.bound_at is not None]
        ),
        "end_to_end_s": (
            round(last_bound - first_sent, 3) if last_bound and first_sent is not None else None
        ),
        "last_bound_after_last_created_s": (
            round(last_bound - max(created), 3) if last_bound and created else None
        ),
    }


def _ms(value: float | int | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _rate(part: Mapping[str, Any]) -> str:
    if part["per_s"] is None:
        return "-"
    return f"{part['per_s']:,.1f} pods/s ({part['count']} over {part['span_s']:.2f} s)"


def result_table(result: Mapping[str, Any]) -> Table:
    """The figures a person reads: the ratio against its target first, then the latencies."""
    ratio = result["ratio_bound_to_created"]
    met = result["target"]["met"]
    verdict = "[green]met[/]" if met else "[red]missed[/]"
    config = result["config"]
    table = Table(
        title=(
            f"fairshare bench kubernetes: {config['jobs']} Jobs x {config['pods_per_job']} pods "
            f"over {config['nodes']} KWOK nodes ({result['kubernetes']['version']})"
        )
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    pods = result["pods"]
    table.add_row(
        "pods created / bound", f"{pods['created']} / {pods['bound']} of {pods['expected']}"
    )
    table.add_row("pod creation (Job controller, baseline)", _rate(result["created"]))
    table.add_row("pod binding (Fairshare)", _rate(result["bound"]))
    table.add_row(
        "ratio bound / created",
        "-" if ratio is None else f"{ratio:.2f} (target >= {TARGET_RATIO}: {verdict})",
    )
    for key, label in (
        ("submit_to_bound_ms", "Job created -> pod bound"),
        ("submit_to_created_ms", "Job created -> pod created"),
        ("created_to_bound_ms", "pod created -> pod bound"),
    ):
        part = result[key]
        table.add_row(
            f"{label} p50 / p99 / max",
            f"{_ms(part['p50'])} / {_ms(part['p99'])} / {_ms(part['max'])}",
        )
    for key, label in (
        ("job_to_submitted_ms", "  of which Job created -> submitted (agent)"),
        ("submitted_to_placed_ms", "  of which submitted -> placed (scheduler)"),
        ("placed_to_started_ms", "  of which placed -> binding began (agent)"),
        ("placed_to_bound_ms", "  of which placed -> pod bound (agent)"),
    ):
        part = result.get("hops", {}).get(key)
        if part is not None:
            table.add_row(
                f"{label} p50 / p99 / max",
                f"{_ms(part['p50'])} / {_ms(part['p99'])} / {_ms(part['max'])}",
            )
    end = result["end_to_end_s"]
    table.add_row("first Job created -> last pod bound", "-" if end is None else f"{end:.2f} s")
    lag = result["last_bound_after_last_created_s"]
    table.add_row("last pod bound after last created", "-" if lag is None else f"{lag:.2f} s")
    calls = result["jobs"]["create_calls"]
    table.add_row(
        "Job create calls",
        f"{calls['count']} over {calls['span_s'] or 0:.2f} s, answered p50 "
        f"{_ms(result['jobs']['answer_ms']['p50'])}",
    )
    return table
