"""The Health page in a real headless Chromium, as in test_dashboard_browser.py: the lead signs in,
goes from the rounds page to a round and from its navigation to the Health page, the three charts
are drawn with the figures the server computed, the tables list the repeated trick and the rounds
side by side with the inflation mark, and the browser reports no script error and no
Content-Security-Policy violation. The planted rounds: ``tests/support/health_seed.py``.

The page is screenshotted into test-artifacts/screenshots/health.png; with
``DYNAVAL_DOC_SCREENSHOTS=1`` also into docs/screenshots/health.png (the docs' picture).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page

from dynaval.service_layer.health import round_health
from tests.e2e.test_dashboard_browser import (
    LOGIN_PATH,
    check_charts,
    goto,
    login,
    path_of,
    shoot,
    text_of,
    watch_csp,
)
from tests.fixtures.browser import REPO_ROOT
from tests.fixtures.service import LEAD_TOKEN, LiveService
from tests.support.health_seed import MARKUP, TRICK_EDITS, seed_health_rounds

DOC_IMAGES = REPO_ROOT / "docs" / "screenshots"


def _chart_data(page: Page, test_id: str) -> list[list[Any]]:
    """Each dataset's data of the chart Chart.js drew on the canvas ``test_id``."""
    data: list[list[Any]] = page.evaluate(
        """(id) => window.Chart.getChart(document.querySelector(`canvas[data-testid="${id}"]`))
              .data.datasets.map(d => d.data)""",
        test_id,
    )
    return data


def test_lead_reads_the_health_page_in_a_browser(
    offline_live_service: LiveService, browser_context: BrowserContext, page: Page, screenshot_dir: Path
) -> None:
    assert offline_live_service.services.database is not None
    rounds = seed_health_rounds(offline_live_service.services.database)
    base, second = offline_live_service.url, rounds.second
    script_errors: list[str] = []
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    csp_reports = watch_csp(browser_context, page)

    # Signed out, the page leads to the login; signed in, the round's navigation leads to it.
    health_path = f"/dashboard/rounds/{second}/health"
    assert goto(page, base + health_path) == 200 and path_of(page.url) == LOGIN_PATH
    assert login(page, base, LEAD_TOKEN) == 200
    page.get_by_test_id(f"round-row-{second}").get_by_test_id("nav-round").click()
    page.wait_for_url(base + f"/dashboard/rounds/{second}")
    page.locator("nav").get_by_test_id("nav-health").click()
    page.wait_for_url(base + health_path)

    # The three charts are drawn, with the server's figures.
    assert check_charts(page) == 3
    view = round_health.round_health(
        offline_live_service.services,
        offline_live_service.app.extensions["dynaval_dashboard_figures"],
        second,
    )
    health = view.health
    [values] = _chart_data(page, "health-round-chart")
    expected = [*health.writers.top.values(), *health.diversity.distinct.values()]
    expected += [health.fooled_rate, health.fooled_rate_without_repeats]
    assert values == pytest.approx(expected)
    assert _chart_data(page, "health-clusters-chart") == [[10], [10]]
    mer, vmer, alpha, distinct_2 = _chart_data(page, "health-trend-chart")
    assert mer == pytest.approx([t.point.mer for t in view.trend])
    assert distinct_2 == pytest.approx([t.point.diversity.value for t in view.trend])
    assert alpha == pytest.approx([t.point.alpha for t in view.trend]) and None not in alpha
    assert vmer == pytest.approx(mer)

    # The tables: the trick once, its example as text; the rounds side by side, the second marked.
    first = rounds.trick_ids[0]
    assert page.locator('[data-testid^="cluster-row-"]').count() == 1
    assert text_of(page, f"cluster-{first}-size") == "10"
    assert text_of(page, f"cluster-{first}-example") == f"{MARKUP} {TRICK_EDITS[0]}"
    assert page.locator("main script:not([type='application/json'])").count() == 0
    assert page.locator('[data-testid^="trend-row-"]').count() == 2
    assert text_of(page, f"trend-{rounds.first}-mark") == ""
    assert text_of(page, f"trend-{second}-mark") == "possible score inflation"
    shoot(page, screenshot_dir, "health")
    if os.environ.get("DYNAVAL_DOC_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(screenshot_dir / "health.png", DOC_IMAGES / "health.png")

    # The first round's link in the table leads to its own Health page.
    page.get_by_test_id(f"trend-row-{rounds.first}").get_by_role("link").click()
    page.wait_for_url(base + f"/dashboard/rounds/{rounds.first}/health")
    assert text_of(page, "no-clusters") == "No repeated pattern in this round."
    assert check_charts(page) == 2  # no cluster chart without a cluster
    assert script_errors == [] and csp_reports == [], (script_errors, csp_reports)
