"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
it loads without console errors, shows what the API says at the same moment, and updates after
a new submission.

Without a browser these tests are skipped with the reason, or fail under
``FAIRSHARE_REQUIRE_BROWSER=1``. ``FAIRSHARE_CHROMIUM`` points at another Chromium binary.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

from services.api import create_app, default_tokens
from services.api.view import VIEW_KINDS, LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.devtools.demo_data import T0, ServerThread, project, small_lab
from services.read_models.migrate import migrate

NOW = (T0 + timedelta(hours=6, minutes=20)).timestamp()
TOKEN = {"Authorization": "Bearer admin-token"}


def _chromium() -> str:
    """The Chromium binary, or skip (fail under FAIRSHARE_REQUIRE_BROWSER=1) with the reason."""
    reason = None
    path = os.environ.get("FAIRSHARE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as error:
        reason = f"playwright is not installed ({error}); pip install playwright"
    if reason is None and not Path(path).exists():
        reason = f"no Chromium at {path} (apt-get install chromium, or set FAIRSHARE_CHROMIUM)"
    if reason is not None:
        if os.environ.get("FAIRSHARE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser required (FAIRSHARE_REQUIRE_BROWSER=1) but {reason}")
        pytest.skip(f"no headless browser: {reason}")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    events = small_lab()
    broker = InMemoryBroker()
    view = LiveView(InMemorySubscriber(broker, "dashboard-view", VIEW_KINDS))
    view.feed(*events)
    engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('dash') / 'rm.db'}")
    migrate(engine)
    project(engine, events)
    app = create_app(
        view, InMemoryPublisher(broker), default_tokens(), clock=lambda: NOW, engine=engine
    )
    with ServerThread(app) as running:
        yield running.url
    engine.dispose()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


def test_dashboard_shows_what_the_api_says_and_updates(server: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{server}/?token=admin-token&refresh=0.5")  # / redirects to /dashboard
    page.wait_for_function("Number(document.body.dataset.refreshes || 0) >= 1", timeout=15_000)

    budgets = httpx.get(f"{server}/budgets", headers=TOKEN).json()
    assert page.text_content("#as-of") == "as of " + budgets["as_of"].replace("T", " ")[:-4] + "Z"
    for budget in budgets["budgets"]:
        figures = budget["pools"]["a100"]
        row = page.locator(f'#budgets tr[data-budget="{budget["budget"]}"]')
        assert row.count() == 1, budget["budget"]
        assert row.locator("td.share").text_content() == f"{figures['share'] * 100:.1f}%"
        assert row.locator("td.delivered").text_content() == (
            f"{figures['delivered_gpu_s'] / 3600:.1f}"
        )
        assert row.locator("td.owed").text_content() == f"{figures['owed_gpu_s'] / 3600:.1f}"
        assert row.locator("td.demand").text_content() == str(figures["demand_gpus"])

    queue = httpx.get(f"{server}/queue?pool=a100", headers=TOKEN).json()["pools"][0]
    shown = page.eval_on_selector_all(
        "#queue tbody tr", "rows => rows.map(r => r.dataset.workload)"
    )
    assert shown == [w["workload_id"] for w in queue["pending"]]
    assert shown
    assert "robot-sim-1" in shown
    assert page.locator('#preemptions tr[data-workload="robot-sim-1"]').count() == 1
    assert "preempt-for" in (page.text_content("#preemptions") or "")
    assert page.locator('.node[data-node="n3"] .state').text_content() == "cordoned"
    assert page.locator('.node[data-node="n1"] .state').text_content() == "allocated"
    assert page.evaluate("Chart.getChart('usage-chart').data.datasets.length") >= 2

    submitted = httpx.post(
        f"{server}/workloads",
        headers=TOKEN,
        json={
            "workload_id": "fresh-from-the-test",
            "budget": "ops",
            "pools": ["a100"],
            "gpus": 1,
            "min_runtime_s": 600,
        },
    )
    assert submitted.status_code == 201, submitted.text
    page.wait_for_selector('#queue tr[data-workload="fresh-from-the-test"]', timeout=10_000)
    ops = page.locator('#budgets tr[data-budget="ops"] td.demand')
    page.wait_for_function(
        "document.querySelector('#budgets tr[data-budget=\"ops\"] td.demand').textContent === '1'",
        timeout=10_000,
    )
    assert ops.text_content() == "1"
    assert problems == [], problems
    page.close()


def test_dashboard_asks_for_a_token(server: str, browser: Any) -> None:
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{server}/dashboard")
    page.evaluate("localStorage.clear()")
    page.reload()
    page.wait_for_function("document.querySelector('#status').textContent.includes('token')")
    assert problems == []
    page.close()
