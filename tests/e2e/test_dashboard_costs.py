"""The dashboard's money in a real headless Chromium (as ``test_dashboard.py`` runs it): the
Cost panel shows each budget's money this month and its forecasts as ``GET /statements`` says,
with a chart of the range's money stacked by pool; the printable statement page shows a
budget's total billed and lines, each line opening on its workloads. The log: the small lab's
morning with prices (:mod:`tests.priced_lab`)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.e2e.test_dashboard import WIDTH, _chromium, _serving, _sign_in, _watch
from tests.priced_lab import BUDGETS, MONTH, NOW, priced_lab

TOKEN = {"Authorization": "Bearer admin-token"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _serving(priced_lab(), NOW, tmp_path_factory.mktemp("costs")) as url:
        yield url


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


def _statements(url: str) -> dict[str, dict[str, Any]]:
    answer = httpx.get(f"{url}/statements", params={"month": MONTH}, headers=TOKEN)
    assert answer.status_code == 200, answer.text
    return {s["budget"]: s for s in answer.json()["statements"]}


def test_the_cost_panel_shows_each_budgets_money_and_forecast(server: str, browser: Any) -> None:
    context = browser.new_context(viewport={"width": WIDTH, "height": 1200})
    page = context.new_page()
    problems = _watch(page)
    page.goto(f"{server}/dashboard?refresh=1")
    _sign_in(page, "admin-token")
    page.wait_for_function("() => Number(document.body.dataset.costs || 0) >= 1", timeout=20_000)
    statements = _statements(server)
    for budget in BUDGETS:
        row = page.locator(f'#costs tr[data-budget="{budget}"]')
        assert row.count() == 1, budget
        forecast = statements[budget]["forecast"]
        assert row.locator("td.spent").text_content() == forecast["spent"]["display"]
        assert row.locator("td.at-rate").text_content() == forecast["at_current_rate"]["display"]
        assert (
            row.locator("td.at-entitlement").text_content() == forecast["at_entitlement"]["display"]
        )
        # the range is this morning: its money is the month's, shown once ("spent this
        # month"), not again in a "billed 2026-11" column beside it
        assert row.locator("td.range").text_content() == statements[budget]["billed"]["display"]
        assert not row.locator("td.range").is_visible()
        assert row.locator("td.spent").is_visible()
        assert row.locator("a").get_attribute("href") == (
            f"/dashboard/statement?budget={budget.replace('/', '%2F')}&month={MONTH}"
        )
    drawn = page.evaluate(
        """() => { const c = Chart.getChart("cost-chart");
                   return { labels: c.data.labels,
                            sets: Object.fromEntries(c.data.datasets.map(d => [d.label, d.data])),
                            title: c.options.scales.y.title.text }; }"""
    )
    assert drawn["labels"] == ["lab", "ops"]  # the budgets "Delivered vs owed" compares
    assert drawn["title"] == "EUR"
    for i, budget in enumerate(drawn["labels"]):
        billed = Decimal(statements[budget]["by_pool"]["a100"]["exact"])
        assert drawn["sets"]["a100"][i] == pytest.approx(float(billed), abs=1e-6)
    assert not page.locator("#cost-range-head").is_visible()
    summary = page.text_content("#cost-summary") or ""
    assert "EUR" in summary
    assert MONTH in summary
    width, client = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert width <= client
    assert problems == [], problems
    context.close()


def test_the_statement_page_shows_the_money_and_opens_each_line(server: str, browser: Any) -> None:
    context = browser.new_context(viewport={"width": WIDTH, "height": 1200})
    page = context.new_page()
    problems = _watch(page)
    page.goto(f"{server}/dashboard/statement?budget=lab&month={MONTH}")
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.includes('not signed in')"
    )
    page.goto(f"{server}/dashboard?refresh=1")
    _sign_in(page, "admin-token")
    page.wait_for_function("() => Number(document.body.dataset.costs || 0) >= 1", timeout=20_000)
    page.click('#costs tr[data-budget="lab"] a')
    page.wait_for_function("() => document.body.dataset.statement === 'loaded'", timeout=20_000)
    assert page.url == f"{server}/dashboard/statement?budget=lab&month={MONTH}"
    lab = _statements(server)["lab"]
    assert page.text_content("#title") == f"Statement of lab for {MONTH}"
    assert page.text_content("#total") == lab["billed"]["display"]
    assert page.text_content("#currency") == "EUR"
    lines = {line["kind"]: line for line in lab["lines"]}
    kinds = page.eval_on_selector_all("details.kind", "all => all.map(d => d.dataset.kind)")
    assert kinds == ["usage", "burst", "lost", "idle", "corrections"]
    for kind, line in lines.items():
        shown = page.locator(f'details.kind[data-kind="{kind}"] .billed').text_content()
        assert shown == line["billed"]["display"], kind
        unit = page.locator(f'details.kind[data-kind="{kind}"] .unit').text_content()
        assert unit == (line["unit_price"]["display"] if line["unit_price"] else "-"), kind
    # the idle line names its GPU-hours and price, and the page says why it is billed
    idle = lines["idle"]
    assert idle["gpu_s"] > 0
    assert idle["unit_price"] is not None
    assert page.text_content("#idle-rule") == lab["idle_rule"]
    assert "entitlement" in lab["idle_rule"]
    # a line opens on its workloads
    lost = page.locator('details.kind[data-kind="lost"]')
    assert not lost.locator('tr[data-workload="robot-sim-1"]').is_visible()
    lost.locator("summary").click()
    assert lost.locator('tr[data-workload="robot-sim-1"]').is_visible()
    forecast = page.locator("#forecast .forecast").all_text_contents()
    assert forecast == [
        f"{lab['forecast'][k]['display']} EUR"
        for k in ("spent", "at_current_rate", "at_entitlement")
    ]
    assert page.locator("#share tbody tr").count() == 1  # its share in a100
    # printed: the controls go, the statement stays
    page.emulate_media(media="print")
    assert not page.is_visible("header")
    assert page.is_visible("#total")
    assert problems == [], problems
    context.close()


def test_the_statement_page_refuses_a_token_in_its_url(server: str) -> None:
    answer = httpx.get(f"{server}/dashboard/statement?budget=lab&token=admin-token")
    assert answer.status_code == 400
