"""Small leaks and lax input (issue 11, finding 5), over HTTP against the live service.

- The server's model folder is shown to leads only; writers, collectors and exporters see the
  model's name and hash.
- Text with no visible character (spaces, ideographic spaces, zero-width and other format
  characters) is refused naming the field; text is stored NFC-normalised, and the length limit
  counts what is stored.
- Ids in the path and integer query parameters are ASCII digits: another script's digits or an
  underscore is a 404 naming the id, or a 422 naming the parameter.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from sqlalchemy import text

from tests.fixtures.service import COLLECTOR_TOKEN, EXPORTER_TOKEN, LEAD_TOKEN, WRITER_TOKEN, LiveService

pytestmark = pytest.mark.labelstudio

POS = "positive"
TABLES = ("round", "candidate", "gold_item")
INVISIBLE = (
    " \u3000\u200b",  # a space, an ideographic space, a zero-width space
    "\u200b\u200c\u200d\u2060",  # zero-width space and joiners, word joiner
    "\ufeff\u00ad",  # a byte order mark, a soft hyphen
    "\u3164\u3164",  # Hangul fillers (letters that render as nothing)
    "\n\u2028\u200e",  # a newline, a line separator, a left-to-right mark
)


def assert_error(response: requests.Response, status: int, field: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field and error["message"], error


def counts(live: LiveService) -> dict[str, int]:
    with live.services.database.engine.connect() as connection:
        return {t: int(connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one()) for t in TABLES}


@pytest.fixture
def a_round(live_service: LiveService) -> dict[str, Any]:
    created = live_service.call("POST", "/api/rounds", json={"name": "input round", "task": "sentiment"})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def in_other_digits(number: int, zero: int) -> str:
    """``number`` written in the digits of a script whose zero is the code point ``zero``."""
    return "".join(chr(zero + int(d)) for d in str(number))


def test_only_a_lead_sees_the_model_folder(live_service: LiveService, a_round: dict[str, Any]) -> None:
    folder = a_round["model"]["folder"]
    assert folder.startswith("/")  # the lead who created it sees it
    model = {"name": a_round["model"]["name"], "hash": a_round["model_hash"]}
    rid = a_round["id"]
    for token in (WRITER_TOKEN, COLLECTOR_TOKEN, EXPORTER_TOKEN):
        listed = live_service.call("GET", "/api/rounds", token=token)
        one = live_service.call("GET", f"/api/rounds/{rid}", token=token)
        assert listed.status_code == 200 and one.status_code == 200
        assert [r["model"] for r in listed.json()["rounds"]] == [model]
        assert one.json()["model"] == model
        assert folder not in listed.text and folder not in one.text
    submitted = live_service.call(
        "POST",
        f"/api/rounds/{rid}/candidates",
        token=WRITER_TOKEN,
        json={"text": "Fine.", "writer_label": POS},
    )
    assert submitted.status_code == 201 and folder not in submitted.text
    for response in (
        live_service.call("GET", "/api/rounds", token=LEAD_TOKEN),
        live_service.call("GET", f"/api/rounds/{rid}", token=LEAD_TOKEN),
    ):
        assert folder in response.text
    assert live_service.call("GET", f"/api/rounds/{rid}").json()["model"]["folder"] == folder


def test_text_with_no_visible_character_is_refused_naming_the_field(
    live_service: LiveService, a_round: dict[str, Any]
) -> None:
    rid = a_round["id"]
    before = counts(live_service)
    good = {"text": "A visible sentence.", "writer_label": POS}
    for invisible in INVISIBLE:
        single = live_service.call(
            "POST", f"/api/rounds/{rid}/candidates", token=WRITER_TOKEN, json={**good, "text": invisible}
        )
        assert_error(single, 422, "text")
        batch = [dict(good), dict(good), {**good, "text": invisible}]
        refused = live_service.call(
            "POST", f"/api/rounds/{rid}/candidates/batch", token=WRITER_TOKEN, json={"candidates": batch}
        )
        assert_error(refused, 422, "candidates[2].text")
        gold = {"items": [{"text": invisible, "label": POS}, {"text": "Visible gold.", "label": POS}]}
        assert_error(live_service.call("POST", f"/api/rounds/{rid}/gold", json=gold), 422, "items[0].text")
        collected = {**good, "writer_id": invisible}
        assert_error(
            live_service.call("POST", f"/api/rounds/{rid}/candidates", token=COLLECTOR_TOKEN, json=collected),
            422,
            "writer_id",
        )
        named = live_service.call("POST", "/api/rounds", json={"name": invisible, "task": "sentiment"})
        assert_error(named, 422, "name")
    assert counts(live_service) == before
    # A visible character among invisible ones is text.
    kept = live_service.call(
        "POST", f"/api/rounds/{rid}/candidates", token=WRITER_TOKEN, json={**good, "text": "\u200bok\u3000"}
    )
    assert kept.status_code == 201, kept.text


def test_text_is_stored_nfc_and_the_limit_counts_what_is_stored(
    live_service: LiveService, a_round: dict[str, Any]
) -> None:
    rid = a_round["id"]
    url = f"/api/rounds/{rid}/candidates"
    decomposed = "Cre\u0300me bru\u0302le\u0301e, the \u212bngstr\u00f6m way"
    composed = "Crème brûlée, the Ångström way"
    submitted = live_service.call(
        "POST", url, token=WRITER_TOKEN, json={"text": decomposed, "writer_label": POS}
    )
    assert submitted.status_code == 201, submitted.text
    assert submitted.json()["inputs"]["text"] == composed
    gold = live_service.call(
        "POST", f"/api/rounds/{rid}/gold", json={"items": [{"text": decomposed, "label": POS}]}
    )
    assert gold.status_code == 201, gold.text
    with live_service.services.database.engine.connect() as connection:
        stored = connection.execute(
            text('SELECT inputs FROM "candidate" WHERE id = :id'), {"id": submitted.json()["id"]}
        ).scalar_one()
        stored_gold = connection.execute(
            text('SELECT inputs FROM "gold_item" WHERE id = :id'), {"id": gold.json()["ids"][0]}
        ).scalar_one()
    as_stored = [value if isinstance(value, dict) else json.loads(value) for value in (stored, stored_gold)]
    assert [inputs["text"] for inputs in as_stored] == [composed, composed]

    # The limit counts stored characters: "e" + a combining accent is one "é" once stored.
    limit = live_service.services.settings.max_text_chars
    at_limit = live_service.call(
        "POST", url, token=WRITER_TOKEN, json={"text": "e\u0301" * limit, "writer_label": POS}
    )
    assert at_limit.status_code == 201, at_limit.text
    assert at_limit.json()["inputs"]["text"] == "\u00e9" * limit
    before = counts(live_service)
    over = {"text": "e\u0301" * (limit + 1), "writer_label": POS}
    assert_error(live_service.call("POST", url, token=WRITER_TOKEN, json=over), 413, "text")
    assert counts(live_service) == before


def test_ids_in_the_path_are_ascii_digits_only(live_service: LiveService, a_round: dict[str, Any]) -> None:
    rid = a_round["id"]
    before = counts(live_service)
    not_ascii = [
        in_other_digits(rid, 0xFF10),  # fullwidth digits
        in_other_digits(rid, 0x0660),  # Arabic-Indic digits
        in_other_digits(rid, 0x0966),  # Devanagari digits
        f"0_{rid}",
    ]
    body = {"text": "Lovely day.", "writer_label": POS}
    for written in not_ascii:
        assert_error(live_service.call("GET", f"/api/rounds/{written}", token=WRITER_TOKEN), 404, "round_id")
        assert_error(
            live_service.call("POST", f"/api/rounds/{written}/candidates", token=WRITER_TOKEN, json=body),
            404,
            "round_id",
        )
        assert_error(live_service.call("GET", f"/api/rounds/{written}/agreement"), 404, "round_id")
        page = live_service.call("GET", f"/dashboard/rounds/{written}")  # a lead's page, with the bearer
        assert page.status_code == 404 and "text/html" in page.headers["Content-Type"], written
    assert counts(live_service) == before
    # The same round in ASCII digits is served.
    assert live_service.call("GET", f"/api/rounds/{rid}", token=WRITER_TOKEN).status_code == 200
    assert live_service.call("GET", f"/dashboard/rounds/{rid}").status_code == 200


def test_integer_query_parameters_are_ascii_digits_only(
    live_service: LiveService, a_round: dict[str, Any]
) -> None:
    rid = a_round["id"]
    agreement = f"/api/rounds/{rid}/agreement"
    for name, value in (
        ("bootstrap", "1_000"),
        ("bootstrap", "\uff11\uff10"),  # fullwidth 10
        ("bootstrap", "+10"),
        ("bootstrap", " 10"),
        ("seed", "\u0663"),  # Arabic-Indic 3
        ("seed", "1_2"),
        ("seed", "-1"),
    ):
        refused = live_service.call("GET", agreement, token=EXPORTER_TOKEN, params={name: value})
        assert_error(refused, 422, name)
    served = live_service.call(
        "GET", agreement, token=EXPORTER_TOKEN, params={"bootstrap": "10", "seed": "3"}
    )
    assert served.status_code == 200, served.text
    for value in ("\uff12", "1_0", "\u0968"):  # fullwidth 2, an underscore, Devanagari 2
        page = live_service.call("GET", f"/dashboard/rounds/{rid}", params={"page": value})
        assert page.status_code == 422 and "page must be" in page.text, value
    assert live_service.call("GET", f"/dashboard/rounds/{rid}", params={"page": "2"}).status_code == 200
