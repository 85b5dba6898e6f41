"""Regenerate ``docs/dashboard.png`` and ``docs/report-charges.png``.

``python -m services.devtools.screenshot [--scenario history|fresh|philly|small] [--range
data|hour|day|week] [--no-charges] [--traces data/traces] [--out docs]``

The dashboard is photographed on one of the demo logs of :mod:`services.devtools.demo_data`:
``history`` (default: ten weeks of a ``fairshare up``-sized lab, simulated), ``fresh`` (its
first five minutes), ``philly`` (the first jobs of the Philly trace on 32 GPUs, its budgets
placed in a tree) or ``small`` (the hand-made morning of a small lab). The log is fed into a
live view and projected into SQLite read models; the API serves both on a loopback port, its
clock at the log's last event; headless Chromium (Debian's ``chromium``, through Playwright)
signs in, waits for the charts, and photographs the page at 1400 px. The charges report
(delivered vs owed per budget per day) is plotted with matplotlib from the Philly run, unless
``--no-charges``.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events.envelope import Envelope, new_event
from events.models import NodeCordoned
from services.reports.model import Value
from services.simulator.trace import DEVELOPMENT_TRACES

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("history", "fresh", "philly", "small")
#: The page's width in the screenshots, as the dashboard's browser tests check it.
WIDTH = 1400


def _int(value: Value) -> int:
    return value if isinstance(value, int) else 0


def build_events(traces: Path, jobs: int, gpus: int) -> list[Envelope[Any]]:
    """The Philly run (the small lab when the traces are absent), a node cordoned at its end."""
    from services.devtools.demo_data import simulated_lab, small_lab

    if not (traces / "philly-2017-09.csv").exists():
        return small_lab()
    events = simulated_lab(traces, jobs=jobs, gpus=gpus)
    last = max(e.time for e in events)
    # One node under maintenance, so that the node panel shows a cordon.
    events.append(
        new_event(
            NodeCordoned(node="node-0001", cordoned_by="ops", reason="firmware update"),
            source="fairshare/demo",
            time=last,
            event_id="00000000-0000-4000-8000-00000000c0d0",
        )
    )
    return events


def scenario_events(scenario: str, traces: Path, jobs: int, gpus: int) -> list[Envelope[Any]]:
    from services.devtools import demo_data

    if scenario == "history":
        return demo_data.long_history()
    if scenario == "fresh":
        return demo_data.fresh_lab()
    if scenario == "small":
        return demo_data.small_lab()
    return build_events(traces, jobs, gpus)


def screenshot_dashboard(url: str, out: Path, chromium: str, query: str = "") -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": WIDTH, "height": 900}, device_scale_factor=1)
        page.goto(f"{url}/dashboard?refresh=60{query}")
        # signs in as a user would (the token never goes into a URL)
        page.fill("#token", "admin-token")
        page.click("#sign-in button[type=submit]")
        # a function, not an expression: the page's policy forbids eval
        page.wait_for_function(
            "() => Number(document.body.dataset.refreshes || 0) >= 1"
            " && Number(document.body.dataset.timelines || 0) >= 1"
            # the Cost panel loads at its own pace (the page does not wait for it)
            " && Number(document.body.dataset.costs || 0) >= 1"
        )
        page.wait_for_timeout(300)
        page.screenshot(path=str(out), full_page=True)
        browser.close()


def plot_charges(engine: Any, out: Path, budgets_shown: int = 6) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from services.reports import build_report

    report = build_report(engine, "charges", "day")
    leaves = [r for r in report.rows if r["line"] == "charges"]
    delivered: dict[str, dict[str, float]] = defaultdict(dict)
    owed: dict[str, dict[str, float]] = defaultdict(dict)
    for row in report.rows:
        if row["line"] not in ("charges", "correction"):
            continue
        day = str(row["period_start"])[:10]
        budget = str(row["budget"])
        delivered[budget][day] = delivered[budget].get(day, 0.0) + _int(row["allocated"]) / 3600
        if row["line"] == "charges":
            owed[budget][day] = _int(row["owed"]) / 3600
    totals: dict[str, float] = defaultdict(float)
    for row in leaves:
        totals[str(row["budget"])] += _int(row["owed"])
    chosen = sorted(totals, key=lambda b: (-totals[b], b))[:budgets_shown]
    days = sorted({str(r["period_start"])[:10] for r in leaves})
    columns = 3
    rows = (len(chosen) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(13, 3.2 * rows), sharex=True, squeeze=False)
    x = range(len(days))
    for index, budget in enumerate(chosen):
        ax = axes[index // columns][index % columns]
        o = [owed[budget].get(d, 0.0) for d in days]
        d = [delivered[budget].get(day, 0.0) for day in days]
        ax.bar(x, o, width=0.8, color="#d9dee8", label="owed (entitlement capped at demand)")
        ax.bar(x, d, width=0.45, color="#3566d6", label="delivered (allocated, with corrections)")
        ratio = sum(min(a, b) for a, b in zip(d, o, strict=True)) / sum(o) if sum(o) else 0.0
        ax.set_title(f"{budget}  (owed delivered: {ratio:.0%})", fontsize=9)
        ax.set_ylabel("GPU-hours per day", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xticks(list(x)[:: max(1, len(days) // 8)])
        ax.set_xticklabels(days[:: max(1, len(days) // 8)], rotation=30, ha="right")
    for index in range(len(chosen), rows * columns):
        axes[index // columns][index % columns].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    as_of = "" if report.as_of is None else datetime.fromtimestamp(report.as_of, UTC).isoformat()
    figure.suptitle(
        f"Charges report, per day: delivered vs owed GPU-hours (as of {as_of})", fontsize=11
    )
    figure.tight_layout(rect=(0, 0.05, 1, 0.97))
    figure.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="history")
    parser.add_argument("--range", choices=("data", "hour", "day", "week"), default="data")
    parser.add_argument("--charges", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--traces", type=Path, default=DEVELOPMENT_TRACES)
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--name", default="dashboard.png", help="file name of the screenshot")
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--gpus", type=int, default=32)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    query = "" if args.range == "data" else f"&range={args.range}"
    events = scenario_events(args.scenario, args.traces, args.jobs, args.gpus)
    with _served(events) as (url, _engine):
        screenshot_dashboard(url, args.out / args.name, args.chromium, query)
    print(f"wrote {args.out / args.name} ({args.scenario}, range {args.range})")
    if args.charges:
        with _served(build_events(args.traces, args.jobs, args.gpus)) as (_url, engine):
            plot_charges(engine, args.out / "report-charges.png")
        print(f"wrote {args.out / 'report-charges.png'}")


@contextmanager
def _served(events: list[Envelope[Any]]) -> Iterator[tuple[str, Any]]:
    """The API over ``events`` (live view and SQLite read models), its clock at the last one."""
    from sqlalchemy import create_engine

    from services.api import create_app, default_tokens
    from services.api.view import LiveView
    from services.bus.memory import InMemoryBroker, InMemoryPublisher
    from services.devtools.demo_data import ServerThread, project
    from services.read_models.migrate import migrate

    view = LiveView()
    view.feed(*events)
    now = view.state.latest_time
    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite:///{scratch}/read-models.db")
        try:
            migrate(engine)
            project(engine, events)
            app = create_app(
                view,
                InMemoryPublisher(InMemoryBroker()),
                default_tokens(),
                clock=lambda: now,
                engine=engine,
            )
            with ServerThread(app) as server:
                yield server.url, engine
        finally:
            engine.dispose()


if __name__ == "__main__":
    main()
