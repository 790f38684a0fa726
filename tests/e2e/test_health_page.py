"""The Health page and ``GET /api/rounds/<id>/health`` without a browser, on SQLite and PostgreSQL:
who may see them, the figures of two planted rounds (``tests/support/health_seed.py``) computed
here independently from the planted texts, the repeated trick as one cluster with its writers, the
inflation mark on the second round, every user text shown as text, and no traceback on bad input.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import insert, update

from dynaval.adapters.db.orm import CandidateRow, RoundRow
from dynaval.domain.health.round_health import diversity
from dynaval.domain.provenance import writer_pseudonym
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.entrypoints.api.routes import FIGURES_CACHE
from dynaval.service_layer.agreement import reports as agreement
from dynaval.service_layer.dashboard.figures_cache import FiguresCache
from dynaval.service_layer.services import Services
from tests.e2e.test_dashboard_pages import PageIds, fmt3, lead
from tests.fixtures.service import (
    EXPORTER_TOKEN,
    LEAD_TOKEN,
    WRITER_TOKEN,
)
from tests.support.health_seed import MARKUP, TRICK_EDITS, HealthRounds, seed_health_rounds
from tests.support.release_seed import T0


@pytest.fixture
def app(dashboard_app: Flask) -> Flask:
    return dashboard_app


@pytest.fixture
def rounds(services: Services) -> HealthRounds:
    assert services.database is not None
    return seed_health_rounds(services.database)


def _path(round_id: int) -> str:
    return f"/dashboard/rounds/{round_id}/health"


def _page(client: FlaskClient, round_id: int) -> tuple[PageIds, str]:
    response = lead(client, _path(round_id))
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    html = response.get_data(as_text=True)
    return PageIds(html), html


def _shares(writers: list[str]) -> dict[int, float]:
    ranked = sorted(Counter(writers).values(), reverse=True)
    return {k: sum(ranked[:k]) / len(writers) for k in (1, 5, 10)}


def test_only_a_lead_sees_the_page_and_the_round_pages_link_it(
    client: FlaskClient, rounds: HealthRounds
) -> None:
    path = _path(rounds.first)
    anonymous = client.get(path)
    assert (anonymous.status_code, anonymous.headers["Location"]) == (302, "/dashboard/login")
    for token in (WRITER_TOKEN, EXPORTER_TOKEN):
        refused = lead(client, path, token=token)
        assert refused.status_code == 403 and "leads only" in refused.get_data(as_text=True)
    queue = PageIds(lead(client, f"/dashboard/rounds/{rounds.first}").get_data(as_text=True))
    assert queue.attr("nav-health", "href") == path
    overview = PageIds(lead(client, "/dashboard/rounds").get_data(as_text=True))
    assert [a.get("href") for t, a, _ in overview.found if t == "nav-health"] == [
        _path(rounds.first),
        _path(rounds.second),
    ]


def test_an_unknown_round_or_bad_input_is_a_page_not_a_traceback(client: FlaskClient) -> None:
    for path in (
        "/dashboard/rounds/999/health",
        "/dashboard/rounds/abc/health",
        "/dashboard/rounds/-1/health",
    ):
        response = lead(client, path)
        body = response.get_data(as_text=True)
        assert response.status_code == 404 and "Traceback" not in body, (path, body[:300])
    assert lead(client, "/api/rounds/999/health").get_json()["error"]["code"] == "not_found"


def test_the_page_shows_the_rounds_figures_clusters_and_the_inflation_mark(
    client: FlaskClient, services: Services, rounds: HealthRounds
) -> None:
    secret = services.settings.pseudonym_secret
    second = rounds.second
    ids, html = _page(client, second)

    # The round's figures, computed here from what was planted.
    writers = rounds.writers[second]
    assert ids.text("health-collected") == str(len(writers)) == "26"
    assert ids.text("health-writers") == str(len(set(writers)))
    for k, share in _shares(writers).items():
        assert ids.text(f"health-top-{k}") == fmt3(share)
    planted = diversity(rounds.texts[second])
    for n in (1, 2, 3):
        assert ids.text(f"health-distinct-{n}") == fmt3(planted.distinct[n])
    # 20 fooled of 26; the trick (10, all fooled) counts once: 11 fooled of 17.
    assert ids.text("health-fooled-rate") == fmt3(20 / 26)
    assert ids.text("health-fooled-rate-without") == fmt3(11 / 17)
    assert ids.text("health-clusters") == "1" and ids.text("health-clustered") == "10"

    # The trick is one cluster: its first candidate's text (markup shown as text), its writers.
    first = rounds.trick_ids[0]
    assert ids.ids("cluster-row-") == [first]
    assert ids.text(f"cluster-{first}-size") == "10" and ids.text(f"cluster-{first}-fooled") == "10"
    assert ids.text(f"cluster-{first}-accepted") == "10"
    assert ids.text(f"cluster-{first}-example") == f"{MARKUP} {TRICK_EDITS[0]}"
    ana, cy = (writer_pseudonym(secret, w, None) for w in ("ana", "cy"))
    assert ids.all("cluster-writer") == [f"{ana[:18]}\u2026 \u00d7 7", f"{cy[:18]}\u2026 \u00d7 3"]
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#39;trick&#39;)&lt;/script&gt;" in html
    assert "round two <i>" not in html and "round two &lt;i&gt;" in html

    # Across rounds: MER, VMER, alpha (the agreement report's) and distinct-n, round two marked.
    assert ids.ids("trend-row-") == [str(rounds.first), str(second)]
    for round_id, mer in ((rounds.first, 24 / 48), (second, 20 / 26)):
        assert ids.text(f"trend-{round_id}-mer") == fmt3(mer)
        assert ids.text(f"trend-{round_id}-vmer") == fmt3(mer)  # every fooled one was accepted
        report, _ = agreement.round_agreement_report(services, round_id)
        assert report.alpha is not None and ids.text(f"trend-{round_id}-alpha") == fmt3(report.alpha)
        figures = diversity(rounds.texts[round_id])
        for n in (1, 2, 3):
            assert ids.text(f"trend-{round_id}-distinct-{n}") == fmt3(figures.distinct[n])
    before, after = (diversity(rounds.texts[r]).value for r in (rounds.first, second))
    assert before is not None and after is not None and after < before
    assert ids.text(f"trend-{rounds.first}-mark") == ""
    assert ids.text(f"trend-{second}-mark") == "possible score inflation"

    # Round one has no repeated pattern; its page says so, and its fooled rates are one.
    one, _ = _page(client, rounds.first)
    assert one.text("no-clusters") == "No repeated pattern in this round."
    assert one.text("health-fooled-rate") == one.text("health-fooled-rate-without") == fmt3(0.5)


def test_the_api_carries_the_same_figures_to_an_exporter_and_a_lead(
    client: FlaskClient, services: Services, rounds: HealthRounds
) -> None:
    second = rounds.second
    path = f"/api/rounds/{second}/health"
    assert lead(client, path, token=WRITER_TOKEN).status_code == 403
    assert client.get(path).status_code == 401
    body = lead(client, path, token=EXPORTER_TOKEN).get_json()
    assert lead(client, path, token=LEAD_TOKEN).get_json() == body

    writers = rounds.writers[second]
    assert body["round_id"] == second and body["task"] == "sentiment" and body["fields"] == ["text"]
    assert body["collected"] == 26
    shares = body["writer_shares"]
    assert shares["writers"] == len(set(writers))
    for k, share in _shares(writers).items():
        assert shares[f"top_{k}_share"] == pytest.approx(share)
    planted = diversity(rounds.texts[second])
    assert body["diversity"] == {
        "distinct_1": pytest.approx(planted.distinct[1]),
        "distinct_2": pytest.approx(planted.distinct[2]),
        "distinct_3": pytest.approx(planted.distinct[3]),
        "ngrams": {str(n): planted.ngrams[n] for n in (1, 2, 3)},
    }
    assert body["fooled_rate"] == {
        "with_repeats": pytest.approx(20 / 26),
        "without_repeats": pytest.approx(11 / 17),
        "fooled": 20,
        "collected": 26,
        "fooled_patterns": 11,
        "patterns": 17,
    }
    patterns = body["repeated_patterns"]
    assert (patterns["clusters"], patterns["candidates"]) == (1, 10)
    trick = patterns["largest"][0]
    secret = services.settings.pseudonym_secret
    assert trick["first_id"] == rounds.trick_ids[0] and trick["candidate_ids"] == rounds.trick_ids
    assert trick["example"] == {"text": f"{MARKUP} {TRICK_EDITS[0]}"}
    assert (trick["size"], trick["fooled"], trick["accepted"]) == (10, 10, 10)
    assert trick["writers"] == [
        {"writer": writer_pseudonym(secret, "ana", None), "candidates": 7},
        {"writer": writer_pseudonym(secret, "cy", None), "candidates": 3},
    ]
    assert body["near_duplicate_rule"]["threshold"] == 0.6

    across = body["across_rounds"]
    assert [r["round_id"] for r in across] == [rounds.first, second]
    assert [r["possible_score_inflation"] for r in across] == [False, True]
    assert [r["compared_with"] for r in across] == [None, rounds.first]
    assert across[1]["mer"] == pytest.approx(20 / 26) and across[0]["mer"] == pytest.approx(0.5)
    assert across[1]["diversity"] == pytest.approx(planted.distinct[2])
    assert body["current"] is True


def test_repeated_patterns_follow_the_rounds_own_lexical_threshold(
    client: FlaskClient, services: Services, rounds: HealthRounds
) -> None:
    """A round whose policy sets ``near_duplicate_lexical`` to 0.95 counts none of the trick's
    one-word edits as repeats (their bigram Jaccard is about 0.7), and says which rule it used."""
    assert services.database is not None
    policy = {**DecisionPolicy().to_dict(), "near_duplicate_lexical": 0.95}
    with services.database.engine.begin() as connection:
        connection.execute(update(RoundRow).where(RoundRow.id == rounds.second).values(policy=policy))
    body = lead(client, f"/api/rounds/{rounds.second}/health", token=LEAD_TOKEN).get_json()
    assert body["near_duplicate_rule"]["threshold"] == 0.95
    assert (body["repeated_patterns"]["clusters"], body["repeated_patterns"]["candidates"]) == (0, 0)
    assert body["fooled_rate"]["with_repeats"] == body["fooled_rate"]["without_repeats"]
    _ids, html = _page(client, rounds.second)
    assert "Jaccard ≥ 0.95" in html


def test_a_new_candidate_moves_the_figures_on_after_the_recomputation(
    app: Flask, client: FlaskClient, services: Services, rounds: HealthRounds
) -> None:
    """The figures are cached under a fingerprint of the round's candidates: one more variation of
    the trick joins its cluster once the background recomputation has run."""
    second = rounds.second
    path = f"/api/rounds/{second}/health"
    assert lead(client, path).get_json()["repeated_patterns"]["largest"][0]["size"] == 10
    assert services.database is not None
    with services.database.engine.begin() as connection:
        at = T0 + timedelta(days=20)
        connection.execute(
            insert(CandidateRow),
            [
                {
                    "id": "00000000-0000-4000-8000-00000000beef", "round_id": second,
                    "inputs": {"text": TRICK_EDITS[0].replace("movie", "play")}, "writer_label": "positive",
                    "writer_id": "cy", "submitted_by": "cy", "status": "accepted", "fooled": True,
                    "submitted_at": at, "scored_at": at, "wanted_votes": 0, "label_studio_overlap": 0,
                    "version": 1,
                }
            ],
        )  # fmt: skip
    lead(client, path)  # starts the recomputation (it may answer with the previous figures)
    cache: FiguresCache = app.extensions[FIGURES_CACHE]
    cache.settle()
    body = lead(client, path).get_json()
    assert body["current"] is True and body["collected"] == 27
    trick = body["repeated_patterns"]["largest"][0]
    assert trick["size"] == 11 and trick["candidate_ids"][-1] == "00000000-0000-4000-8000-00000000beef"
    assert body["fooled_rate"]["without_repeats"] == pytest.approx(11 / 17)


def test_an_empty_round_has_a_page_with_undefined_figures(client: FlaskClient, services: Services) -> None:
    assert services.database is not None
    with services.database.unit_of_work() as session:
        row = RoundRow(
            name="empty", task_type="nli", state="open", model_dir="/m", model_name="m",
            model_hash="sha256:" + "ef" * 32, labels=["entailment", "neutral", "contradiction"],
            policy=DecisionPolicy().to_dict(),
        )  # fmt: skip
        session.add(row)
        session.commit()
        assert row.id is not None
        round_id = row.id
    ids, _ = _page(client, round_id)
    assert ids.text("health-collected") == "0" and ids.text("health-top-1") == fmt3(None)
    assert ids.text("health-distinct-2") == fmt3(None) and ids.text("health-fooled-rate") == fmt3(None)
    assert ids.text("no-clusters") == "No repeated pattern in this round."
    assert ids.text(f"trend-{round_id}-alpha") == fmt3(None) and ids.text(f"trend-{round_id}-mark") == ""
    body = lead(client, f"/api/rounds/{round_id}/health").get_json()
    assert body["fields"] == ["premise", "hypothesis"] and body["across_rounds"][0]["alpha"] is None
    assert body["across_rounds"][0]["alpha_undefined_reason"]
