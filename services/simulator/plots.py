"""The PNG plots of a simulation run, each made to answer one question:

* ``attainment_by_policy.png``: did each policy keep its weekly promise? The distribution of
  budget-week attainment per policy (whole-period bars are 1.0 for every good policy and say
  nothing);
* ``occupancy.png``: were GPUs idle while work waited? Busy GPUs against demanded GPUs and
  capacity, one panel per policy;
* ``owed_vs_delivered.png``: owed and delivered GPU-hours per budget for the first policy;
* ``wait_cdf.png``: queue waits, all jobs and debug jobs;
* ``preemption_cost.png``: what preemption cost (GPU-hours lost) and how it fell on jobs;
* ``maintenance.png`` (only when nodes were sent for repair): time to drain per repair.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from events.times import HOUR
from services.simulator.engine import SimulationOutcome
from services.simulator.metrics import busy_seconds_by_hour, hour_length, queue_waits

DAY = 86_400.0


def hourly_gpus(outcome: SimulationOutcome) -> list[tuple[float, float, float]]:
    """(days since the first arrival, mean busy GPUs, mean demanded GPUs) for each hour."""
    busy = busy_seconds_by_hour(outcome)
    rows = []
    for hour, seconds in busy.items():
        length = hour_length(outcome, hour)
        if length <= 0:
            continue
        demand = sum(series.get(hour, 0.0) for series in outcome.demand.values())
        day = (max(outcome.start, hour * HOUR) - outcome.start) / DAY
        rows.append((day, seconds / length, demand / length))
    return rows


def write_plots(
    out: Path, metrics: dict[str, dict[str, Any]], outcomes: dict[str, SimulationOutcome]
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    written = [
        _owed_vs_delivered(out, metrics),
        _weekly_attainment(out, metrics),
        _occupancy(out, outcomes),
        _wait_cdf(out, outcomes),
        _preemption_cost(out, metrics, outcomes),
    ]
    if any(outcome.drains for outcome in outcomes.values()):
        written.append(_maintenance(out, outcomes))
    return written


def _owed_vs_delivered(out: Path, metrics: dict[str, dict[str, Any]]) -> Path:
    import matplotlib.pyplot as plt

    first = "fairshare" if "fairshare" in metrics else next(iter(metrics))
    rows = {b: r for b, r in metrics[first]["budgets"].items() if r["owed_gpu_hours"] > 0}
    xs = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.bar([x - 0.2 for x in xs], [r["owed_gpu_hours"] for r in rows.values()], 0.4, label="owed")
    ax.bar(
        [x + 0.2 for x in xs],
        [r["delivered_gpu_hours"] for r in rows.values()],
        0.4,
        label="delivered (allocated)",
    )
    ax.set_xticks(xs, list(rows), rotation=45, ha="right")
    ax.set_xlabel("budget")
    ax.set_ylabel("GPU-hours over the period")
    ax.set_title(f"{first}: GPU-hours owed (min(share x capacity, demand)) and delivered")
    ax.legend()
    return _save(fig, out / "owed_vs_delivered.png")


def _weekly_attainment(out: Path, metrics: dict[str, dict[str, Any]]) -> Path:
    import matplotlib.pyplot as plt

    names = list(metrics)
    fig, ax = plt.subplots(figsize=(11, 5))
    data: list[list[float]] = []
    for i, name in enumerate(names):
        weeks = [
            w for row in metrics[name]["budgets"].values() for w in row["weekly"] if w["checked"]
        ]
        values = [w["owed_delivered"] for w in weeks]
        data.append(values)
        # A deterministic spread, so that the points of one policy do not hide each other.
        xs = [i + 1 + 0.3 * (((k * 7919) % 101) / 100 - 0.5) for k in range(len(values))]
        ax.scatter(xs, values, s=10, alpha=0.45, color="tab:blue", zorder=3)
    ax.boxplot(data, whis=(0, 100), widths=0.5, showfliers=False, zorder=2)
    ax.axhline(0.9, color="tab:red", linestyle="--", linewidth=1, label="90% floor")
    labels = []
    for name in names:
        overall = metrics[name]["overall"]
        labels.append(
            f"{name}\nmean {overall['owed_delivered_weekly']:.1%}\n"
            f"{overall['weekly_violations']} of {overall['weekly_checked']} below 90%"
        )
    ax.set_xticks(range(1, len(names) + 1), labels)
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("policy (owed-weighted mean; budget-weeks below the floor)")
    ax.set_ylabel("delivered / owed in the week (capped at 1)")
    ax.set_title(
        "weekly attainment: one point per budget and 7-day week with demand > 1% of capacity"
    )
    ax.legend(loc="lower left")
    return _save(fig, out / "attainment_by_policy.png")


def _occupancy(out: Path, outcomes: dict[str, SimulationOutcome]) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(outcomes), 1, figsize=(11, 1.9 * len(outcomes) + 0.8), sharex=True, squeeze=False
    )
    ceiling = 4 * max(outcome.capacity_gpus for outcome in outcomes.values())
    for ax, (name, outcome) in zip(axes[:, 0], outcomes.items(), strict=True):
        rows = hourly_gpus(outcome)
        days = [r[0] for r in rows]
        peak = max((r[2] for r in rows), default=0.0)
        ax.fill_between(days, [r[1] for r in rows], step="post", alpha=0.5, label="busy GPUs")
        ax.step(
            days,
            [min(r[2], ceiling) for r in rows],
            where="post",
            color="black",
            linewidth=0.7,
            label="demanded GPUs (pending + running allocated work; drawn up to 4x capacity)",
        )
        ax.axhline(
            outcome.capacity_gpus, color="tab:red", linestyle="--", linewidth=1, label="capacity"
        )
        ax.set_ylim(0, (min(ceiling, peak) or 1.0) * 1.05)
        ax.set_ylabel("GPUs")
        ax.set_title(
            f"{name}: demand peaks at {peak / outcome.capacity_gpus:.1f}x capacity",
            loc="left",
            fontsize="medium",
        )
    axes[0, 0].legend(loc="upper left", fontsize="small", ncol=3)
    axes[-1, 0].set_xlabel("days since the first arrival (hourly means)")
    fig.suptitle("occupancy against demand: idle GPUs under the demand line are lost service")
    return _save(fig, out / "occupancy.png")


def _wait_cdf(out: Path, outcomes: dict[str, SimulationOutcome]) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, debug, title in ((axes[0], False, "all jobs"), (axes[1], True, "debug jobs")):
        for name, outcome in outcomes.items():
            values = [max(1.0, w) for w in queue_waits(outcome, debug)]
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.step(values, ys, where="post", label=name, linewidth=0.9)
        ax.set_xscale("log")
        ax.set_xlabel("queue wait from submit to first start, seconds (log)")
        ax.set_ylabel("fraction of jobs waiting at most that")
        ax.set_title(f"queue-wait CDF: {title}")
        ax.legend(fontsize="small")
    return _save(fig, out / "wait_cdf.png")


def _preemption_cost(
    out: Path, metrics: dict[str, dict[str, Any]], outcomes: dict[str, SimulationOutcome]
) -> Path:
    import matplotlib.pyplot as plt

    names = list(metrics)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    discarded = [metrics[n]["overall"]["lost_work_gpu_hours"] for n in names]
    restarts = [metrics[n]["overall"]["restart_gpu_hours"] for n in names]
    ys = list(range(len(names)))
    left.barh(ys, discarded, label="progress since the last checkpoint")
    left.barh(ys, restarts, left=discarded, label="restart overhead")
    goodput = [metrics[n]["overall"]["goodput"] for n in names]
    left.set_yticks(ys, [f"{n}\ngoodput {g:.2%}" for n, g in zip(names, goodput, strict=True)])
    left.invert_yaxis()
    left.set_ylabel("policy (goodput: useful / busy GPU-hours)")
    left.set_xlabel("GPU-hours lost to preemption")
    left.set_title(metrics[names[0]]["overall"]["preemption_cost"], fontsize="small")
    left.legend(fontsize="small")
    for name, outcome in outcomes.items():
        counts = sorted(Counter(p.workload_id for p in outcome.preemptions).values())
        if counts:
            share = [(len(counts) - i) / len(outcome.runs) for i in range(len(counts))]
            right.step(counts, share, where="post", label=name)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("preemptions of one job (log)")
    right.set_ylabel("fraction of jobs preempted at least that often")
    right.set_title("how preemptions fall on jobs")
    if right.lines:
        right.legend(fontsize="small")
    return _save(fig, out / "preemption_cost.png")


def _maintenance(out: Path, outcomes: dict[str, SimulationOutcome]) -> Path:
    import matplotlib.pyplot as plt

    names = list(outcomes)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    cap_h = 0.0
    labels = []
    for i, name in enumerate(names):
        outcome = outcomes[name]
        cap = float(outcome.config.maintenance.stuck_after_s)
        cap_h = max(cap_h, cap / 3600)
        times = [max(1.0, d.time_to_drain(outcome.end, cap)) for d in outcome.drains]
        xs = [i + 0.3 * (((k * 7919) % 101) / 100 - 0.5) for k in range(len(times))]
        stuck = [d.stuck for d in outcome.drains]
        ax.scatter(xs, times, s=14, c=["tab:red" if s else "tab:blue" for s in stuck], zorder=3)
        labels.append(f"{name}\n{sum(stuck)} stuck of {len(times)}")
    ax.axhline(
        cap_h * 3600,
        color="tab:red",
        linestyle="--",
        linewidth=1,
        label=f"stuck: not empty after {cap_h:g} h (a human steps in)",
    )
    ax.set_yscale("log")
    ticks = [1.0, 30.0, 60.0, 600.0, 3600.0, 4 * 3600.0, cap_h * 3600]
    ax.set_yticks(ticks, ["<= 1 s", "30 s", "1 min", "10 min", "1 h", "4 h", f"{cap_h:g} h"])
    ax.set_xticks(range(len(names)), labels)
    ax.set_xlabel("policy")
    ax.set_ylabel("time from cordon to empty node (log)")
    ax.set_title("maintenance: time to drain each node sent for repair")
    ax.legend(loc="center right", fontsize="small")
    return _save(fig, out / "maintenance.png")


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
