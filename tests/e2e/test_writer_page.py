"""The writers' page (``/write``) in a real headless Chromium, against the live service and a real
Label Studio.

A writer signs in with their token (refused without one, with a wrong one, and with a collector's or
an exporter's), picks an open round, asks the model and sees its answer as probability bars with
whether it was fooled, submits, and follows their examples in "My examples" with their status, MER
and VMER, while annotators validate one in the real Label Studio until it is accepted. An NLI round
shows the premise, then the hypothesis. Every error the API answers is shown as a sentence naming
the field (422, 409, 413, 429; an example longer than the model reads, 422); another writer's
examples never appear; sign-out forgets the token.
The page loads nothing from outside the service, raises no script error and breaks no rule of its
Content-Security-Policy. At 390x844 (a phone) nothing scrolls sideways.

Screenshots go to test-artifacts/screenshots/writer-*.png; with ``DYNAVAL_DOC_SCREENSHOTS=1`` the
desktop and phone ones are also written to docs/screenshots/ (docs/writer_page.md shows them).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, Route, ViewportSize, expect

from dynaval.entrypoints.headers import WRITER_PAGE_POLICY
from tests.e2e.test_dashboard_browser import watch_csp
from tests.e2e.test_dashboard_pages import InlineCode
from tests.fixtures.browser import REPO_ROOT
from tests.fixtures.models import NLI_LABELS
from tests.fixtures.service import (
    COLLECTOR_TOKEN,
    EXPORTER_TOKEN,
    OTHER_WRITER_TOKEN,
    WRITER_NAME,
    WRITER_TOKEN,
    LiveService,
    running_service,
)
from tests.support.waiting import wait_for, wait_verified

pytestmark = [pytest.mark.labelstudio, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

POS, NEG, NEU = "positive", "negative", "neutral"
PHONE: ViewportSize = {"width": 390, "height": 844}
DOC_IMAGES = REPO_ROOT / "docs" / "screenshots"
TOKEN_KEY = "dynaval.writer.token"
ANA_FOOLS = "Oh wonderful, the train is late again and I get to stand all the way."
ANA_PLAIN = "The library opens at nine on weekdays."
ANA_NEXT = "Sure, a four-hour layover is exactly how I wanted to spend my birthday."
ANA_RATIONALE = "Sarcasm: the words are cheerful, the writer is not."
BO_TEXTS = ["Bo's secret draft about a lovely hotel.", "Bo's other draft: the food was great."]
PREMISE = "A man in a red coat is sleeping on a park bench."
HYPOTHESIS = "Nobody is on the bench."


# ------------------------------------------------------------------------------------ helpers


def shoot(page: Page, folder: Path, name: str, *, doc: str | None = None) -> None:
    """A full-page screenshot in test-artifacts; with DYNAVAL_DOC_SCREENSHOTS=1 also the docs' copy."""
    path = folder / f"writer-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    if doc is not None and os.environ.get("DYNAVAL_DOC_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_IMAGES / doc)


def watch(context: BrowserContext, page: Page) -> dict[str, list[str]]:
    """What must stay empty: requests leaving the service, script errors, policy violations."""
    seen: dict[str, list[str]] = {"outside": [], "errors": []}

    def refuse(route: Route) -> None:
        seen["outside"].append(route.request.url)
        route.abort()

    context.route(re.compile(r"^(?!https?://(127\.0\.0\.1|localhost)[:/]).*"), refuse)
    page.on("pageerror", lambda error: seen["errors"].append(str(error)))
    seen["csp"] = watch_csp(context, page)
    return seen


def no_sideways_scroll(page: Page, what: str) -> None:
    widths = page.evaluate(
        "() => ({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,"
        " body: document.body.scrollWidth})"
    )
    assert widths["scroll"] <= widths["client"] and widths["body"] <= widths["client"], (what, widths)


def sign_in(page: Page, token: str) -> None:
    page.get_by_label("Writer token").fill(token)
    page.get_by_test_id("sign-in-submit").click()


def signed_out(page: Page) -> None:
    """Nothing but the sign-in form: no workspace, no round, no example, no token kept."""
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    expect(page.get_by_test_id("workspace")).to_be_hidden()
    expect(page.get_by_test_id("sign-out")).to_be_hidden()
    assert page.locator("#round-select option").count() == 0
    assert page.get_by_test_id("mine-item").count() == 0
    assert page.evaluate(f"() => window.sessionStorage.getItem('{TOKEN_KEY}')") is None


def refused(page: Page, token: str, says: str) -> None:
    sign_in(page, token)
    expect(page.get_by_test_id("sign-in-error")).to_contain_text(says)
    signed_out(page)


def pick_round(page: Page, round_id: int) -> None:
    page.get_by_test_id("round-select").select_option(str(round_id))
    expect(page.get_by_test_id("example-form")).to_be_visible()
    expect(page.get_by_test_id("mine")).to_be_visible()


def field_labels(page: Page) -> list[str]:
    return [" ".join(t.split()) for t in page.locator("#inputs label").all_inner_texts()]


def choose(page: Page, label: str) -> None:
    page.get_by_test_id(f"label-{label}").check()


def ask(page: Page) -> None:
    page.get_by_test_id("ask").click()
    expect(page.get_by_test_id("ask")).to_be_enabled()


def submit(page: Page) -> None:
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("submit")).to_be_enabled()


def bars(page: Page) -> dict[str, dict[str, Any]]:
    """Each bar by label: the probability it shows (its text), its fill's width as a share of its
    track, whether it is the model's answer, and what it says beside the label."""
    shown: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('#bars li')].map(li => ({
              label: li.querySelector('.bar-label').firstChild.textContent,
              note: (li.querySelector('.bar-label small') || {textContent: ''}).textContent,
              text: li.querySelector('.bar-value').textContent,
              share: li.querySelector('.bar-fill').getBoundingClientRect().width
                     / li.querySelector('.bar-track').getBoundingClientRect().width,
              predicted: li.classList.contains('predicted'),
              probability: Number(li.dataset.probability),
          }))"""
    )
    return {bar["label"]: bar for bar in shown}


def check_bars(page: Page, labels: list[str], probabilities: dict[str, float], prediction: str) -> None:
    shown = bars(page)
    assert list(shown) == labels
    for label, bar in shown.items():
        p = probabilities[label]
        assert bar["probability"] == pytest.approx(p, abs=1e-9)
        assert bar["text"] == f"{p * 100:.1f}%", bar
        assert bar["share"] == pytest.approx(p, abs=0.02), bar
        assert bar["predicted"] is (label == prediction)
    assert "the model's answer" in shown[prediction]["note"]


def form_error(page: Page) -> str:
    box = page.get_by_test_id("form-error")
    expect(box).to_be_visible()
    return " ".join(box.inner_text().split())


def mine_items(page: Page) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="mine-item"]')].map(li => ({
              id: li.dataset.candidate,
              status: li.querySelector('[data-testid="mine-status"]').dataset.status,
              status_text: li.querySelector('[data-testid="mine-status"]').textContent,
              fooled: (li.querySelector('[data-testid="mine-fooled"]') || {textContent: ''}).textContent,
              text: li.innerText,
          }))"""
    )
    return items


def stat(page: Page, name: str) -> str:
    return page.get_by_test_id(f"stat-{name}").inner_text().strip()


def percent(share: float) -> str:
    return f"{share * 100:.1f}%"


def api(live: LiveService, method: str, path: str, **kwargs: Any) -> Any:
    response = live.call(method, path, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def create_round(live: LiveService, name: str, task: str = "sentiment", model: str = "default") -> int:
    return int(api(live, "POST", "/api/rounds", json={"name": name, "task": task, "model": model})["id"])


# -------------------------------------------------------------------------------------- tests


@pytest.fixture
def rounds(live_service: LiveService, tiny_nli_model_dir: Path) -> dict[str, int]:
    """An open sentiment round with two of Bo's examples in it, an open NLI round, a closed round."""
    live = live_service
    made = {
        "sentiment": create_round(live, "Sentiment: fool the model"),
        "nli": create_round(live, "NLI: premise and hypothesis", task="nli", model=str(tiny_nli_model_dir)),
        "closed": create_round(live, "An old closed round"),
    }
    api(live, "POST", f"/api/rounds/{made['closed']}/close")
    for text in BO_TEXTS:
        api(live, "POST", f"/api/rounds/{made['sentiment']}/candidates", token=OTHER_WRITER_TOKEN,
            json={"text": text, "writer_label": POS})  # fmt: skip
    return made


def test_a_writer_writes_asks_submits_and_follows_their_examples(
    live_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    rounds: dict[str, int],
    browser: Browser,
    browser_context: BrowserContext,
    page: Page,
    screenshot_dir: Path,
) -> None:
    live, base = live_service, live_service.url
    sentiment, nli = rounds["sentiment"], rounds["nli"]
    seen = watch(browser_context, page)

    # (1) The page is a static shell: the headers of a page that calls this origin's API, no inline
    # code, no data; without a token there is nothing but the sign-in form.
    response = page.goto(base + "/write")
    assert response is not None and response.status == 200
    headers = response.headers
    assert headers["content-security-policy"] == WRITER_PAGE_POLICY
    assert "unsafe-inline" not in WRITER_PAGE_POLICY and "connect-src 'self'" in WRITER_PAGE_POLICY
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
    html = response.text()
    assert InlineCode(html).found == []
    assert "Sentiment: fool the model" not in html and WRITER_NAME not in html
    signed_out(page)
    shoot(page, screenshot_dir, "sign-in")

    # (2) Refused: no token, a wrong one, a collector's, an exporter's.
    page.get_by_test_id("sign-in-submit").click()
    expect(page.get_by_test_id("sign-in-error")).to_contain_text("Type or paste your writer token")
    refused(page, "not-a-token-of-anyone-at-all", "That token is not known")
    refused(page, COLLECTOR_TOKEN, "collector's token")
    expect(page.get_by_test_id("sign-in-error")).to_contain_text("submits examples for other writers")
    refused(page, EXPORTER_TOKEN, "exporter's token")
    shoot(page, screenshot_dir, "refused")

    # (3) Signed in as Ana: only the open rounds, the token in this tab's sessionStorage, no cookie.
    sign_in(page, WRITER_TOKEN)
    expect(page.get_by_test_id("workspace")).to_be_visible()
    expect(page.get_by_test_id("sign-in")).to_be_hidden()
    expect(page.get_by_test_id("writer-who")).to_have_text(f"Signed in as {WRITER_NAME}")
    assert page.evaluate(f"() => window.sessionStorage.getItem('{TOKEN_KEY}')") == WRITER_TOKEN
    assert browser_context.cookies() == []
    options = page.locator("#round-select option")
    expect(options).to_have_count(2)
    assert sorted(int(v) for v in options.evaluate_all("os => os.map(o => o.value)")) == sorted(
        [sentiment, nli]
    )

    # (4) The sentiment round: one text, the round's labels, nothing of Bo's.
    pick_round(page, sentiment)
    assert field_labels(page) == ["Text"]
    assert page.locator("#inputs textarea").count() == 1
    assert [page.get_by_test_id(f"label-{x}").get_attribute("value") for x in (POS, NEG, NEU)] == [
        POS,
        NEG,
        NEU,
    ]
    expect(page.get_by_test_id("round-facts")).to_contain_text("positive, negative, neutral")
    expect(page.get_by_test_id("round-facts")).to_contain_text("Reads at most 128 tokens")
    expect(page.get_by_test_id("mine-empty")).to_be_visible()
    assert stat(page, "submitted") == "0" and stat(page, "mer") == "—"

    # (5) Asking about nothing: the field is named, and marked.
    ask(page)
    assert re.search(r"^Text: Text must not be empty", form_error(page)), form_error(page)
    expect(page.get_by_test_id("error-text")).to_be_visible()
    expect(page.get_by_test_id("input-text")).to_have_attribute("aria-invalid", "true")

    # (6) Ask the model: bars, and whether it is fooled, which follows the label picked.
    page.get_by_test_id("input-text").fill(ANA_FOOLS)
    choose(page, POS)
    ask(page)
    expect(page.get_by_test_id("form-error")).to_be_hidden()
    expect(page.get_by_test_id("input-text")).not_to_have_attribute("aria-invalid", "true")
    asked = api(
        live, "POST", f"/api/rounds/{sentiment}/predict", token=WRITER_TOKEN, json={"text": ANA_FOOLS}
    )
    expect(page.get_by_test_id("bars").locator("li")).to_have_count(3)
    check_bars(page, [POS, NEG, NEU], asked["probabilities"], NEU)
    verdict = page.get_by_test_id("verdict")
    expect(verdict).to_have_attribute("data-fooled", "true")
    expect(verdict).to_contain_text("The model says neutral")
    expect(verdict).to_contain_text("the model is fooled")
    assert "your label" in bars(page)[POS]["note"]
    choose(page, NEU)
    expect(verdict).to_have_attribute("data-fooled", "false")
    expect(verdict).to_contain_text("agrees with your label")
    choose(page, POS)
    expect(verdict).to_have_attribute("data-fooled", "true")
    page.get_by_test_id("input-text").fill(ANA_FOOLS + " Again.")
    expect(page.get_by_test_id("answer-stale")).to_be_visible()
    page.get_by_test_id("input-text").fill(ANA_FOOLS)
    expect(page.get_by_test_id("answer-stale")).to_be_hidden()
    shoot(page, screenshot_dir, "asked")

    # (7) Submit it, with why the model is wrong: fooled, and in "My examples" at once.
    page.get_by_test_id("rationale").fill(ANA_RATIONALE)
    submit(page)
    expect(page.get_by_test_id("answer-title")).to_have_text("Submitted")
    expect(verdict).to_contain_text("you fooled the model")
    expect(page.get_by_test_id("input-text")).to_have_value("")
    expect(page.get_by_test_id("rationale")).to_have_value("")
    expect(page.get_by_test_id("mine-item")).to_have_count(1)
    (first,) = mine_items(page)
    assert first["status"] in ("queued", "in_validation") and first["fooled"] == "fooled the model"
    assert ANA_FOOLS in first["text"] and "Your label: positive" in first["text"]
    assert stat(page, "submitted") == "1" and stat(page, "mer") == "100.0%" and stat(page, "vmer") == "0.0%"
    stored = api(live, "GET", f"/api/candidates/{first['id']}", token=WRITER_TOKEN)
    assert (stored["inputs"], stored["writer_label"], stored["fooled"]) == ({"text": ANA_FOOLS}, POS, True)
    assert stored["rationale"] == ANA_RATIONALE
    assert f"Why the model is wrong: {ANA_RATIONALE}" in first["text"]

    # (8) An example the model gets right; and one without a label.
    page.get_by_test_id("input-text").fill(ANA_PLAIN)
    submit(page)
    assert form_error(page) == "Writer label: Pick your label: positive, negative, neutral."
    expect(page.get_by_test_id("labels")).to_have_attribute("aria-invalid", "true")
    choose(page, NEU)
    submit(page)
    expect(verdict).to_have_attribute("data-fooled", "false")
    expect(verdict).to_contain_text("not fooled")
    expect(page.get_by_test_id("mine-item")).to_have_count(2)
    assert mine_items(page)[0]["status"] == "not_fooled"
    assert mine_items(page)[0]["status_text"] == "did not fool the model"
    assert stat(page, "mer") == "50.0%"

    # (9) Two annotators validate it in the real Label Studio: accepted. Refresh shows it, and the
    # VMER follows.
    wait_for(
        "the fooled example in Label Studio",
        lambda: api(live, "GET", f"/api/candidates/{first['id']}")["status"] == "in_validation",
    )
    task_id = api(live, "GET", f"/api/candidates/{first['id']}")["label_studio_task_id"]
    for annotator in label_studio_annotators[:2]:
        label_studio_server.annotate(task_id, annotator.id, POS)
    wait_verified(live.call, sentiment)
    assert api(live, "GET", f"/api/candidates/{first['id']}")["status"] == "accepted"
    page.get_by_test_id("mine-reload").click()
    expect(page.locator(f'[data-candidate="{first["id"]}"] [data-testid="mine-status"]')).to_have_text(
        "accepted"
    )
    own = api(live, "GET", f"/api/rounds/{sentiment}/my-candidates", token=WRITER_TOKEN)
    assert (own["total"], own["mer"], own["vmer"]) == (2, 0.5, 0.5)
    assert (stat(page, "submitted"), stat(page, "fooled"), stat(page, "accepted")) == ("2", "1", "1")
    assert (stat(page, "mer"), stat(page, "vmer")) == (percent(own["mer"]), percent(own["vmer"]))
    # Bo's examples in the same round are nowhere on Ana's page.
    page_text = page.locator("body").inner_text()
    assert all(text not in page_text for text in BO_TEXTS)
    assert {item["id"] for item in mine_items(page)} == {c["id"] for c in own["candidates"]}
    # The next example, asked about: the picture of the page in docs/writer_page.md.
    page.get_by_test_id("input-text").fill(ANA_NEXT)
    choose(page, NEG)
    ask(page)
    expect(verdict).to_have_attribute("data-fooled", "true")
    shoot(page, screenshot_dir, "desktop", doc="writer-page-desktop.png")
    page.get_by_test_id("input-text").fill("")
    # Twenty at a time, the newest first; the older ones on demand.
    batch = [{"text": f"Bus {i} leaves at {i} past the hour.", "writer_label": NEU} for i in range(19)]
    api(
        live,
        "POST",
        f"/api/rounds/{sentiment}/candidates/batch",
        token=WRITER_TOKEN,
        json={"candidates": batch},
    )
    page.get_by_test_id("mine-reload").click()
    expect(page.get_by_test_id("stat-submitted")).to_have_text("21")
    expect(page.get_by_test_id("mine-item")).to_have_count(20)
    assert first["id"] not in {item["id"] for item in mine_items(page)}
    page.get_by_test_id("mine-more").click()
    expect(page.get_by_test_id("mine-item")).to_have_count(21)
    expect(page.get_by_test_id("mine-more")).to_be_hidden()
    assert mine_items(page)[-1]["id"] == first["id"]

    # (10) Too long: 413, said as such.
    too_long = "a" * (live.services.settings.max_text_chars + 1)
    page.get_by_test_id("input-text").fill(too_long)
    ask(page)
    assert form_error(page) == f"Text: Too long: Text must be at most {len(too_long) - 1} characters."
    # Within the characters but past what the model reads (the tiny model: 128 tokens): 422, beside
    # the box, saying why.
    page.get_by_test_id("input-text").fill(" ".join(["good"] * 130))
    ask(page)
    assert form_error(page) == (
        "Text: This example is 132 tokens long and the round's model reads at most 128: shorten it, "
        "since the model would judge only its beginning."
    ), form_error(page)
    expect(page.get_by_test_id("input-text")).to_have_attribute("aria-invalid", "true")
    page.get_by_test_id("input-text").fill("")

    # (11) The NLI round: the premise, then the hypothesis; its own labels; its own examples.
    pick_round(page, nli)
    assert field_labels(page) == ["Premise", "Hypothesis"]
    assert [t.get_attribute("name") for t in page.locator("#inputs textarea").all()] == [
        "premise",
        "hypothesis",
    ]
    assert page.locator("#label-choices input").evaluate_all("xs => xs.map(x => x.value)") == list(NLI_LABELS)
    expect(page.get_by_test_id("round-facts")).to_contain_text(
        "Reads at most 128 tokens (Premise and Hypothesis together)"
    )
    expect(page.get_by_test_id("mine-empty")).to_be_visible()
    page.get_by_test_id("input-premise").fill(PREMISE)
    ask(page)
    assert form_error(page).startswith("Hypothesis: Hypothesis must not be empty"), form_error(page)
    page.get_by_test_id("input-hypothesis").fill(HYPOTHESIS)
    choose(page, "contradiction")
    ask(page)
    pair = {"premise": PREMISE, "hypothesis": HYPOTHESIS}
    asked = api(live, "POST", f"/api/rounds/{nli}/predict", token=WRITER_TOKEN, json={"inputs": pair})
    expect(page.get_by_test_id("bars").locator("li")).to_have_count(3)
    check_bars(page, list(NLI_LABELS), asked["probabilities"], "neutral")
    expect(verdict).to_have_attribute("data-fooled", "true")
    submit(page)
    expect(page.get_by_test_id("mine-item")).to_have_count(1)
    (nli_item,) = mine_items(page)
    assert PREMISE in nli_item["text"] and HYPOTHESIS in nli_item["text"]
    assert nli_item["text"].index(PREMISE) < nli_item["text"].index(HYPOTHESIS)
    shoot(page, screenshot_dir, "nli")

    # (12) The round closes while Ana writes: 409, said as such, and it leaves the list.
    pick_round(page, sentiment)
    api(live, "POST", f"/api/rounds/{sentiment}/close")
    page.get_by_test_id("input-text").fill("One more, too late.")
    ask(page)
    expect(page.get_by_test_id("notice")).to_contain_text("This round is closed")
    expect(options).to_have_count(1)
    assert page.get_by_test_id("round-select").input_value() == str(nli)

    # (13) The token stays for the tab (a reload keeps Ana signed in); sign-out forgets it and
    # leaves nothing of hers on the page.
    page.reload()
    expect(page.get_by_test_id("workspace")).to_be_visible()
    expect(page.get_by_test_id("writer-who")).to_have_text(f"Signed in as {WRITER_NAME}")
    page.get_by_test_id("sign-out").click()
    signed_out(page)
    assert PREMISE not in page.locator("body").inner_text()
    page.reload()
    signed_out(page)

    # (14) Bo, in a browser of his own, sees his examples and none of Ana's.
    other = browser.new_context()
    try:
        bo = other.new_page()
        bo.goto(base + "/write")
        sign_in(bo, OTHER_WRITER_TOKEN)
        expect(bo.get_by_test_id("workspace")).to_be_visible()
        expect(bo.locator("#round-select option")).to_have_count(1)  # the sentiment round closed
        bo.get_by_test_id("round-select").select_option(str(nli))
        expect(bo.get_by_test_id("mine-empty")).to_be_visible()
        assert PREMISE not in bo.locator("body").inner_text()
    finally:
        other.close()

    assert seen["outside"] == [], seen["outside"]
    assert seen["errors"] == [], seen["errors"]
    assert seen["csp"] == [], seen["csp"]


def test_a_writer_on_a_phone_never_scrolls_sideways(
    live_service: LiveService, rounds: dict[str, int], browser: Browser, screenshot_dir: Path
) -> None:
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        seen = watch(context, page)
        page.goto(live_service.url + "/write")
        no_sideways_scroll(page, "sign-in")
        shoot(page, screenshot_dir, "phone-sign-in")
        sign_in(page, WRITER_TOKEN)
        expect(page.get_by_test_id("workspace")).to_be_visible()
        pick_round(page, rounds["sentiment"])
        no_sideways_scroll(page, "round picked")
        long_word = "Sooooo" + "o" * 120 + " good, said nobody."  # one long unbroken word
        page.get_by_test_id("input-text").fill(long_word)
        choose(page, POS)
        page.get_by_test_id("rationale").fill(ANA_RATIONALE)
        ask(page)
        expect(page.get_by_test_id("bars").locator("li")).to_have_count(3)
        no_sideways_scroll(page, "asked")
        submit(page)
        expect(page.get_by_test_id("mine-item")).to_have_count(1)
        page.get_by_test_id("input-text").fill(ANA_FOOLS)
        choose(page, POS)
        ask(page)
        expect(page.get_by_test_id("verdict")).to_have_attribute("data-fooled", "true")
        no_sideways_scroll(page, "submitted")
        # Every control is big enough to touch.
        small = page.evaluate(
            """() => [...document.querySelectorAll('button, select, textarea, .choices label')]
                  .filter(e => e.offsetParent !== null && e.getBoundingClientRect().height < 36)
                  .map(e => e.outerHTML.slice(0, 60))"""
        )
        assert small == []
        shoot(page, screenshot_dir, "phone", doc="writer-page-phone.png")
        pick_round(page, rounds["nli"])
        no_sideways_scroll(page, "nli")
        assert seen["outside"] == [] and seen["errors"] == [] and seen["csp"] == [], seen
    finally:
        context.close()


@pytest.fixture
def scoring_limited(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> Iterator[LiveService]:
    """The service with a scoring budget of 3 units a minute per token."""
    with running_service(
        database_url, tmp_path / "data", label_studio_server, tiny_model_dir,
        start_background=False, scoring_limit="3/minute",
    ) as live:  # fmt: skip
        yield live


def test_a_spent_scoring_budget_says_when_to_try_again(
    scoring_limited: LiveService, browser_context: BrowserContext, page: Page
) -> None:
    live = scoring_limited
    round_id = create_round(live, "A busy round")
    page.goto(live.url + "/write")
    sign_in(page, WRITER_TOKEN)
    pick_round(page, round_id)
    page.get_by_test_id("input-text").fill("Short and sweet.")  # one unit
    message: Locator = page.get_by_test_id("form-error")
    for _ in range(3):
        ask(page)
        expect(message).to_be_hidden()
    ask(page)
    said = form_error(page)
    match = re.fullmatch(
        r"Text: You have asked the model a lot in the last minute\. Try again in (\d+) seconds?\.", said
    )
    assert match is not None, said
    assert 1 <= int(match.group(1)) <= 60
