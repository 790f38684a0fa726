"""A writer is who their token says, never who a body field says (issue 11, finding 2).

Each writer has a token of their own; a writer may omit ``writer_id`` or give their own name, and a
body naming anyone else is refused with 403 naming the field, with nothing stored. Only a
collector's token (an outside collection front end) names the writer of each candidate, and its own
name is recorded beside the writer's. What a writer or collector reads back, and the pseudonym in
the dataset's provenance, follow from the credential. Against the live service and the real Label
Studio, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests
from sqlalchemy import text

from dynaval.domain.provenance import writer_pseudonym
from dynaval.settings import credential
from tests.fixtures.service import (
    COLLECTOR_NAME,
    COLLECTOR_TOKEN,
    EXPORTER_TOKEN,
    LEAD_TOKEN,
    OTHER_WRITER_NAME,
    OTHER_WRITER_TOKEN,
    PSEUDONYM_SECRET,
    WRITER_NAME,
    WRITER_TOKEN,
    LiveService,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.labelstudio

POS, NEG = "positive", "negative"
FIELD_WRITER = "field-writer-1"  # a writer of the collector's front end, known only to it


def pseudonym_of(writer_id: str, collected_by: str | None = None) -> str:
    return writer_pseudonym(PSEUDONYM_SECRET, writer_id, collected_by)


def assert_error(response: requests.Response, status: int, field: str, *, says: str = "") -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field and error["message"], error
    assert says in error["message"], error


def candidate_count(live: LiveService) -> int:
    with live.services.database.engine.connect() as connection:
        return int(connection.execute(text('SELECT count(*) FROM "candidate"')).scalar_one())


@pytest.fixture
def round_id(live_service: LiveService) -> int:
    created = live_service.call("POST", "/api/rounds", json={"name": "identity round", "task": "sentiment"})
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def submit(live: LiveService, round_id: int, token: str, text_: str, **fields: Any) -> dict[str, Any]:
    body = {"text": text_, "writer_label": POS, **fields}
    response = live.call("POST", f"/api/rounds/{round_id}/candidates", token=token, json=body)
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_writer_who_names_another_writer_is_refused_and_nothing_is_stored(
    live_service: LiveService, round_id: int
) -> None:
    url = f"/api/rounds/{round_id}/candidates"
    before = candidate_count(live_service)
    for token, someone_else in (
        (WRITER_TOKEN, OTHER_WRITER_NAME),  # another writer
        (WRITER_TOKEN, FIELD_WRITER),  # a name no token has
        (WRITER_TOKEN, COLLECTOR_NAME),
        (OTHER_WRITER_TOKEN, WRITER_NAME),
        (LEAD_TOKEN, WRITER_NAME),  # a lead submits as themselves too
    ):
        body = {"text": "A lovely day, they said.", "writer_label": POS, "writer_id": someone_else}
        refused = live_service.call("POST", url, token=token, json=body)
        assert_error(refused, 403, "writer_id", says="another writer")
    # In a batch, the item is named, and the good items before and after it are not stored either.
    items: list[dict[str, Any]] = [{"text": f"Item {i}, lovely.", "writer_label": POS} for i in range(4)]
    items[2]["writer_id"] = OTHER_WRITER_NAME
    refused = live_service.call("POST", f"{url}/batch", token=WRITER_TOKEN, json={"candidates": items})
    assert_error(refused, 403, "candidates[2].writer_id")
    assert candidate_count(live_service) == before
    # The same writer's own name is no one else's: accepted.
    own = submit(live_service, round_id, WRITER_TOKEN, "My own, named.", writer_id=WRITER_NAME)
    assert own["writer"] == pseudonym_of(WRITER_NAME)
    assert candidate_count(live_service) == before + 1


def test_a_writer_who_omits_writer_id_gets_their_own_pseudonym(
    live_service: LiveService, round_id: int
) -> None:
    ana = submit(live_service, round_id, WRITER_TOKEN, "Ana wrote this, lovely.")
    bo = submit(live_service, round_id, OTHER_WRITER_TOKEN, "Bo wrote this, lovely.")
    assert ana["writer"] == pseudonym_of(WRITER_NAME) and ana["collected_by"] is None
    assert bo["writer"] == pseudonym_of(OTHER_WRITER_NAME) and bo["collected_by"] is None
    assert ana["writer"] != bo["writer"]
    # null is no writer_id either; a batch takes the same identity for every item.
    named_null = submit(live_service, round_id, WRITER_TOKEN, "Ana again.", writer_id=None)
    assert named_null["writer"] == ana["writer"]
    batch = live_service.call(
        "POST",
        f"/api/rounds/{round_id}/candidates/batch",
        token=OTHER_WRITER_TOKEN,
        json={"candidates": [{"text": f"Bo's item {i}.", "writer_label": NEG} for i in range(3)]},
    )
    assert batch.status_code == 201, batch.text
    assert {c["writer"] for c in batch.json()["candidates"]} == {bo["writer"]}
    # A lead submits as themselves (their token's name).
    lead_name = credential(LEAD_TOKEN, role="lead").name
    by_lead = submit(live_service, round_id, LEAD_TOKEN, "A lead's own example.")
    assert by_lead["writer"] == pseudonym_of(lead_name) and by_lead["collected_by"] is None
    # What is stored: the writer is the token's name, the submitter too.
    with live_service.services.database.engine.connect() as connection:
        stored = dict(
            connection.execute(
                text('SELECT writer_id, submitted_by FROM "candidate" WHERE id = :id'), {"id": ana["id"]}
            )
            .one()
            ._mapping
        )
    assert stored == {"writer_id": WRITER_NAME, "submitted_by": WRITER_NAME}


def test_a_collector_submits_for_the_writers_it_names_and_is_recorded_beside_them(
    live_service: LiveService, round_id: int
) -> None:
    url = f"/api/rounds/{round_id}/candidates"
    before = candidate_count(live_service)
    # A collector must name the writer: refused whole, naming the item, nothing stored.
    missing = live_service.call(
        "POST", url, token=COLLECTOR_TOKEN, json={"text": "Whose is this?", "writer_label": POS}
    )
    assert_error(missing, 422, "writer_id", says="collector")
    items: list[dict[str, Any]] = [
        {"text": "First, lovely.", "writer_label": POS, "writer_id": FIELD_WRITER},
        {"text": "Second, lovely.", "writer_label": POS},
    ]
    refused = live_service.call("POST", f"{url}/batch", token=COLLECTOR_TOKEN, json={"candidates": items})
    assert_error(refused, 422, "candidates[1].writer_id")
    assert candidate_count(live_service) == before

    collected = submit(live_service, round_id, COLLECTOR_TOKEN, "Collected, lovely.", writer_id=FIELD_WRITER)
    assert collected["collected_by"] == COLLECTOR_NAME
    assert collected["writer"] == pseudonym_of(FIELD_WRITER, COLLECTOR_NAME)
    items[1]["writer_id"] = "field-writer-2"
    batch = live_service.call("POST", f"{url}/batch", token=COLLECTOR_TOKEN, json={"candidates": items})
    assert batch.status_code == 201, batch.text
    assert [(c["writer"], c["collected_by"]) for c in batch.json()["candidates"]] == [
        (pseudonym_of(FIELD_WRITER, COLLECTOR_NAME), COLLECTOR_NAME),
        (pseudonym_of("field-writer-2", COLLECTOR_NAME), COLLECTOR_NAME),
    ]
    # A collector vouches for its own writers only: naming a direct writer's name does not give
    # that writer's pseudonym (nor their candidates).
    as_ana = submit(live_service, round_id, COLLECTOR_TOKEN, "Posing as Ana.", writer_id=WRITER_NAME)
    assert as_ana["writer"] != pseudonym_of(WRITER_NAME)
    assert as_ana["collected_by"] == COLLECTOR_NAME

    # It reads back what it submitted; the writer it named (with a token of that name) does not.
    url_of = f"/api/candidates/{collected['id']}"
    read = live_service.call("GET", url_of, token=COLLECTOR_TOKEN)
    assert read.status_code == 200 and read.json()["collected_by"] == COLLECTOR_NAME
    assert_error(live_service.call("GET", f"/api/candidates/{as_ana['id']}", token=WRITER_TOKEN), 403,
                 "Authorization")  # fmt: skip
    with live_service.services.database.engine.connect() as connection:
        stored = dict(
            connection.execute(
                text('SELECT writer_id, submitted_by, collected_by FROM "candidate" WHERE id = :id'),
                {"id": collected["id"]},
            )
            .one()
            ._mapping
        )
    assert stored == {
        "writer_id": FIELD_WRITER,
        "submitted_by": COLLECTOR_NAME,
        "collected_by": COLLECTOR_NAME,
    }


def test_a_second_writer_cannot_read_the_first_writers_candidates(
    live_service: LiveService, round_id: int
) -> None:
    ana = submit(live_service, round_id, WRITER_TOKEN, "Ana's secret draft, lovely.")
    bo = submit(live_service, round_id, OTHER_WRITER_TOKEN, "Bo's secret draft, lovely.")
    answers = {
        (who, whose): live_service.call("GET", f"/api/candidates/{c['id']}", token=token).status_code
        for who, token in (("ana", WRITER_TOKEN), ("bo", OTHER_WRITER_TOKEN), ("collector", COLLECTOR_TOKEN))
        for whose, c in (("ana", ana), ("bo", bo))
    }
    assert answers == {
        ("ana", "ana"): 200,
        ("ana", "bo"): 403,
        ("bo", "ana"): 403,
        ("bo", "bo"): 200,
        ("collector", "ana"): 403,
        ("collector", "bo"): 403,
    }
    refused = live_service.call("GET", f"/api/candidates/{ana['id']}", token=OTHER_WRITER_TOKEN)
    assert_error(refused, 403, "Authorization", says="another writer's candidate")
    assert ana["inputs"]["text"] not in refused.text
    for candidate in (ana, bo):  # a lead reads every one
        assert live_service.call("GET", f"/api/candidates/{candidate['id']}").status_code == 200


def test_the_dataset_provenance_follows_the_credential(live_service: LiveService, round_id: int) -> None:
    # Fooled (the tiny model answers "neutral"), pushed to Label Studio, then accepted by a lead.
    submitted = [
        submit(live_service, round_id, WRITER_TOKEN, "Ana's example, lovely."),
        submit(
            live_service, round_id, OTHER_WRITER_TOKEN, "Bo's example, lovely.", writer_id=OTHER_WRITER_NAME
        ),
        submit(live_service, round_id, COLLECTOR_TOKEN, "A field example, lovely.", writer_id=FIELD_WRITER),
    ]
    expected = {
        submitted[0]["id"]: (pseudonym_of(WRITER_NAME), None),
        submitted[1]["id"]: (pseudonym_of(OTHER_WRITER_NAME), None),
        submitted[2]["id"]: (pseudonym_of(FIELD_WRITER, COLLECTOR_NAME), COLLECTOR_NAME),
    }

    def in_validation() -> bool:
        return all(
            live_service.call("GET", f"/api/candidates/{c['id']}").json()["status"] == "in_validation"
            for c in submitted
        )

    wait_for("the candidates in Label Studio", in_validation)
    for candidate in submitted:
        accepted = live_service.call(
            "POST",
            f"/api/candidates/{candidate['id']}/override",
            json={"outcome": "accepted", "reason": "checked by hand"},
        )
        assert accepted.status_code == 200, accepted.text

    jsonl = live_service.call("GET", f"/api/rounds/{round_id}/dataset?format=jsonl", token=EXPORTER_TOKEN)
    assert jsonl.status_code == 200, jsonl.text
    records = [json.loads(line) for line in jsonl.text.splitlines()]
    assert {r["example_id"]: (r["writer"], r["collected_by"]) for r in records} == expected
    # The raw ids and the writers' token names stay out of it; the collector's name is the record.
    for raw in (WRITER_NAME, OTHER_WRITER_NAME, FIELD_WRITER):
        assert raw not in jsonl.text
    parquet = live_service.call("GET", f"/api/rounds/{round_id}/dataset?format=parquet", token=EXPORTER_TOKEN)
    assert parquet.status_code == 200
    rows = pq.read_table(io.BytesIO(parquet.content)).to_pylist()
    assert {r["example_id"]: (r["writer"], r["collected_by"]) for r in rows} == expected
