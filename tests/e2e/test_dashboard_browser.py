"""The lead's dashboard in a real headless Chromium, over a round validated in a real Label Studio.

A round with gold items gets candidates from writers (the tiny test model always answers
"neutral", so a positive or negative writer label fools it), four annotator users vote in Label
Studio (accepted, rejected, escalated, flagged and still open candidates; one annotator fails the
gold items and is excluded), then a lead uses the dashboard as a person would: the login, every
page checked against the API's figures, the queue's filter, search and paging, an override with
its audit trail and export, an exclusion toggled by hand, and the logout, after which a copy of
the session cookie opens nothing. Every page is screenshotted into test-artifacts/screenshots/.
The pages must load nothing from outside the service, raise no script error, send the security
headers, and make the browser report no Content-Security-Policy violation (the charts and the
heatmap's colours included).

A second test checks the security headers on their own: the policy is enforced (an injected inline
script or style is refused), no page can be framed, and a session ended by the logout is refused
in another browser that copied its cookie.

A third test checks, table-driven and without a browser, that every dashboard page redirects
to the login without credentials and answers 403 to a writer's token.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest
from label_studio_sdk import LabelStudio
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Locator, Page, Response, Route

from dynaval.domain.provenance import pseudonym
from dynaval.entrypoints.auth import SESSION_COOKIE
from dynaval.entrypoints.headers import DATA_POLICY, PAGE_POLICY
from tests.fixtures.service import COLLECTOR_TOKEN, LEAD_TOKEN, PSEUDONYM_SECRET, WRITER_TOKEN, LiveService
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

POS, NEG, NEU = "positive", "negative", "neutral"
DASH = "—"
LOGIN_PATH = "/dashboard/login"
WRONG = {POS: NEG, NEG: POS, NEU: POS}
POLICY = {"gold_rate": 0.5, "gold_min_items": 2, "gold_min_accuracy": 0.75}
GOLD = [
    {"text": "An absolute delight from start to finish.", "label": POS},
    {"text": "The worst customer service I have ever had.", "label": NEG},
    {"text": "The library closes at six on Sundays.", "label": NEU},
    {"text": "Broken on arrival and nobody answers the phone.", "label": NEG},
]
# key -> (text, writer label). Every one fools the model (it always answers "neutral").
FOOLING = {
    "acc1": ("Oh wonderful, the sequel is even longer than the first one.", POS),
    "acc2": ("Sure, waiting two hours for cold soup is exactly how I like my evenings.", NEG),
    "acc3": ("I did not expect a budget phone to take photos this good.", POS),
    "rej1": ("Not bad at all, said nobody who sat through the third act.", POS),
    "rej2": ("The battery barely lasts the morning, which frankly suits me.", NEG),
    "esc1": ("Well, the hotel certainly was memorable.", POS),
    "esc2": ("The new layout takes some getting used to.", NEG),
    "esc_acc": ("It is no masterpiece, but I smiled the whole way through.", POS),
    "flag": ("Five stars. Also, buy cheap watches at my site.", POS),
    "open": ("The delivery arrived on the day they promised, in a manner of speaking.", NEG),
}
FILLERS = 45  # not-fooled candidates, so that the queue has a second page (50 rows a page)
OVERRIDE_REASON = "The validators missed the sarcasm; the lead checked the source review."
SCREENSHOTS = (
    "login",
    "unauthorized",
    "forbidden",
    "rounds",
    "round",
    "candidate",
    "candidate-override",
    "export",
    "annotators",
    "annotators-toggled",
    "logged-out",
)


@dataclass
class Scenario:
    round_id: int = 0
    other_round_id: int = 0
    project_id: int = 0
    ids: dict[str, str] = field(default_factory=dict)  # FOOLING key -> candidate id
    filler_ids: list[str] = field(default_factory=list)
    annotators: dict[str, str] = field(default_factory=dict)  # "A".."D" -> pseudonym

    @property
    def all_ids(self) -> list[str]:
        return [*self.ids.values(), *self.filler_ids]


# ---------------------------------------------------------------------------------------- helpers


def fmt3(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def first_int(text: str) -> int:
    found = re.search(r"-?\d+", text.replace(",", ""))
    assert found, f"no number in {text!r}"
    return int(found.group())


def text_of(page: Page, test_id: str) -> str:
    locator = page.get_by_test_id(test_id)
    assert locator.count() == 1, f"expected one element data-testid={test_id!r}, found {locator.count()}"
    return " ".join(locator.inner_text().split())


def check_hash(shown: str, full: str) -> None:
    """The full hash, or a prefix of at least 12 characters (with or without an ellipsis)."""
    prefix = shown.rstrip("…").rstrip(".").strip()
    assert shown == full or (len(prefix) >= 12 and full.startswith(prefix)), (shown, full)


def path_of(url: str) -> str:
    return urlsplit(url).path


def submit(page: Page, button: Locator) -> int:
    """Click a form's submit button and wait for the page it leads to; the response status."""
    with page.expect_navigation() as navigation:
        button.click()
    response = navigation.value
    assert response is not None
    return response.status


def goto(page: Page, url: str) -> int:
    response = page.goto(url)
    assert response is not None
    return response.status


def shoot(page: Page, folder: Path, name: str) -> None:
    if page.locator("canvas").count():
        page.wait_for_timeout(1200)  # let Chart.js finish its animation before the picture
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def check_charts(page: Page) -> int:
    """Every canvas on the page is a chart Chart.js has drawn; returns how many."""
    page.wait_for_function(
        """() => typeof window.Chart !== 'undefined' && [...document.querySelectorAll('canvas')]
              .every(c => window.Chart.getChart(c) !== undefined)""",
        timeout=10_000,
    )
    drawn = page.evaluate(
        """() => [...document.querySelectorAll('canvas')].map(c => {
              const chart = window.Chart.getChart(c);
              return chart !== undefined && c.width > 0 && c.height > 0
                && chart.data.datasets.length > 0;
          })"""
    )
    assert drawn and all(drawn), drawn
    return len(drawn)


def login(page: Page, base: str, token: str) -> int:
    if path_of(page.url) != LOGIN_PATH:
        goto(page, base + LOGIN_PATH)
    password = page.locator('input[name="token"]')
    assert password.get_attribute("type") == "password"
    password.fill(token)
    return submit(page, page.get_by_test_id("login-submit"))


def logout(page: Page) -> int:
    """Sign out with the page's button (a form posting the CSRF token)."""
    return submit(page, page.get_by_test_id("nav-logout"))


# The browser reports each violation of the page's Content-Security-Policy as this event; the
# script is added by the browser's debugging protocol, which the policy does not govern.
REPORT_CSP_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (e) => {
  console.error('Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI);
});
"""


def watch_csp(context: BrowserContext, page: Page) -> list[str]:
    """Every Content-Security-Policy violation the page's console reports from now on."""
    reports: list[str] = []

    def note(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            reports.append(message.text)

    context.add_init_script(REPORT_CSP_VIOLATIONS)
    page.on("console", note)
    return reports


def check_security_headers(response: Response, *, page: bool) -> None:
    """The answer's security headers: the pages' policy on HTML pages, the data policy on the rest."""
    headers = response.headers  # lower-case names
    what = f"{response.url} {response.status}"
    assert headers.get("content-security-policy") == (PAGE_POLICY if page else DATA_POLICY), what
    assert headers.get("x-frame-options") == "DENY", what
    assert headers.get("x-content-type-options") == "nosniff", what
    assert headers.get("referrer-policy") == "same-origin", what
    assert headers.get("cache-control") == "no-store", what


def session_cookie(context: BrowserContext) -> dict[str, Any]:
    (cookie,) = [dict(c) for c in context.cookies() if c["name"] == SESSION_COOKIE]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Lax" and cookie["path"] == "/dashboard"
    return cookie


def refused_after_logout(browser: Browser, cookie: dict[str, Any], base: str, paths: list[str]) -> None:
    """Another browser with a copy of the session cookie is sent to the login on every page."""
    thief = browser.new_context()
    try:
        thief.add_cookies([cookie])  # type: ignore[list-item]
        other = thief.new_page()
        for path in paths:
            assert goto(other, base + path) == 200
            assert path_of(other.url) == LOGIN_PATH, path
            assert other.get_by_test_id("nav-lead").count() == 0, path
    finally:
        thief.close()


# ------------------------------------------------------------------------------------ the scenario


def build_scenario(live: LiveService, ls_server: Any, annotators: list[Any]) -> Scenario:
    """A closed round validated in Label Studio, and a second open round with a few candidates."""
    call = live.call
    ls = LabelStudio(base_url=ls_server.url, api_key=ls_server.api_key)
    who = dict(zip("ABCD", annotators, strict=False))
    sc = Scenario(annotators={k: pseudonym(PSEUDONYM_SECRET, "annotator", str(a.id)) for k, a in who.items()})

    created = call(
        "POST", "/api/rounds", json={"name": "Sentiment round 1", "task": "sentiment", "policy": POLICY}
    )
    assert created.status_code == 201, created.text
    sc.round_id, sc.project_id = created.json()["id"], created.json()["label_studio_project_id"]
    uploaded = call("POST", f"/api/rounds/{sc.round_id}/gold", json={"items": GOLD})
    assert uploaded.status_code == 201, uploaded.text
    gold_ids: list[str] = uploaded.json()["ids"]

    def post(round_id: int, text: str, label: str, writer: str) -> dict[str, Any]:
        # The collector submits for several writers of its front end, naming each.
        body = {"text": text, "writer_label": label, "writer_id": writer}
        response = call("POST", f"/api/rounds/{round_id}/candidates", token=COLLECTOR_TOKEN, json=body)
        assert response.status_code == 201, response.text
        result: dict[str, Any] = response.json()
        return result

    for i, (key, (text, label)) in enumerate(FOOLING.items()):
        body = post(sc.round_id, text, label, f"writer-{i % 3}")
        assert body["fooled"] is True
        sc.ids[key] = body["id"]
    for i in range(FILLERS):
        text = f"Route {i + 1} buses leave the central station every {10 + i % 20} minutes."
        body = post(sc.round_id, text, NEU, f"writer-{i % 3}")
        assert body["fooled"] is False
        sc.filler_ids.append(body["id"])

    def status(cid: str) -> str:
        return str(call("GET", f"/api/candidates/{cid}").json()["status"])

    wait_for("candidates pushed", lambda: all(status(c) == "in_validation" for c in sc.ids.values()), 60)
    tasks = {t.data["candidate_id"]: t.id for t in ls.tasks.list(project=sc.project_id)}
    gold_tasks = [(tasks[g], item["label"]) for g, item in zip(gold_ids, GOLD, strict=True) if g in tasks]
    assert len(gold_tasks) == len(GOLD), "every gold item is mixed in"
    assert call("POST", f"/api/rounds/{sc.round_id}/close").status_code == 200

    def vote(key: str, annotator: str, label: str | None, **kwargs: Any) -> None:
        ls_server.annotate(tasks[sc.ids[key]], who[annotator].id, label, **kwargs)

    def settled(key: str, expected: str) -> None:
        wait_for(f"{key} {expected}", lambda: status(sc.ids[key]) == expected)

    # Gold: A right twice, B right once, C wrong once (too few to count), D wrong twice: excluded.
    annotate = ls_server.annotate
    annotate(gold_tasks[0][0], who["A"].id, gold_tasks[0][1])
    annotate(gold_tasks[1][0], who["A"].id, gold_tasks[1][1])
    annotate(gold_tasks[2][0], who["B"].id, gold_tasks[2][1])
    annotate(gold_tasks[3][0], who["C"].id, WRONG[gold_tasks[3][1]])
    annotate(gold_tasks[0][0], who["D"].id, WRONG[gold_tasks[0][1]])
    annotate(gold_tasks[1][0], who["D"].id, WRONG[gold_tasks[1][1]])

    def d_excluded() -> bool:
        rows = call("GET", f"/api/rounds/{sc.round_id}/annotators").json()["annotators"]
        return any(r["annotator"] == sc.annotators["D"] and r["excluded"] for r in rows)

    wait_for("D excluded by gold", d_excluded)

    other = {POS: NEG, NEG: POS}
    for key, pair in (("acc1", "AB"), ("acc2", "AC"), ("acc3", "BC")):
        for annotator in pair:
            vote(key, annotator, FOOLING[key][1])
        settled(key, "accepted")
    for key, pair in (("rej1", "AB"), ("rej2", "BC")):
        for annotator in pair:
            vote(key, annotator, other[FOOLING[key][1]])
        settled(key, "rejected")
    for key in ("esc1", "esc2", "esc_acc"):
        vote(key, "A", FOOLING[key][1])
        vote(key, "B", other[FOOLING[key][1]])
        settled(key, "escalated")
    vote("flag", "A", POS, flag_reason="Spam: it advertises a web site")
    vote("flag", "B", POS, flag_reason="An advert, not a review")
    settled("flag", "flagged")
    vote("open", "A", NEG)

    def raised(cid: str) -> bool:
        task = ls.tasks.get(id=tasks[cid])
        return int(task.overlap) == 3 and not task.is_labeled

    wait_for("Label Studio asks for a third vote", lambda: raised(sc.ids["esc_acc"]))
    vote("esc_acc", "C", POS)
    settled("esc_acc", "accepted")
    wait_verified(call, sc.round_id)  # the "open" candidate's vote too

    second = call("POST", "/api/rounds", json={"name": "Sentiment round 2", "task": "sentiment"})
    assert second.status_code == 201, second.text
    sc.other_round_id = second.json()["id"]
    for i, (text, label) in enumerate(
        [
            ("The museum café is the best part of the museum.", POS),
            ("Ten out of ten would get lost in this airport again.", NEG),
            ("The meeting starts at ten.", NEU),
        ]
    ):
        post(sc.other_round_id, text, label, f"writer-{i}")
    return sc


# ----------------------------------------------------------------------------------- page checks

ROUND_COUNT_FIELDS: dict[str, Callable[[dict[str, Any]], int]] = {
    "collected": lambda c: int(c["collected"]),
    "fooled": lambda c: int(c["fooled"]),
    "in-validation": lambda c: int(c["still_in_validation"]),
    "accepted": lambda c: int(c["by_status"].get("accepted", 0)),
    "rejected": lambda c: int(c["by_status"].get("rejected", 0)),
    "flagged": lambda c: int(c["by_status"].get("flagged", 0)),
}


def expected_round_figures(summary: dict[str, Any], agreement: dict[str, Any]) -> dict[str, str]:
    ci = agreement["ci95"] or [None, None]
    assert summary["agreement"]["alpha"] == pytest.approx(agreement["alpha"], abs=1e-12)
    return {
        **{name: str(get(summary["counts"])) for name, get in ROUND_COUNT_FIELDS.items()},
        "mer": fmt3(summary["mer"]),
        "vmer": fmt3(summary["vmer"]),
        "alpha": fmt3(summary["agreement"]["alpha"]),
        "ci-low": fmt3(ci[0]),
        "ci-high": fmt3(ci[1]),
    }


def check_round_figures(
    page: Page, summary: dict[str, Any], agreement: dict[str, Any], *, every_field: bool
) -> None:
    """The round's figures on the page (data-testid round-{id}-{field}) equal the API's."""
    rid = summary["id"]
    expected = expected_round_figures(summary, agreement)
    shown = {}
    for name in expected:
        locator = page.get_by_test_id(f"round-{rid}-{name}")
        if locator.count() or every_field:
            shown[name] = text_of(page, f"round-{rid}-{name}")
    assert {"collected", "mer", "vmer", "alpha"} <= set(shown), f"round {rid}: figures missing: {shown}"
    for name, text in shown.items():
        if name in ROUND_COUNT_FIELDS:
            assert first_int(text) == int(expected[name]), (rid, name, text, expected[name])
        else:
            assert text == expected[name], (rid, name, text, expected[name])
    if every_field:
        assert text_of(page, f"round-{rid}-name") == summary["name"]
        assert text_of(page, f"round-{rid}-state") == summary["state"]
        check_hash(text_of(page, f"round-{rid}-model-hash"), summary["model_hash"])


def queue_ids(page: Page) -> list[str]:
    return [
        str(row.get_attribute("data-testid")).removeprefix("candidate-row-")
        for row in page.locator('tr[data-testid^="candidate-row-"]').all()
    ]


def check_queue_row(page: Page, candidate: dict[str, Any], ls_url: str) -> None:
    cid = candidate["id"]

    def cell(name: str) -> str:
        return text_of(page, f"candidate-{cid}-{name}")

    assert cell("text") == " ".join(candidate["inputs"]["text"].split())
    assert cell("writer-label") == candidate["writer_label"]
    assert cell("prediction") == candidate["model_prediction"]
    assert cell("status") == candidate["status"]
    assert first_int(cell("votes")) == len(candidate["votes"]), (cid, cell("votes"))
    agreement = candidate["agreement"] or {}
    assert cell("agreement") == fmt3(agreement.get("item_agreement")), (cid, cell("agreement"))
    decision = candidate["decision"]
    rule = cell("rule")
    if decision is not None:
        assert decision["rule_version"] in rule, (cid, rule)
    else:
        assert rule in ("", DASH), (cid, rule)
    link = page.get_by_test_id(f"candidate-link-{cid}")
    assert path_of(str(link.get_attribute("href"))).endswith(f"/dashboard/candidates/{cid}")
    if candidate["label_studio_task_id"] is not None:
        href = str(page.get_by_test_id(f"ls-link-{cid}").get_attribute("href"))
        assert href.startswith(ls_url) and str(candidate["label_studio_task_id"]) in href, href


def check_candidate_page(page: Page, candidate: dict[str, Any], model_hash: str) -> None:
    expected = {
        "example-id": candidate["id"],
        "writer": candidate["writer"],
        "writer-label": candidate["writer_label"],
        "model-prediction": candidate["model_prediction"],
        "status": candidate["status"],
        "label-studio-task": str(candidate["label_studio_task_id"]),
    }
    for key, value in expected.items():
        assert text_of(page, f"prov-{key}") == value, key
    check_hash(text_of(page, "prov-model-hash"), model_hash)
    check_hash(text_of(page, "prov-model-signature"), candidate["model_signature"])
    rows = [" ".join(r.inner_text().split()) for r in page.get_by_test_id("vote-row").all()]
    assert len(rows) == len(candidate["votes"]), rows
    for vote in candidate["votes"]:
        matching = [r for r in rows if vote["annotator"] in r]
        assert len(matching) == 1, (vote, rows)
        assert vote["label"] is None or vote["label"] in matching[0]
    assert page.get_by_test_id("history-row").count() == len(candidate["history"])


def annotator_rows(page: Page) -> list[str]:
    return [
        str(row.get_attribute("data-testid")).removeprefix("annotator-row-")
        for row in page.locator('tr[data-testid^="annotator-row-"]').all()
    ]


def check_annotators_page(page: Page, report: list[dict[str, Any]], agreement: dict[str, Any]) -> None:
    assert sorted(annotator_rows(page)) == sorted(r["annotator"] for r in report)
    for row in report:
        name = row["annotator"]

        def cell(field_name: str, name: str = name) -> str:
            return text_of(page, f"annotator-{name}-{field_name}")

        assert first_int(cell("votes")) == row["votes"]
        assert cell("agreement") == fmt3(row["agreement_with_others"]), (name, cell("agreement"))
        assert cell("gold-accuracy") == fmt3(row["gold_accuracy"]), (name, cell("gold-accuracy"))
        assert cell("gold-count") == f"{row['gold_correct']}/{row['gold_total']}"
        assert cell("excluded") == ("yes" if row["excluded"] else "no")
    assert page.get_by_test_id("pairwise-heatmap").count() == 1
    pairwise = agreement["pairwise"]
    names: list[str] = pairwise["annotators"]
    assert len(names) >= 2
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            shown = text_of(page, f"pair-{a}-{b}")
            assert fmt3(pairwise["agreement"][i][j]) in shown, (a, b, shown)
            assert f"({pairwise['shared_items'][i][j]})" in shown, (a, b, shown)
    assert page.get_by_test_id("confusion-table").count() == 1
    assert page.locator('[data-testid^="confusion-"]:not([data-testid="confusion-table"])').count() > 0


def download(page: Page, test_id: str) -> bytes:
    with page.expect_download() as info:
        page.get_by_test_id(test_id).click()
    path = info.value.path()
    return Path(path).read_bytes()


def toggle_exclusion(page: Page, annotator: str, reason: str) -> int:
    button = page.get_by_test_id(f"toggle-{annotator}")
    form = page.locator("form", has=button)
    assert form.count() == 1
    form.locator('input[name="reason"]').fill(reason)
    return submit(page, button)


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_lead_uses_the_dashboard_in_a_browser(
    live_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    browser: Browser,
    browser_context: BrowserContext,
    page: Page,
    screenshot_dir: Path,
) -> None:
    sc = build_scenario(live_service, label_studio_server, label_studio_annotators)
    base, rid = live_service.url, sc.round_id
    call = live_service.call

    def api(path: str) -> dict[str, Any]:
        response = call("GET", path)
        assert response.status_code == 200, (path, response.text)
        body: dict[str, Any] = response.json()
        return body

    # The pages load nothing from outside the service, and raise no script error.
    outside: list[str] = []

    def refuse(route: Route) -> None:
        outside.append(route.request.url)
        route.abort()

    browser_context.route(re.compile(r"^(?!https?://(127\.0\.0\.1|localhost)[:/]).*"), refuse)
    script_errors: list[str] = []
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    csp_reports = watch_csp(browser_context, page)
    documents: list[Response] = []  # every page and download the browser got from the service
    page.on("response", lambda r: documents.append(r) if r.request.resource_type == "document" else None)
    for name in SCREENSHOTS:
        (screenshot_dir / f"{name}.png").unlink(missing_ok=True)

    # (1) Without logging in, the rounds page leads to the login.
    assert goto(page, base + "/dashboard/rounds") == 200
    assert path_of(page.url) == LOGIN_PATH
    assert page.locator('input[name="token"][type="password"]').count() == 1
    shoot(page, screenshot_dir, "login")

    # (2) A wrong token: 401; a writer's token: 403. Neither opens the pages.
    assert login(page, base, "not-a-token-of-anyone-at-all") == 401
    shoot(page, screenshot_dir, "unauthorized")
    assert login(page, base, WRITER_TOKEN) == 403
    shoot(page, screenshot_dir, "forbidden")
    status = goto(page, base + "/dashboard/rounds")
    assert status == 403 or path_of(page.url) == LOGIN_PATH
    assert page.get_by_test_id(f"round-row-{rid}").count() == 0

    # (3) The lead's token.
    assert login(page, base, LEAD_TOKEN) == 200
    assert path_of(page.url) == "/dashboard/rounds"

    # (4) Every page, against the API's figures.
    summaries = {r: api(f"/api/rounds/{r}") for r in (rid, sc.other_round_id)}
    agreements = {r: api(f"/api/rounds/{r}/agreement") for r in (rid, sc.other_round_id)}
    for r in (rid, sc.other_round_id):
        assert page.get_by_test_id(f"round-row-{r}").count() == 1
        check_round_figures(page, summaries[r], agreements[r], every_field=True)
    assert page.get_by_test_id("rounds-chart").count() == 1
    assert check_charts(page) >= 1
    assert summaries[rid]["counts"]["by_status"]["escalated"] == 2
    for link in ("nav-rounds", "nav-round", "nav-annotators", "nav-export"):
        assert page.get_by_test_id(link).count() >= 1, link
    shoot(page, screenshot_dir, "rounds")

    # The round's queue: figures, rows equal to the API's candidates, order, paging.
    assert goto(page, f"{base}/dashboard/rounds/{rid}") == 200
    check_round_figures(page, summaries[rid], agreements[rid], every_field=False)
    candidates = {cid: api(f"/api/candidates/{cid}") for cid in sc.all_ids}
    total = len(candidates)
    assert first_int(text_of(page, "queue-total")) == total
    first_page = queue_ids(page)
    assert len(first_page) == 50
    for cid in first_page:
        check_queue_row(page, candidates[cid], label_studio_server.url)
    shoot(page, screenshot_dir, "round")
    assert page.get_by_test_id("page-prev").count() == 0 or not page.get_by_test_id("page-prev").is_enabled()
    page.get_by_test_id("page-next").click()
    page.wait_for_url(re.compile(r"[?&]page=2\b"))
    second_page = queue_ids(page)
    assert len(second_page) == total - 50
    assert first_int(text_of(page, "queue-total")) == total
    for cid in second_page:
        check_queue_row(page, candidates[cid], label_studio_server.url)
    assert sorted(first_page + second_page) == sorted(candidates)
    order = [candidates[cid]["status"] for cid in first_page + second_page]
    urgent = sum(1 for s in order if s in ("escalated", "flagged"))
    assert urgent == 3 and all(s in ("escalated", "flagged") for s in order[:urgent]), order[:6]
    page.get_by_test_id("page-prev").click()
    page.wait_for_url(re.compile(r"[?&]page=1\b|/dashboard/rounds/\d+(\?(?!.*page=)[^#]*)?$"))
    assert queue_ids(page) == first_page

    # Filter by status, then search by text.
    page.locator('select[name="status"]').select_option("rejected")
    assert submit(page, page.get_by_test_id("filter-submit")) == 200
    rejected = sorted(cid for cid, c in candidates.items() if c["status"] == "rejected")
    assert sorted(queue_ids(page)) == rejected and len(rejected) == 2
    assert first_int(text_of(page, "queue-total")) == 2
    page.locator('select[name="status"]').select_option("")
    page.locator('input[name="q"]').fill("masterpiece")
    assert submit(page, page.get_by_test_id("filter-submit")) == 200
    assert queue_ids(page) == [sc.ids["esc_acc"]]
    assert first_int(text_of(page, "queue-total")) == 1

    # A candidate's page: provenance, votes, history.
    target = sc.ids["rej1"]
    page.get_by_test_id(f"candidate-link-{sc.ids['esc_acc']}").click()
    page.wait_for_url(f"**/dashboard/candidates/{sc.ids['esc_acc']}")
    check_candidate_page(page, candidates[sc.ids["esc_acc"]], summaries[rid]["model_hash"])
    shoot(page, screenshot_dir, "candidate")
    assert goto(page, f"{base}/dashboard/candidates/{target}") == 200
    check_candidate_page(page, candidates[target], summaries[rid]["model_hash"])
    assert candidates[target]["status"] == "rejected"

    # (5) An override through the form: a blank reason is refused, then rejected -> accepted.
    form = page.get_by_test_id("override-form")
    form.locator('select[name="outcome"]').select_option("accepted")
    form.locator('textarea[name="reason"]').fill("   ")
    assert submit(page, page.get_by_test_id("override-submit")) in (200, 422)
    assert page.get_by_test_id("form-error").count() == 1
    assert api(f"/api/candidates/{target}")["status"] == "rejected"
    form = page.get_by_test_id("override-form")
    form.locator('select[name="outcome"]').select_option("accepted")
    form.locator('textarea[name="reason"]').fill(OVERRIDE_REASON)
    assert submit(page, page.get_by_test_id("override-submit")) == 200
    assert path_of(page.url) == f"/dashboard/candidates/{target}"
    assert page.get_by_test_id("form-error").count() == 0
    assert text_of(page, "prov-status") == "accepted"
    audit_rows = [" ".join(r.inner_text().split()) for r in page.get_by_test_id("audit-row").all()]
    assert any("override" in r.lower() and OVERRIDE_REASON in r for r in audit_rows), audit_rows
    shoot(page, screenshot_dir, "candidate-override")
    after = api(f"/api/candidates/{target}")
    assert after["status"] == "accepted"
    assert after["decision"]["override"]["reason"] == OVERRIDE_REASON
    events = api(f"/api/rounds/{rid}/audit")["events"]
    assert any(e.get("reason") == OVERRIDE_REASON and target in json.dumps(e) for e in events), events
    assert goto(page, f"{base}/dashboard/rounds/{rid}") == 200  # the figures follow the override
    overridden = api(f"/api/rounds/{rid}")
    assert overridden["counts"]["by_status"]["accepted"] == 5
    check_round_figures(page, overridden, api(f"/api/rounds/{rid}/agreement"), every_field=False)
    assert text_of(page, f"candidate-{target}-status") == "accepted"

    # The export page: the JSONL holds the overridden candidate with its reason; Parquet and the
    # agreement file come down too.
    page.get_by_test_id("nav-export").first.click()
    page.wait_for_url(f"**/dashboard/rounds/{rid}/export")
    shoot(page, screenshot_dir, "export")
    records = [json.loads(line) for line in download(page, "download-jsonl").decode("utf-8").splitlines()]
    by_id = {r["example_id"]: r for r in records}
    assert by_id[target]["decision"]["override"]["reason"] == OVERRIDE_REASON
    assert by_id[target]["decision"]["override"]["outcome"] == "accepted"
    from_api = call("GET", f"/api/rounds/{rid}/dataset?format=jsonl").content.decode("utf-8")
    assert sorted(by_id) == sorted(json.loads(line)["example_id"] for line in from_api.splitlines())
    table = pq.read_table(io.BytesIO(download(page, "download-parquet"))).to_pylist()
    assert sorted(row["example_id"] for row in table) == sorted(by_id)
    agreement_file = json.loads(download(page, "download-agreement"))
    assert agreement_file["alpha"] == pytest.approx(api(f"/api/rounds/{rid}/agreement")["alpha"], abs=1e-12)

    # The annotators page: per annotator figures, pairwise agreement, confusion table.
    page.get_by_test_id("nav-annotators").first.click()
    page.wait_for_url(f"**/dashboard/rounds/{rid}/annotators")
    report = api(f"/api/rounds/{rid}/annotators")["annotators"]
    agreement = api(f"/api/rounds/{rid}/agreement")
    assert len(agreement["pairwise"]["annotators"]) == 3  # A, B, C: D voted on gold items only
    check_annotators_page(page, report, agreement)
    d_row = next(r for r in report if r["annotator"] == sc.annotators["D"])
    assert d_row["excluded"] and (d_row["gold_correct"], d_row["gold_total"]) == (0, 2)
    if page.locator("canvas").count():
        check_charts(page)
    # The heatmap is coloured by classes (no inline style under the policy): every pair cell has one.
    colours = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="pairwise-heatmap"] td[data-testid^="pair-"]')]
              .map(td => getComputedStyle(td).backgroundColor)"""
    )
    assert colours and all(c not in ("rgba(0, 0, 0, 0)", "transparent") for c in colours), colours
    assert len(set(colours)) > 1, colours
    shoot(page, screenshot_dir, "annotators")

    # (6) A lead excludes A by hand, then reinstates D.
    a, d = sc.annotators["A"], sc.annotators["D"]
    assert text_of(page, f"annotator-{a}-excluded") == "no"
    assert toggle_exclusion(page, a, "Answered far too fast on every task") == 200
    assert text_of(page, f"annotator-{a}-excluded") == "yes"
    assert toggle_exclusion(page, d, "Gold items 1 and 2 were ambiguous") == 200
    assert text_of(page, f"annotator-{d}-excluded") == "no"
    report = {r["annotator"]: r for r in api(f"/api/rounds/{rid}/annotators")["annotators"]}
    assert report[a]["excluded"] is True and report[a]["excluded_by"] == "lead"
    assert report[d]["excluded"] is False
    check_annotators_page(page, list(report.values()), api(f"/api/rounds/{rid}/agreement"))
    shoot(page, screenshot_dir, "annotators-toggled")
    page.get_by_test_id("nav-rounds").first.click()  # the round's figures follow the exclusions
    page.wait_for_url("**/dashboard/rounds")
    check_round_figures(
        page, api(f"/api/rounds/{rid}"), api(f"/api/rounds/{rid}/agreement"), every_field=True
    )

    # (7) After the logout every page leads to the login again, also for a copy of the cookie.
    cookie = session_cookie(browser_context)
    assert SESSION_COOKIE not in page.evaluate("document.cookie")  # HttpOnly: no script reads it
    assert logout(page) == 200 and path_of(page.url) == LOGIN_PATH
    paths = ["/dashboard/rounds", f"/dashboard/rounds/{rid}", f"/dashboard/candidates/{target}"]
    for path in paths:
        goto(page, base + path)
        assert path_of(page.url) == LOGIN_PATH, path
    shoot(page, screenshot_dir, "logged-out")
    refused_after_logout(browser, cookie, base, paths)

    assert outside == [], f"pages tried to load from outside the service: {outside}"
    assert script_errors == [], script_errors
    assert csp_reports == [], csp_reports
    served = [r for r in documents if r.url.startswith(base)]
    assert len(served) > 20
    for response in served:
        if 300 <= response.status < 400:
            continue  # the redirects' own headers are checked without a browser
        check_security_headers(
            response, page=response.headers.get("content-type", "").startswith("text/html")
        )
    for name in SCREENSHOTS:
        assert (screenshot_dir / f"{name}.png").stat().st_size > 0, name


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_browser_enforces_the_headers_and_refuses_a_logged_out_session(
    live_service: LiveService, browser: Browser, browser_context: BrowserContext, page: Page
) -> None:
    base = live_service.url
    created = live_service.call("POST", "/api/rounds", json={"name": "Headers round", "task": "sentiment"})
    assert created.status_code == 201, created.text
    rid = created.json()["id"]
    csp_reports = watch_csp(browser_context, page)

    # The login page and the pages behind it send the headers.
    login_page = page.goto(base + LOGIN_PATH)
    assert login_page is not None and login_page.status == 200
    check_security_headers(login_page, page=True)
    assert login(page, base, LEAD_TOKEN) == 200 and path_of(page.url) == "/dashboard/rounds"
    for path in ("/dashboard/rounds", f"/dashboard/rounds/{rid}", f"/dashboard/rounds/{rid}/annotators"):
        response = page.goto(base + path)
        assert response is not None and response.status == 200, path
        check_security_headers(response, page=True)
        if page.locator("canvas").count():
            check_charts(page)
    assert csp_reports == [], csp_reports  # the charts drew within the policy

    # The policy is enforced: an injected inline script does not run, an inline style is refused.
    injected = page.evaluate(
        """() => new Promise((resolve) => {
              const seen = [];
              document.addEventListener('securitypolicyviolation', (e) => seen.push(e.effectiveDirective));
              const script = document.createElement('script');
              script.textContent = 'window.injected = true';
              document.body.appendChild(script);
              document.body.setAttribute('style', 'background: red');
              setTimeout(() => resolve({ran: window.injected === true, seen,
                                         background: getComputedStyle(document.body).backgroundColor}), 500);
          })"""
    )
    assert injected["ran"] is False, injected
    assert "script-src-elem" in injected["seen"] and "style-src-attr" in injected["seen"], injected
    assert injected["background"] != "rgb(255, 0, 0)", injected
    # The console reports them too: the watch on every other page sees violations when there are some.
    assert any("script-src" in r for r in csp_reports) and any("style-src" in r for r in csp_reports)
    csp_reports.clear()

    # No page can be framed (the override and exclusion forms could be, before). The login page
    # needs no cookie, so only the headers keep it out of the frame.
    framing = browser_context.new_page()
    framing.set_content(f'<iframe src="{base}{LOGIN_PATH}"></iframe>')
    framing.wait_for_timeout(500)
    (framed,) = [f for f in framing.frames if f != framing.main_frame]
    assert framed.locator('input[name="token"]').count() == 0, framed.url
    framing.close()

    # The session cookie is HttpOnly, SameSite=Lax, for the dashboard only; a copy works until the
    # logout, and not after it.
    cookie = session_cookie(browser_context)
    copy = browser.new_context()
    try:
        copy.add_cookies([cookie])  # type: ignore[list-item]
        other = copy.new_page()
        assert goto(other, base + "/dashboard/rounds") == 200 and path_of(other.url) == "/dashboard/rounds"
        assert text_of(other, "nav-lead").startswith("lead-")
        assert goto(page, base + "/dashboard/rounds") == 200
        assert logout(page) == 200 and path_of(page.url) == LOGIN_PATH
        assert goto(other, base + "/dashboard/rounds") == 200
        assert path_of(other.url) == LOGIN_PATH  # the copy is refused too
        assert [c for c in copy.cookies() if c["name"] == SESSION_COOKIE] == []  # and forgotten
    finally:
        copy.close()
    assert [c for c in browser_context.cookies() if c["name"] == SESSION_COOKIE] == []
    refused_after_logout(browser, cookie, base, ["/dashboard/rounds", f"/dashboard/rounds/{rid}/annotators"])
    assert csp_reports == [], csp_reports


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_dashboard_pages_need_a_lead(live_service: LiveService) -> None:
    """Without credentials every page redirects to the login; a writer's token gets 403; a lead's
    token (bearer header) opens the pages. The forms' targets refuse the same callers."""
    call = live_service.call
    created = call("POST", "/api/rounds", json={"name": "guarded", "task": "sentiment"})
    assert created.status_code == 201, created.text
    rid = created.json()["id"]
    body = {"text": "What a lovely day to stay in bed.", "writer_label": POS}
    cid = call("POST", f"/api/rounds/{rid}/candidates", token=WRITER_TOKEN, json=body).json()["id"]
    annotator = pseudonym(PSEUDONYM_SECRET, "annotator", "1")
    table: list[tuple[str, str, int | None]] = [  # method, path, status for a lead (None: not tried)
        ("GET", "/dashboard/rounds", 200),
        ("GET", f"/dashboard/rounds/{rid}", 200),
        ("GET", f"/dashboard/rounds/{rid}?status=rejected&q=day&page=1", 200),
        ("GET", f"/dashboard/rounds/{rid}/annotators", 200),
        ("GET", f"/dashboard/rounds/{rid}/export", 200),
        ("GET", f"/dashboard/rounds/{rid}/export/dataset.jsonl", 200),
        ("GET", f"/dashboard/rounds/{rid}/export/dataset.parquet", 200),
        ("GET", f"/dashboard/rounds/{rid}/export/agreement.json", 200),
        ("GET", f"/dashboard/candidates/{cid}", 200),
        ("GET", "/dashboard/models", 200),
        ("POST", "/dashboard/models/revalidate", None),
        ("POST", f"/dashboard/candidates/{cid}/override", None),
        ("POST", f"/dashboard/rounds/{rid}/annotators/{annotator}/exclusion", None),
    ]
    form = {"outcome": "accepted", "reason": "no credentials", "excluded": "true"}
    for method, path, lead_status in table:
        anonymous = call(method, path, token=None, data=form, allow_redirects=False)
        assert anonymous.status_code == 302, (method, path, anonymous.status_code)
        assert path_of(anonymous.headers["Location"]) == LOGIN_PATH, (path, anonymous.headers["Location"])
        unknown = call(method, path, token="not-a-token-of-anyone-at-all", data=form, allow_redirects=False)
        assert unknown.status_code == 302, (method, path, unknown.status_code)
        writer = call(method, path, token=WRITER_TOKEN, data=form, allow_redirects=False)
        assert writer.status_code == 403, (method, path, writer.status_code)
        if lead_status is not None:
            lead = call(method, path, token=LEAD_TOKEN, allow_redirects=False)
            assert lead.status_code == lead_status, (method, path, lead.status_code)
    after = call("GET", f"/api/candidates/{cid}").json()  # no form went through
    assert after["status"] != "accepted" and (after["decision"] or {}).get("override") is None
    login_page = call("GET", LOGIN_PATH, token=None)
    assert login_page.status_code == 200 and 'name="token"' in login_page.text
