"""The lead's models page without a browser, on SQLite and PostgreSQL: who may see it, the accuracy
matrix (each cell the evaluation's figures: accuracy, bootstrap interval, cases), the per-case view
and its pages, the gate runs with their flips, the suspect queue and the retired cases, all made by
the real use cases with tiny real models (``tests/support/models_scenario.py``), and every user
text shown as text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from dynaval.domain.regression.suite import accuracy_with_ci
from dynaval.entrypoints.pages.dashboard import CACHE
from dynaval.service_layer.dashboard import models_page
from dynaval.service_layer.dashboard.figures_cache import FiguresCache
from dynaval.service_layer.regression import evaluation, gate
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.retraining import policies
from dynaval.service_layer.services import Services
from tests.e2e.test_dashboard_pages import DASH, PageIds, fmt3, lead
from tests.fixtures.service import (
    EXPORTER_TOKEN,
    LEAD_TOKEN,
    WRITER_TOKEN,
)
from tests.support.models_scenario import (
    ANSWERS,
    LEAD,
    MARKUP,
    RETIRE_REASON,
    ModelsScenario,
    build_models,
    seed_models_scenario,
)

PATH = "/dashboard/models"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("models-page"))


@pytest.fixture
def app(dashboard_app: Flask) -> Flask:
    return dashboard_app


@pytest.fixture
def scenario(services: Services, models: dict[str, Path]) -> ModelsScenario:
    return seed_models_scenario(services, models)


def page(client: FlaskClient, path: str = PATH) -> tuple[PageIds, str]:
    response = lead(client, path)
    assert response.status_code == 200, (path, response.status_code)
    html = response.get_data(as_text=True)
    return PageIds(html), html


def expected_cell(scenario: ModelsScenario, model: str, split: str | None) -> str:
    """What the matrix shows for a model that always answers ``ANSWERS[model]``, computed from the
    cases' labels: accuracy, the evaluation's bootstrap interval, the number of cases."""
    return figure_text(
        [
            label == ANSWERS[model]
            for s, label, _text in scenario.current().values()
            if split is None or s == split
        ]
    )


def figure_text(outcomes: list[bool]) -> str:
    """A cell as the page shows it: accuracy, the bootstrap interval (seed 0), the number of cases."""
    if not outcomes:
        return DASH
    figures = accuracy_with_ci(outcomes, seed=0)
    interval = (
        f"[{fmt3(figures['ci95'][0])}, {fmt3(figures['ci95'][1])}]" if figures["ci95"] else "no interval"
    )
    return f"{fmt3(figures['accuracy'])} {interval} · n={len(outcomes)}"


def test_only_a_lead_sees_the_models_page_and_the_navigation_links_it(client: FlaskClient) -> None:
    anonymous = client.get(PATH)
    assert (anonymous.status_code, anonymous.headers["Location"]) == (302, "/dashboard/login")
    for token in (WRITER_TOKEN, EXPORTER_TOKEN):
        refused = lead(client, PATH, token=token)
        assert refused.status_code == 403 and "leads only" in refused.get_data(as_text=True)
    ids, _ = page(client)
    assert ids.text("no-results") == "No model has been evaluated yet."
    assert ids.text("no-gate-runs") and ids.text("no-suspects") and ids.text("no-retired")
    assert ids.text("no-jobs").startswith("No job yet")
    assert ids.text("no-per-label") == "No model has been evaluated yet."
    rounds, _ = page(client, "/dashboard/rounds")
    assert rounds.attr("nav-models", "href") == PATH


def test_the_matrix_gate_runs_suspects_and_retired_cases_show_the_use_cases_results(
    client: FlaskClient, services: Services, scenario: ModelsScenario
) -> None:
    ids, html = page(client)
    hashes = scenario.hashes

    # The matrix: one row per evaluated model, one column per split (round splits, then captures).
    splits = sorted({s for s, _label, _text in scenario.current().values()})
    assert {"dev_r1", "test_r1", "capture"} <= set(splits)
    assert [t for t in ids.ids("matrix-split-")] == ["dev_r1", "test_r1", "capture"]
    assert ids.all("matrix-name") == ["model A", "model-b", "model-a2"]
    assert ids.all("matrix-shipped") == ["shipped"]  # A only
    assert [h.rstrip("…") for h in ids.all("matrix-hash")] == [hashes[k][:19] for k in ("A", "B", "A2")]
    for key in ("A", "B", "A2"):
        for split in splits:
            assert ids.text(f"cell-{hashes[key]}-{split}") == expected_cell(scenario, key, split), (
                key,
                split,
            )
        assert ids.text(f"cell-{hashes[key]}-all") == expected_cell(scenario, key, None)

    # Per label, one table per task type, one row per model version: a model that always answers X
    # gets every X case right and every other case wrong.
    assert ids.all("per-label-task") == ["sentiment"]
    for key in ("A", "B", "A2"):
        for label in ("positive", "negative", "neutral"):
            outcomes = [
                label == ANSWERS[key]
                for _s, case_label, _t in scenario.current().values()
                if case_label == label
            ]
            expected = figure_text(outcomes)
            assert ids.text(f"label-cell-{hashes[key]}-{label}") == expected, (key, label)

    # Per case underneath: the first split's cases by id, each model's latest answer.
    assert ids.text("cases-split") == "dev_r1"
    dev = scenario.split_cases("dev_r1")
    assert ids.text("cases-total") == str(len(dev))
    assert ids.ids("case-row-") == dev[: models_page.CASES_PER_PAGE]
    for case_id in dev:
        label = scenario.cases[case_id][1]
        for key in ("A", "B"):
            mark = "✓" if label == ANSWERS[key] else "✗"
            assert ids.text(f"answer-{case_id}-{hashes[key]}") == f"{mark} {ANSWERS[key]}"
    captures, _ = page(client, f"{PATH}?split=capture")
    assert captures.ids("case-row-") == scenario.split_cases("capture")

    # The gate runs, newest first: A2 passed, B failed with every positive case it lost listed.
    runs = gate.gate_runs(services)
    assert ids.all("gate-passed") == ["passed", "failed"]
    positive = sorted(k for k, (_s, label, _t) in scenario.cases.items() if label == "positive")
    failed = runs[1]
    assert failed["id"] == scenario.failed_run and len(failed["negative_flips"]) == len(positive)
    assert ids.all("gate-negative-count") == ["0", str(len(positive))]
    assert ids.all("gate-positive-count") == ["0", str(failed["positive_flips"])]
    assert failed["positive_flips"] > 0
    assert all(when.endswith(f"by {LEAD}") for when in ids.all("gate-when"))
    assert ids.all("gate-candidate")[1] == f"model-b {hashes['B']}"
    assert ids.all("gate-baseline")[1] == f"shipped models {hashes['A']}"
    mcnemar = failed["mcnemar"]
    assert ids.all("gate-mcnemar")[1] == (
        f"{mcnemar['method']}: statistic {fmt3(mcnemar['statistic'])}, p = {fmt3(mcnemar['p_value'])}"
    )
    assert sorted(ids.ids("flip-")) == positive
    for flip in failed["negative_flips"]:
        assert ids.text(f"flip-{flip['case_id']}") == (
            f"{flip['case_id']} #{flip['round_id']} · {flip['split']} text: {flip['inputs']['text']} "
            "positive positive negative"
        )
    links = {a.get("href") for t, a, _ in ids.found if t == "case-link"}
    assert {f"/dashboard/candidates/{case_id}" for case_id in positive} <= links

    # The suspect queue: every neutral case but the retired one, failed by all three models.
    neutral = sorted(k for k, (_s, label, _t) in scenario.current().items() if label == "neutral")
    assert sorted(i for i in ids.ids("suspect-") if i != "failed") == neutral
    assert set(ids.all("suspect-failed")) == {"3 of 3 models"}

    # The retired case, with who, when and why.
    assert ids.ids("retired-") == [scenario.retired_id, "when", "by", "reason"]
    assert ids.text("retired-by") == LEAD and ids.text("retired-reason") == RETIRE_REASON
    assert ids.text("retired-when").endswith("UTC")

    # Every user text is shown as text, never as markup.
    assert "<script>alert" not in html and "<b>bold</b>" not in html and "<i>(the" not in html
    assert "&lt;script&gt;alert(&#34;case&#34;)&lt;/script&gt;" in html and "&lt;i&gt;(the source" in html
    assert MARKUP.strip() in ids.text(f"flip-{positive[0]}")

    # A case's link leads to its candidate page.
    candidate = lead(client, f"/dashboard/candidates/{positive[0]}")
    assert candidate.status_code == 200
    assert PageIds(candidate.get_data(as_text=True)).text("prov-example-id") == positive[0]


def test_the_history_says_which_model_served_when_and_why_each_was_or_was_not_shipped(
    client: FlaskClient, services: Services, scenario: ModelsScenario
) -> None:
    ids, html = page(client)
    hashes = scenario.hashes
    seeded = "sha256:" + "cd" * 32  # the frozen round's model, which the catalog never registered
    # The round's model first (it served first), then the models in the order they were registered.
    assert ids.all("history-name") == ["sentiment-seeded", "model A shipped", "model-b", "model-a2"]
    assert ids.ids("history-") == [seeded, "name", "served", "why", *(
        part for key in ("A", "B", "A2") for part in (hashes[key], "name", "served", "why")
    )]  # fmt: skip
    served = ids.all("history-served")
    assert served[0].startswith("#") and "round one (sentiment): " in served[0] and "UTC" in served[0]
    assert served[1:] == ["no round"] * 3
    positive = sum(1 for _s, label, _t in scenario.cases.values() if label == "positive")
    why = ids.all("history-why")
    assert why[0] == "not shipped: never gated"
    assert why[1].endswith(" UTC: shipped by grace: the first model")
    failed = f"failed gate run #{scenario.failed_run}, {positive} negative flips (at most 0 allowed)"
    assert why[2] == f"not shipped: {failed}"
    assert (
        why[3] == f"not shipped: passed gate run #{scenario.passed_run} (0 negative flips, at most 0 allowed)"
    )
    assert "<b>bold</b>" not in html


def test_the_per_case_view_pages_and_long_lists_say_how_many_more(
    client: FlaskClient, scenario: ModelsScenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models_page, "CASES_PER_PAGE", 4)
    monkeypatch.setattr(models_page, "FLIPS_SHOWN", 3)
    monkeypatch.setattr(models_page, "CASES_SHOWN", 2)
    test = scenario.split_cases("test_r1")
    assert len(test) > 8
    seen: list[str] = []
    ids, _ = page(client, f"{PATH}?split=test_r1")
    assert ids.attr("cases-next", "href") == f"{PATH}?split=test_r1&page=2#cases"
    for number in range(1, len(test) // 4 + 2):
        ids, _ = page(client, f"{PATH}?split=test_r1&page={number}")
        seen += ids.ids("case-row-")
    assert seen == test  # every case once, in order, across the pages
    past, _ = page(client, f"{PATH}?split=test_r1&page=999")
    assert past.ids("case-row-") == [] and past.text("cases-total") == str(len(test))

    positive = sum(1 for _s, label, _t in scenario.cases.values() if label == "positive")
    neutral = sum(1 for _s, label, _t in scenario.current().values() if label == "neutral")
    assert len(ids.ids("flip-")) == 3
    assert ids.text("gate-more-flips").startswith(f"{positive - 3} more negative flips")
    assert ids.all("gate-negative-count")[1] == str(positive)  # the count covers them all
    assert len([i for i in ids.ids("suspect-") if i != "failed"]) == 2
    assert ids.text("more-suspects").startswith(f"{neutral - 2} more suspect cases")


def test_bad_query_parameters_are_refused_naming_them(client: FlaskClient, scenario: ModelsScenario) -> None:
    unknown = lead(client, f"{PATH}?split=train_r1")
    assert unknown.status_code == 422
    message = PageIds(unknown.get_data(as_text=True)).text("page-error")
    assert "no split 'train_r1'" in message and "dev_r1" in message
    assert "&lt;b&gt;" in lead(client, f"{PATH}?split=<b>x</b>").get_data(as_text=True)
    assert lead(client, f"{PATH}?page=two").status_code == 422


def test_the_matrix_is_counted_again_only_after_an_evaluation_or_a_retirement(
    app: Flask, client: FlaskClient, services: Services, scenario: ModelsScenario, models: dict[str, Path]
) -> None:
    cache: FiguresCache = app.extensions[CACHE]
    cell = f"cell-{scenario.hashes['A']}-test_r1"
    ids, _ = page(client)
    assert ids.text(cell) == expected_cell(scenario, "A", "test_r1")
    misses = cache.misses
    page(client, f"{PATH}?split=test_r1")
    assert cache.misses == misses  # nothing changed: the figures come from the cache

    # A retirement changes the matrix: the case leaves its column.
    in_test = scenario.split_cases("test_r1")
    regression_suite.retire_case(services, in_test[0], by=LEAD, reason="a duplicate of another case")
    cache.settle()
    ids, _ = page(client)
    assert cache.misses == misses + 1
    assert ids.text(cell).endswith(f"n={len(in_test) - 1}")
    assert ids.ids("retired-").count("when") == 2

    # So does an evaluation (a new run of A: its latest results are the same, counted again).
    evaluation.evaluate(services, models["A"])
    cache.settle()
    page(client)
    assert cache.misses == misses + 2


def test_a_lead_sets_a_retraining_policy_from_the_page_and_sees_where_its_count_stands(
    client: FlaskClient, services: Services
) -> None:
    ids, _ = page(client)
    assert ids.all("retraining-policy") == ["off"] * len(services.catalog.names())  # never set: off
    headers = {"Authorization": f"Bearer {LEAD_TOKEN}"}
    form = {
        "every": "7",
        "base": "round",
        "max_flips": "1",
        "epochs": "2",
        "learning_rate": "",
        "ship": "next_round",
    }
    done = client.post("/dashboard/models/retraining/sentiment", data=form, headers=headers)
    assert done.status_code == 303 and done.headers["Location"].endswith("/dashboard/models#retraining")
    html = page(client)[1]
    row = html[html.index('data-testid="retraining-sentiment"') :]
    row = row[: row.index("</tr>")]
    assert "every 7 accepted, next_round, from the round model, at most 1 flips, 2 epochs" in row
    assert "0 of 7: waiting for 7 more accepted examples (0 of 7)" in row
    view = policies.policy_view(services, "sentiment")
    assert view["policy"]["learning_rate"] is None and view["policy"]["epochs"] == 2

    # A bad value: the page says which field, and nothing changes.
    for bad, field in ((dict(form, every="seven"), "every"), (dict(form, epochs="0"), "epochs")):
        refused = client.post("/dashboard/models/retraining/sentiment", data=bad, headers=headers)
        assert refused.status_code == 422
        message = PageIds(refused.get_data(as_text=True)).text("retraining-error")
        assert message.startswith(f"{field}: "), message
    assert policies.policy_view(services, "sentiment")["policy"]["every"] == 7
    unknown = client.post("/dashboard/models/retraining/nope", data=form, headers=headers)
    assert unknown.status_code == 404
    # Blank "every": off.
    off = client.post("/dashboard/models/retraining/sentiment", data=dict(form, every=""), headers=headers)
    assert off.status_code == 303
    assert policies.policy_view(services, "sentiment")["on"] is False
