"""Regenerate ``docs/metrics.png``: the panels of the Grafana dashboard, evaluated by a real
Prometheus over a real ``fairshare up``.

``python -m services.devtools.metrics_screenshot [--minutes 4] [--out docs/metrics.png]``

Grafana cannot be installed here, so this is not Grafana's rendering: ``fairshare up`` runs for
``--minutes`` with its demo stream while Debian's Prometheus scrapes it every 2 s through the
targets file ``up`` writes; then every query of ``deploy/grafana/fairshare.json`` is asked of
Prometheus's HTTP API (``query_range``, Grafana's variables filled in as Grafana would), drawn
with the dashboard's own vendored Chart.js in the dashboard's layout, and photographed by
headless Chromium (Debian's, through Playwright). The numbers are Prometheus's; only the
drawing differs from Grafana's.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from services.devtools.grafana_dashboard import ROOT, dashboard

VENDOR = ROOT / "services" / "dashboard" / "static" / "vendor" / "chart.umd.min.js"
#: Grafana's variables as it fills them in for a short range scraped every 2 s.
FILLED = {"$__rate_interval": "30s", "$pool": ".*"}
WIDTH = 1400


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def _wait(what: str, check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(1)


Processes = tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]


def run_and_scrape(work: Path, minutes: float) -> tuple[int, Processes, float]:
    """``fairshare up`` and a Prometheus scraping it: the Prometheus port, both processes
    (still running) and when scraping started."""
    data = work / "data"
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    out = (work / "up.out").open("wb")
    up = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(data),
         "--api-port", str(_free_port()), "--submit-every", "1"],
        stdout=out, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    targets = data / "prometheus" / "prometheus.yml"
    _wait("fairshare up's targets", targets.exists, 240)
    config = json.loads(targets.read_text())
    config["global"] = {"scrape_interval": "2s", "evaluation_interval": "2s"}
    (work / "prometheus.yml").write_text(json.dumps(config))
    port = _free_port()
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(work / "prometheus.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    started = time.time()
    print(f"scraping for {minutes:g} min (Prometheus on 127.0.0.1:{port}) ...", flush=True)
    time.sleep(minutes * 60)
    return port, (up, prometheus), started


def evaluate(port: int, start: float, end: float) -> list[dict[str, Any]]:
    """Every panel with its series: [{title, type, unit, grid, series: [{name, points}]}]."""
    panels = []
    for panel in dashboard()["panels"]:
        entry: dict[str, Any] = {"title": panel["title"], "type": panel["type"]}
        entry["grid"] = panel["gridPos"]
        entry["unit"] = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        entry["series"] = []
        for target in panel.get("targets", []):
            expression = target["expr"]
            for variable, value in FILLED.items():
                expression = expression.replace(variable, value)
            query = urllib.parse.urlencode(
                {"query": expression, "start": start, "end": end, "step": 5}
            )
            answer = _get(f"http://127.0.0.1:{port}/api/v1/query_range?{query}")
            for result in answer["data"]["result"]:
                name = target["legendFormat"]
                for label, value in result["metric"].items():
                    name = name.replace("{{" + label + "}}", value)
                points = [[float(t) - start, float(v)] for t, v in result["values"]]
                entry["series"].append({"name": name, "points": points})
        panels.append(entry)
    return panels


PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ font: 13px sans-serif; background: #111217; color: #ccccdc; margin: 12px; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} p.note {{ margin: 0 0 10px; color: #8e8e9e; }}
.grid {{ display: grid; grid-template-columns: repeat(24, 1fr); grid-auto-rows: 30px;
         gap: 6px; }}
.panel {{ background: #181b1f; border: 1px solid #2c3235; padding: 6px; overflow: hidden; }}
.row {{ font-weight: bold; font-size: 15px; padding: 6px 0; background: none; border: none; }}
.title {{ font-weight: bold; margin-bottom: 4px; }}
.stat {{ display: flex; flex-wrap: wrap; gap: 4px 14px; }}
.stat div {{ font-size: 12px; }} .stat b {{ font-size: 20px; color: #73bf69; display: block; }}
canvas {{ width: 100% !important; }}
</style><script src="{chart}"></script></head><body>
<h1>Fairshare: the panels of deploy/grafana/fairshare.json</h1>
<p class="note">{note}</p><div class="grid" id="grid"></div>
<script>
const panels = {panels};
const colours = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9",
                 "#8ab8ff", "#fade2a", "#96d98d", "#ffb357"];
const grid = document.getElementById("grid");
for (const p of panels) {{
  const el = document.createElement("div");
  el.className = p.type === "row" ? "panel row" : "panel";
  el.style.gridColumn = `${{p.grid.x + 1}} / span ${{p.grid.w}}`;
  el.style.gridRow = `${{p.grid.y + 1}} / span ${{p.grid.h}}`;
  el.innerHTML = `<div class="title">${{p.title}}${{p.unit && p.unit !== "none" ?
    " (" + p.unit + ")" : ""}}</div>`;
  grid.appendChild(el);
  if (p.type === "row") continue;
  if (p.type === "stat") {{
    const box = document.createElement("div"); box.className = "stat";
    for (const s of p.series) {{
      const last = s.points.length ? s.points[s.points.length - 1][1] : NaN;
      const d = document.createElement("div");
      d.innerHTML = `<b>${{Number.isFinite(last) ? +last.toFixed(2) : "-"}}</b>${{s.name}}`;
      box.appendChild(d);
    }}
    if (!p.series.length) box.textContent = "no data";
    el.appendChild(box); continue;
  }}
  const canvas = document.createElement("canvas");
  canvas.height = p.grid.h * 30 - 30; el.appendChild(canvas);
  new Chart(canvas, {{type: "line", data: {{datasets: p.series.map((s, i) => ({{
      label: s.name, data: s.points.map(([x, y]) => ({{x, y}})), pointRadius: 0,
      borderWidth: 1.5, borderColor: colours[i % colours.length]}}))}},
    options: {{animation: false, maintainAspectRatio: false, parsing: true,
      scales: {{x: {{type: "linear", title: {{display: true, text: "seconds"}},
                    ticks: {{color: "#8e8e9e"}}, grid: {{color: "#2c3235"}}}},
               y: {{ticks: {{color: "#8e8e9e"}}, grid: {{color: "#2c3235"}}}}}},
      plugins: {{legend: {{labels: {{color: "#ccccdc", boxWidth: 10}}}}}}}}}});
}}
document.body.dataset.done = "1";
</script></body></html>
"""


def render(panels: list[dict[str, Any]], note: str, page: Path) -> None:
    page.write_text(
        PAGE.format(
            chart=VENDOR.as_uri(),
            note=html.escape(note),
            panels=json.dumps(panels).replace("</", "<\\/"),
        )
    )


def photograph(page: Path, out: Path, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox"]
        )
        tab = browser.new_page(viewport={"width": WIDTH, "height": 900}, device_scale_factor=1)
        tab.goto(page.as_uri())
        tab.wait_for_function("() => document.body.dataset.done === '1'")
        tab.wait_for_timeout(300)
        tab.screenshot(path=str(out), full_page=True)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "metrics.png")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fairshare-metrics-") as temporary:
        work = Path(temporary)
        port, (up, prometheus), start = run_and_scrape(work, args.minutes)
        try:
            end = time.time()
            panels = evaluate(port, start, end)
            version = _get(f"http://127.0.0.1:{port}/api/v1/status/buildinfo")["data"]["version"]
        finally:
            up.send_signal(signal.SIGTERM)
            up.wait(timeout=60)
            prometheus.terminate()
            prometheus.wait(timeout=30)
        note = (
            f"Evaluated by Prometheus {version} (its HTTP API, query_range) over "
            f"{(end - start) / 60:.1f} minutes of a fairshare up with its demo stream, scraped "
            "every 2 s; drawn with Chart.js in the dashboard's layout (Grafana is not "
            "installed here). x: seconds since scraping began."
        )
        render(panels, note, work / "metrics.html")
        photograph(work / "metrics.html", args.out, args.chromium)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
