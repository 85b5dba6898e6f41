"""Regenerate ``deploy/grafana/fairshare.json``, the Grafana dashboard of the metrics
(docs/operations.md, "Metrics"): ``python -m services.devtools.grafana_dashboard``.

The panels are listed here as (title, unit, queries) so the JSON stays consistent (ids, grid,
data source input) however the list changes; tests/unit/test_grafana_dashboard.py checks that
every query parses and names only metrics the services export. The data source is an input
(``DS_PROMETHEUS``), so Grafana asks which Prometheus on import; ``$pool`` filters the work
panels by pool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "deploy" / "grafana" / "fairshare.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
RATE = "$__rate_interval"

#: One query: its PromQL, and the legend of its series.
Query = tuple[str, str]
#: (title, unit, kind, queries): kind is "timeseries" or "stat".
Panel = tuple[str, str, str, list[Query]]


def _quantiles(metric: str, by: str = "", labels: str = "") -> list[Query]:
    group = f"le{', ' + by if by else ''}"
    legend = f"{{{{{by}}}}} " if by else ""
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{labels}[{RATE}])))",
            f"{legend}p{int(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Services",
        [
            ("Up", "none", "stat", [('up{job="fairshare"}', "{{service}}")]),
            (
                "Restarts (1 h)",
                "none",
                "stat",
                [("increase(fairshare_service_restarts_total[1h])", "{{service}}")],
            ),
            (
                "Lease leader",
                "none",
                "stat",
                [("fairshare_scheduler_leader == 1", "{{service}} leads {{pool}}")],
            ),
            (
                "Lease epoch",
                "none",
                "stat",
                [("max by (pool) (fairshare_scheduler_lease_epoch)", "{{pool}}")],
            ),
        ],
    ),
    (
        "Work",
        [
            (
                "Pending workloads per budget",
                "none",
                "timeseries",
                [
                    (
                        'sum by (budget) (fairshare_workloads{state="pending", pool=~"$pool"})',
                        "{{budget}}",
                    )
                ],
            ),
            (
                "GPUs held per budget",
                "none",
                "timeseries",
                [
                    (
                        'sum by (budget) (fairshare_workload_gpus{state="running", pool=~"$pool"})',
                        "{{budget}}",
                    )
                ],
            ),
            (
                "Submit to placed",
                "s",
                "timeseries",
                _quantiles("fairshare_submit_to_placed_seconds", labels='{pool=~"$pool"}'),
            ),
            (
                "Preemptions by reason",
                "none",
                "timeseries",
                [
                    (
                        "sum by (reason) (increase("
                        f'fairshare_preemptions_total{{pool=~"$pool"}}[{RATE}]))',
                        "{{reason}}",
                    )
                ],
            ),
            (
                "Scheduling pass duration",
                "s",
                "timeseries",
                _quantiles("fairshare_scheduler_pass_duration_seconds"),
            ),
            (
                "Passes dropped by a lost lease",
                "none",
                "timeseries",
                [
                    (
                        f"sum(increase(fairshare_scheduler_lease_lost_passes_total[{RATE}]))",
                        "dropped",
                    )
                ],
            ),
        ],
    ),
    (
        "Log and charging",
        [
            (
                "Consumer lag per topic",
                "none",
                "timeseries",
                [("max by (topic) (fairshare_consumer_lag_records)", "{{topic}}")],
            ),
            (
                "Charging and usage snapshot lag",
                "s",
                "timeseries",
                [
                    ("max(fairshare_charging_lag_seconds)", "charging"),
                    ("max(fairshare_usage_snapshot_lag_seconds)", "usage snapshot"),
                ],
            ),
            (
                "Charges per second",
                "none",
                "timeseries",
                [
                    (
                        f"sum by (pool, kind) (rate(fairshare_charges_total[{RATE}]))",
                        "{{pool}} {{kind}}",
                    )
                ],
            ),
            (
                "Dead letters (1 h)",
                "none",
                "timeseries",
                [
                    (
                        "sum by (consumer, topic) (increase(fairshare_dead_letters_total[1h]))",
                        "{{consumer}} from {{topic}}",
                    )
                ],
            ),
        ],
    ),
    (
        "API",
        [
            (
                "API latency p90 per route",
                "s",
                "timeseries",
                [
                    (
                        "histogram_quantile(0.9, sum by (le, route) "
                        f"(rate(fairshare_api_request_duration_seconds_bucket[{RATE}])))",
                        "{{route}}",
                    )
                ],
            ),
            (
                "API requests per second by status",
                "reqps",
                "timeseries",
                [
                    (
                        "sum by (status) "
                        f"(rate(fairshare_api_request_duration_seconds_count[{RATE}]))",
                        "{{status}}",
                    )
                ],
            ),
        ],
    ),
]


def _panel(panel_id: int, panel: Panel, x: int, y: int, width: int, height: int) -> dict[str, Any]:
    title, unit, kind, queries = panel
    body: dict[str, Any] = {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": width, "h": height},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": e, "legendFormat": f}
            for i, (e, f) in enumerate(queries)
        ],
    }
    if kind == "stat":
        body["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"]},
            "textMode": "value_and_name",
        }
    return body


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row_title, row in ROWS:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        stats = all(kind == "stat" for _t, _u, kind, _q in row)
        width, height = (6, 4) if stats else (12, 8)
        for index, panel in enumerate(row):
            x = (index * width) % 24
            if index and x == 0:
                y += height
            panels.append(_panel(next_id, panel, x, y, width, height))
            next_id += 1
        y += height
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "title": "Fairshare",
        "uid": "fairshare",
        "description": "Fairshare's services: docs/operations.md, Metrics",
        "tags": ["fairshare"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "pool",
                    "label": "pool",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": "label_values(fairshare_workloads, pool)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                }
            ]
        },
        "panels": panels,
    }


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
