"""The Grafana dashboard in deploy/grafana: generated (not edited by hand), every query parses
as PromQL (``promtool check rules``) and names only metrics the services export."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from services.devtools.grafana_dashboard import OUT, dashboard
from tests.unit.test_metrics import _documented

#: Grafana's variables, as a query sees them once Grafana has filled them in.
FILLED = {"$__rate_interval": "1m", "$pool": ".*"}


def _queries() -> list[str]:
    document = json.loads(OUT.read_text())
    queries = []
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            expression = target["expr"]
            for variable, value in FILLED.items():
                expression = expression.replace(variable, value)
            queries.append(expression)
    return queries


def test_the_committed_dashboard_is_the_generated_one() -> None:
    assert json.loads(OUT.read_text()) == dashboard(), (
        "run python -m services.devtools.grafana_dashboard"
    )


def test_every_panel_asks_the_chosen_prometheus_and_ids_are_unique() -> None:
    panels = dashboard()["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
            assert panel["targets"], panel["title"]


def test_the_queries_name_only_exported_metrics() -> None:
    exported = set(_documented()) | {"up"}
    named = set()
    for query in _queries():
        for name in re.findall(r"\b(fairshare_\w+)", query):
            named.add(re.sub(r"_(bucket|count|sum)$", "", name))
    assert named, "no metric named at all"
    assert named - exported == set()
    assert len(named) >= 14, "a panel for nearly every metric"


def test_the_queries_parse(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("FAIRSHARE_REQUIRE_PROMETHEUS"):
            pytest.fail("promtool is required here (apt-get install prometheus)")
        pytest.skip("promtool not installed (Debian's prometheus package)")
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"fairshare:panel_{i}", "expr": expression}
                    for i, expression in enumerate(_queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
