"""What a simulation run leaves behind in text: tables in the terminal and ``metrics.json``.

``metrics.json`` is shaped ``{"policies": {NAME: {"overall": {...}, "budgets": {...}}},
"config": {...}}`` so that runs on other traces can be compared by script. The terminal shows
three tables, so that none is too wide to read: attainment and service, what preemption cost,
and (when nodes were sent for repair) maintenance. The plots are ``plots.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

Cell = Callable[[dict[str, Any]], str]


def write_metrics(path: Path, metrics: dict[str, dict[str, Any]], config: dict[str, Any]) -> None:
    document = {"policies": metrics, "config": config}
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


def duration(seconds: float | None) -> str:
    """Seconds for what is short, hours for what is long: waits span five orders of magnitude."""
    if seconds is None:
        return "-"
    if seconds < 2 * 3600:
        return f"{seconds:,.0f} s"
    return f"{seconds / 3600:,.1f} h"


def _worst_week(overall: dict[str, Any]) -> str:
    worst = overall.get("worst_checked_budget_week")
    if not worst:
        return "-"
    return f"{worst['value']:.1%} ({worst['budget']}, wk {worst['week']})"


def _estimate_error(overall: dict[str, Any]) -> str:
    if "start_estimate_error_p50_s" not in overall:
        return "-"
    p50, p90 = overall["start_estimate_error_p50_s"], overall["start_estimate_error_p90_s"]
    return f"{duration(p50)} / {duration(p90)}"


def _weekly(overall: dict[str, Any]) -> str:
    return f"{overall['owed_delivered_weekly']:.1%}"


def _weeks_below_90(overall: dict[str, Any]) -> str:
    return f"{overall['weekly_violations']} of {overall['weekly_checked']}"


ATTAINMENT: list[tuple[str, Cell]] = [
    ("owed delivered", lambda o: f"{o['owed_delivered']:.1%}"),
    ("weekly", _weekly),
    ("worst checked week", _worst_week),
    ("budget-weeks < 90%", _weeks_below_90),
    ("hourly", lambda o: f"{o['owed_delivered_hourly']:.1%}"),
]

SERVICE: list[tuple[str, Cell]] = [
    ("occupancy (demand>cap)", lambda o: f"{o['occupancy_over_demand']:.1%}"),
    (
        "debug wait p50 / p90",
        lambda o: f"{duration(o['debug_wait_p50_s'])} / {duration(o['debug_wait_p90_s'])}",
    ),
    ("wait p50 / p90", lambda o: f"{duration(o['wait_p50_s'])} / {duration(o['wait_p90_s'])}"),
    ("contract violations", lambda o: f"{o['contract_violations']}"),
    ("start estimate error p50 / p90", lambda o: _estimate_error(o)),
    ("wall s", lambda o: f"{o['wall_seconds']:.1f}"),
]

COST: list[tuple[str, Cell]] = [
    ("preemptions", lambda o: f"{o['preemptions']:,}"),
    ("per 1000 GPU-h", lambda o: f"{o['preemptions_per_1000_gpu_hours']:.1f}"),
    (
        "per job p99 / max",
        lambda o: f"{o['preemptions_per_job_p99']:.0f} / {o['max_preemptions_of_a_job']}",
    ),
    ("lost GPU-h", lambda o: f"{o['lost_gpu_hours']:,.0f}"),
    ("of which restarts", lambda o: f"{o['restart_gpu_hours']:,.0f}"),
    ("goodput", lambda o: f"{o['goodput']:.2%}"),
    ("runs lost", lambda o: f"{o['runs_lost']:,}"),
]

TOPOLOGY: list[tuple[str, Cell]] = [
    ("gangs over nodes", lambda o: f"{o['gang_placements']:,}"),
    (
        "blocks per gang p50 / p90",
        lambda o: (
            "-"
            if o["blocks_per_gang_p50"] is None
            else f"{o['blocks_per_gang_p50']:.0f} / {o['blocks_per_gang_p90']:.0f}"
        ),
    ),
    (
        "in fewest blocks",
        lambda o: "-" if o["fewest_blocks_share"] is None else f"{o['fewest_blocks_share']:.1%}",
    ),
]

MAINTENANCE: list[tuple[str, Cell]] = [
    ("repairs", lambda o: f"{o['repairs']}"),
    ("drain p50 / p90", lambda o: f"{duration(o['drain_p50_s'])} / {duration(o['drain_p90_s'])}"),
    ("stuck drains", lambda o: f"{o['stuck_drains']}"),
    ("drain preemptions", lambda o: f"{o['drain_preemptions']}"),
    ("runs lost", lambda o: f"{o['runs_lost']:,}"),
]


def policy_table(title: str, columns: list[tuple[str, Cell]], metrics: dict[str, Any]) -> Table:
    table = Table(title=title)
    table.add_column("policy")
    for name, _cell in columns:
        table.add_column(name, justify="right")
    for policy, result in metrics.items():
        table.add_row(policy, *(cell(result["overall"]) for _name, cell in columns))
    return table


def summary_table(metrics: dict[str, dict[str, Any]]) -> Table:
    title = "policies side by side: attainment (docs/design.md section 6)"
    return policy_table(title, ATTAINMENT, metrics)


def budget_table(name: str, result: dict[str, Any]) -> Table:
    table = Table(title=f"{name}: per budget")
    columns = ("budget", "share", "owed GPU-h", "delivered GPU-h", "owed delivered", "weekly")
    for column in (*columns, "worst week", "hourly", "lost GPU-h"):
        table.add_column(column, justify="right" if column != "budget" else "left")
    for budget, row in result["budgets"].items():
        weeks = row.get("weekly", [])
        worst = min((w["owed_delivered"] for w in weeks), default=None)
        table.add_row(
            budget,
            f"{row['share']:.3f}",
            f"{row['owed_gpu_hours']:,.0f}",
            f"{row['delivered_gpu_hours']:,.0f}",
            f"{row['owed_delivered']:.1%}",
            f"{row['owed_delivered_weekly']:.1%}",
            "-" if worst is None else f"{worst:.1%}",
            f"{row['owed_delivered_hourly']:.1%}",
            f"{row['lost_gpu_hours']:,.0f}",
        )
    return table


def _largest_tenant(result: dict[str, Any]) -> str:
    """The weekly attainment of the budget with the largest share, week by week: where a
    policy that favours many small tenants shows what it costs the big one."""
    budgets = result.get("budgets") or {}
    if not budgets:
        return "-"
    name, row = max(budgets.items(), key=lambda item: (item[1]["share"], item[0]))
    weeks = [w for w in row.get("weekly", []) if w.get("checked")]
    shown = ", ".join(f"{w['owed_delivered']:.0%}" for w in weeks) or "-"
    return f"{name} ({row['share']:.1%}): {shown}"


def _drains(o: dict[str, Any]) -> str:
    if not o.get("repairs"):
        return "-"
    return f"{duration(o['drain_p90_s'])} / {o['stuck_drains']}"


#: The figures every target of the policy is judged by (docs/simulation/README.md), one row
#: per policy: what a comparison across traces, policies and ablated rules reads first.
TARGETS: list[tuple[str, Cell]] = [
    ("weekly", _weekly),
    ("budget-weeks < 90%", _weeks_below_90),
    ("worst checked week", _worst_week),
    ("never started", lambda o: f"{o['never_started']:,}"),
    ("debug p90", lambda o: duration(o["debug_wait_p90_s"])),
    ("preempt / 1000 GPU-h", lambda o: f"{o['preemptions_per_1000_gpu_hours']:.1f}"),
    ("most of one job", lambda o: f"{o['max_preemptions_of_a_job']}"),
    ("contract violations", lambda o: f"{o['contract_violations']}"),
    ("drain p90 / stuck", _drains),
]


def targets_table(metrics: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="against the targets")
    for name in ("policy", *(name for name, _cell in TARGETS), "largest tenant, weekly"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for policy, result in metrics.items():
        cells = [cell(result["overall"]) for _name, cell in TARGETS]
        table.add_row(policy, *cells, _largest_tenant(result))
    return table


def targets_markdown(metrics: dict[str, dict[str, Any]]) -> str:
    """The targets table as Markdown, for docs that quote a run (``targets.md`` of the run)."""
    head = ["policy", *(name for name, _cell in TARGETS), "largest tenant, weekly"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for policy, result in metrics.items():
        cells = [cell(result["overall"]) for _name, cell in TARGETS]
        lines.append("| " + " | ".join([policy, *cells, _largest_tenant(result)]) + " |")
    return "\n".join(lines) + "\n"


def print_report(console: Console, metrics: dict[str, dict[str, Any]]) -> None:
    console.print(targets_table(metrics))
    console.print(summary_table(metrics))
    console.print(policy_table("service", SERVICE, metrics))
    first = next(iter(metrics.values()))["overall"]
    console.print(policy_table(f"what preemption cost ({first['preemption_cost']})", COST, metrics))
    if first.get("gang_placements") is not None and first["topology"] != "no topology":
        console.print(
            policy_table(f"placement by topology ({first['topology']})", TOPOLOGY, metrics)
        )
    if any(result["overall"]["repairs"] for result in metrics.values()):
        console.print(policy_table(f"maintenance ({first['maintenance']})", MAINTENANCE, metrics))
    if "fairshare" in metrics:
        console.print(budget_table("fairshare", metrics["fairshare"]))
