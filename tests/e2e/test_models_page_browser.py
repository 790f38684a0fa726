"""The lead's models page in a real headless Chromium, as in test_dashboard_browser.py: the lead
signs in, opens the page from the navigation, reads the accuracy matrix and a failed gate run's
flips (made by the real use cases with tiny real models, ``tests/support/models_scenario.py``),
follows a case's link to its candidate page, and the browser reports no script error and no
Content-Security-Policy violation. The page needs no Label Studio: the service runs without one.
The page is screenshotted into test-artifacts/screenshots/models.png.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page

from dynaval.service_layer.regression import gate
from tests.e2e.test_dashboard_browser import (
    LOGIN_PATH,
    goto,
    login,
    path_of,
    shoot,
    submit,
    text_of,
    watch_csp,
)
from tests.e2e.test_models_page import expected_cell
from tests.fixtures.service import LEAD_TOKEN, LiveService
from tests.support.models_scenario import MARKUP, ModelsScenario, build_models, seed_models_scenario


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("models-page-browser"))


def test_lead_reads_the_models_page_in_a_browser(
    offline_live_service: LiveService,
    models: dict[str, Path],
    browser_context: BrowserContext,
    page: Page,
    screenshot_dir: Path,
) -> None:
    scenario: ModelsScenario = seed_models_scenario(offline_live_service.services, models)
    base, hashes = offline_live_service.url, scenario.hashes
    script_errors: list[str] = []
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    csp_reports = watch_csp(browser_context, page)

    # Signed out, the page leads to the login; signed in, the navigation leads to it.
    assert goto(page, base + "/dashboard/models") == 200 and path_of(page.url) == LOGIN_PATH
    assert login(page, base, LEAD_TOKEN) == 200
    page.get_by_test_id("nav-models").click()
    page.wait_for_url(base + "/dashboard/models")
    shoot(page, screenshot_dir, "models")

    # The matrix: each model's row, each cell the evaluation's figures.
    assert [" ".join(t.split()) for t in page.get_by_test_id("matrix-name").all_inner_texts()] == [
        "model A",
        "model-b",
        "model-a2",
    ]
    for key in ("A", "B", "A2"):
        for split in ("dev_r1", "test_r1", "capture"):
            assert text_of(page, f"cell-{hashes[key]}-{split}") == expected_cell(scenario, key, split)

    # The failed gate run lists B's flips: every positive case A passed, with its text as text.
    runs = gate.gate_runs(offline_live_service.services)
    failed = next(r for r in runs if r["id"] == scenario.failed_run)
    flips = {f["case_id"]: f for f in failed["negative_flips"]}
    assert flips
    rendered = page.locator('[data-testid^="flip-"]')
    assert rendered.count() == len(flips)
    case_id = sorted(flips)[0]
    row = text_of(page, f"flip-{case_id}")
    assert row.startswith(f"{case_id} #{flips[case_id]['round_id']} · {flips[case_id]['split']}")
    assert MARKUP.strip() in row and row.endswith("positive positive negative")
    assert page.locator("main script, main b").count() == 0  # the inputs' markup is text

    # A case's link leads to its candidate page.
    page.get_by_test_id(f"flip-{case_id}").get_by_test_id("case-link").click()
    page.wait_for_url(base + f"/dashboard/candidates/{case_id}")
    assert text_of(page, "prov-example-id") == case_id

    # The suspects come ticked, ready to go back to Label Studio; with none ticked the form is
    # refused on the page, and nothing is sent.
    assert goto(page, base + "/dashboard/models") == 200
    ticks = page.locator('[data-testid="revalidate-form"] input[name="cases"]')
    assert ticks.count() >= 1 and all(ticks.nth(i).is_checked() for i in range(ticks.count()))
    for i in range(ticks.count()):
        ticks.nth(i).uncheck()
    assert submit(page, page.get_by_test_id("revalidate-submit")) == 422
    assert "tick at least one suspect case" in text_of(page, "form-error")
    assert set(page.get_by_test_id("revalidation-state").all_inner_texts()) == {"not sent"}
    assert script_errors == [] and csp_reports == [], (script_errors, csp_reports)
