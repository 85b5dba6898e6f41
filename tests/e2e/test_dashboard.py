"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
it signs in with a token typed into its form (never one in its URL), loads without console
errors under the API's Content-Security-Policy, shows what the API says at the same moment,
and updates after a new submission.

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
from services.api.deps import SESSION_COOKIE
from services.api.security import install_security_headers
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
    install_security_headers(app)  # a no-op once create_app installs them itself
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


def _watch(page: Any) -> list[str]:
    """Console errors (a refused inline script or style is one) and uncaught exceptions."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    return problems


def _sign_in(page: Any, token: str) -> None:
    page.wait_for_selector("#sign-in:not([hidden])")
    page.fill("#token", token)
    page.click("#sign-in button[type=submit]")


def test_dashboard_shows_what_the_api_says_and_updates(server: str, browser: Any) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    problems = _watch(page)
    response = page.goto(f"{server}/?refresh=0.5")  # / redirects to /dashboard
    assert response is not None
    assert response.url == f"{server}/dashboard?refresh=0.5"
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert response.headers["referrer-policy"] == "no-referrer"
    _sign_in(page, "admin-token")
    page.wait_for_function(
        "() => Number(document.body.dataset.refreshes || 0) >= 1", timeout=15_000
    )
    assert page.text_content("#who") == "signed in as admin (admin)"

    # the token is in an HttpOnly, SameSite=Strict cookie, and nowhere a script could read it
    [cookie] = context.cookies()
    assert (cookie["name"], cookie["value"]) == (SESSION_COOKIE, "admin-token")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/"
    stored = page.evaluate(
        "JSON.stringify([document.cookie, {...localStorage}, {...sessionStorage}, location.href])"
    )
    assert "admin-token" not in stored

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
    # the bars are sized through the CSSOM (the policy refuses style attributes in markup)
    widths = page.eval_on_selector_all(
        "#budgets .bar > span", "bars => bars.map(b => getComputedStyle(b).width)"
    )
    assert widths
    assert any(width not in ("0px", "auto") for width in widths), widths

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
        "() => document.querySelector('#budgets tr[data-budget=\"ops\"] td.demand')"
        ".textContent === '1'",
        timeout=10_000,
    )
    assert ops.text_content() == "1"
    assert problems == [], problems
    context.close()


def test_dashboard_asks_for_a_token_and_signs_out(server: str, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    problems = _watch(page)
    page.goto(f"{server}/dashboard")
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.includes('sign in')"
    )
    assert page.is_visible("#sign-in")
    assert context.cookies() == []

    _sign_in(page, "not-a-token-at-all")
    page.wait_for_function(
        "() => document.querySelector('#status').textContent === 'unknown token'"
    )
    assert context.cookies() == []
    assert page.input_value("#token") == ""  # a typed token does not linger in the page

    _sign_in(page, "ana-token")
    page.wait_for_function(
        "() => Number(document.body.dataset.refreshes || 0) >= 1", timeout=15_000
    )
    assert page.text_content("#who") == "signed in as ana"
    page.click("#sign-out")
    page.wait_for_selector("#sign-in:not([hidden])")
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.includes('sign in')"
    )
    assert context.cookies() == []
    assert page.evaluate("fetch('/budgets').then(r => r.status)") == 401
    # the browser's console shows the 401 of the unknown token and of the last fetch only
    assert all("401" in problem for problem in problems), problems
    context.close()


def test_a_token_in_the_url_is_refused_not_used(server: str, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    for path in ("/?token=admin-token", "/dashboard?token=admin-token"):
        response = page.goto(f"{server}{path}")
        assert response is not None
        assert response.status == 400
        assert response.url == f"{server}{path}"  # not redirected anywhere
        assert "sign in" in (page.text_content("body") or "")
    assert context.cookies() == []
    context.close()


def test_swagger_ui_inline_script_is_allowed_by_its_hash(server: str, browser: Any) -> None:
    """/docs keeps working under the policy: its one inline script runs (offline, the CDN's
    script does not load, so the inline one then fails on a missing name: that is fine)."""
    page = browser.new_page()
    messages: list[str] = []
    page.on("console", lambda m: messages.append(m.text))
    page.on("pageerror", lambda e: messages.append(str(e)))
    response = page.goto(f"{server}/docs")
    assert response is not None
    assert "'sha256-" in response.headers["content-security-policy"]
    page.wait_for_timeout(500)
    assert not [m for m in messages if "inline script" in m], messages
    page.close()
