"""What a simulation run leaves behind: a table in the terminal, ``metrics.json``, and plots.

``metrics.json`` is shaped ``{"policies": {NAME: {"overall": {...}, "budgets": {...}}}, ...}``
so that runs on other traces can be compared by script. Plots (PNG): owed vs delivered per
budget, attainment per budget for every policy, occupancy over time, and queue-wait CDFs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from events.times import HOUR
from services.simulator.engine import SimulationOutcome
from services.simulator.metrics import busy_seconds_by_hour, hour_length, queue_waits


def occupancy_series(outcome: SimulationOutcome) -> list[tuple[float, float]]:
    """(hour start, busy GPUs / capacity) for each hour of the period."""
    busy = busy_seconds_by_hour(outcome)
    return [
        (hour * HOUR, seconds / (outcome.capacity_gpus * hour_length(outcome, hour)))
        for hour, seconds in busy.items()
        if hour_length(outcome, hour) > 0
    ]


def write_metrics(path: Path, metrics: dict[str, dict[str, Any]], config: dict[str, Any]) -> None:
    document = {"policies": metrics, "config": config}
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


def summary_table(metrics: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="policies side by side (docs/design.md section 6)")
    columns = [
        ("owed delivered", "owed_delivered", "{:.1%}"),
        ("hourly", "owed_delivered_hourly", "{:.1%}"),
        ("worst budget", "worst_budget_owed_delivered", "{:.1%}"),
        ("occupancy (demand>cap)", "occupancy_over_demand", "{:.1%}"),
        ("debug p50/p90 s", None, ""),
        ("wait p50/p90 s", None, ""),
        ("preempt /1000 GPU-h", "preemptions_per_1000_gpu_hours", "{:.1f}"),
        ("contract violations", "contract_violations", "{}"),
        ("wall s", "wall_seconds", "{:.1f}"),
    ]
    table.add_column("policy")
    for title, _key, _fmt in columns:
        table.add_column(title, justify="right")
    for name, result in metrics.items():
        overall = result["overall"]
        row = [name]
        for title, key, fmt in columns:
            if key is not None:
                row.append(fmt.format(overall[key]))
            elif title.startswith("debug"):
                row.append(f"{overall['debug_wait_p50_s']:.0f} / {overall['debug_wait_p90_s']:.0f}")
            else:
                row.append(f"{overall['wait_p50_s']:.0f} / {overall['wait_p90_s']:.0f}")
        table.add_row(*row)
    return table


def budget_table(name: str, result: dict[str, Any]) -> Table:
    table = Table(title=f"{name}: per budget")
    for column in ("budget", "share", "owed GPU-h", "delivered GPU-h", "owed delivered", "hourly"):
        table.add_column(column, justify="right" if column != "budget" else "left")
    for budget, row in result["budgets"].items():
        table.add_row(
            budget,
            f"{row['share']:.3f}",
            f"{row['owed_gpu_hours']:.0f}",
            f"{row['delivered_gpu_hours']:.0f}",
            f"{row['owed_delivered']:.1%}",
            f"{row['owed_delivered_hourly']:.1%}",
        )
    return table


def write_plots(
    out: Path, metrics: dict[str, dict[str, Any]], outcomes: dict[str, SimulationOutcome]
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    names = list(metrics)
    first = "fairshare" if "fairshare" in metrics else names[0]
    budgets = [b for b, row in metrics[first]["budgets"].items() if row["owed_gpu_hours"] > 0]

    fig, ax = plt.subplots(figsize=(11, 4.5))
    xs = range(len(budgets))
    owed = [metrics[first]["budgets"][b]["owed_gpu_hours"] for b in budgets]
    got = [metrics[first]["budgets"][b]["delivered_gpu_hours"] for b in budgets]
    ax.bar([x - 0.2 for x in xs], owed, width=0.4, label="owed GPU-h")
    ax.bar([x + 0.2 for x in xs], got, width=0.4, label="delivered GPU-h")
    ax.set_xticks(list(xs), budgets, rotation=45, ha="right")
    ax.set_title(f"{first}: owed vs delivered GPU-hours per budget")
    ax.legend()
    fig.tight_layout()
    written.append(_save(fig, out / "owed_vs_delivered.png"))

    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        values = [metrics[name]["budgets"].get(b, {}).get("owed_delivered", 0.0) for b in budgets]
        ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], values, width=width, label=name)
    ax.axhline(0.95, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(list(xs), budgets, rotation=45, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_title("owed GPU-hours delivered, per budget and policy")
    ax.legend(ncol=len(names), fontsize="small")
    fig.tight_layout()
    written.append(_save(fig, out / "attainment_by_policy.png"))

    fig, ax = plt.subplots(figsize=(11, 4))
    for name, outcome in outcomes.items():
        series = occupancy_series(outcome)
        days = [(t - outcome.start) / 86400 for t, _ in series]
        ax.plot(days, [v for _, v in series], label=name, linewidth=0.8)
    ax.set_xlabel("days since the first arrival")
    ax.set_ylabel("busy GPUs / capacity")
    ax.set_ylim(0, 1.05)
    ax.set_title("occupancy over time (hourly)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    written.append(_save(fig, out / "occupancy.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, debug, title in ((axes[0], False, "all jobs"), (axes[1], True, "debug jobs")):
        for name, outcome in outcomes.items():
            values = [max(1.0, w) for w in queue_waits(outcome, debug)]
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.step(values, ys, where="post", label=name, linewidth=0.9)
        ax.set_xscale("log")
        ax.set_xlabel("queue wait, seconds (log)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"wait CDF: {title}")
        ax.legend(fontsize="small")
    fig.tight_layout()
    written.append(_save(fig, out / "wait_cdf.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def print_report(console: Console, metrics: dict[str, dict[str, Any]]) -> None:
    console.print(summary_table(metrics))
    if "fairshare" in metrics:
        console.print(budget_table("fairshare", metrics["fairshare"]))
