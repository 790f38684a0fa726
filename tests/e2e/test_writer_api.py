"""The API behind the writers' page, against the live service and a real Label Studio.

``GET /api/me`` (who a token is), rounds that tell their inputs and labels, ``POST
/api/rounds/<id>/predict`` (the model's answer before submitting: nothing stored, charged like a
submission, refused for closed rounds, exporters, unknown rounds and bad inputs) and ``GET
/api/rounds/<id>/my-candidates`` (a writer's own candidates, paged, with their MER and VMER; never
another writer's). The tiny test models always answer "neutral".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import text

from dynaval.settings import credential
from tests.fixtures.models import NLI_LABELS
from tests.fixtures.service import (
    COLLECTOR_TOKEN,
    EXPORTER_TOKEN,
    LEAD_TOKEN,
    OTHER_WRITER_NAME,
    OTHER_WRITER_TOKEN,
    WRITER_NAME,
    WRITER_TOKEN,
    LiveService,
    running_service,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.labelstudio

POS, NEG, NEU = "positive", "negative", "neutral"
SENTIMENT_LABELS = [POS, NEG, NEU]
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def assert_error(response: requests.Response, status: int, field: str | None, *, says: str = "") -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["message"], error
    assert error["field"] == field, error
    assert says in error["message"], error


def candidate_count(live: LiveService) -> int:
    with live.services.database.engine.connect() as connection:
        return int(connection.execute(text('SELECT count(*) FROM "candidate"')).scalar_one())


def create_round(live: LiveService, name: str, task: str = "sentiment", model: str = "default") -> int:
    created = live.call("POST", "/api/rounds", json={"name": name, "task": task, "model": model})
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


@pytest.fixture
def sentiment_round(live_service: LiveService) -> int:
    return create_round(live_service, "writers' sentiment round")


@pytest.fixture
def nli_round(live_service: LiveService, tiny_nli_model_dir: Path) -> int:
    return create_round(live_service, "writers' NLI round", task="nli", model=str(tiny_nli_model_dir))


def predict(
    live: LiveService, round_id: int, body: Any, token: str | None = WRITER_TOKEN
) -> requests.Response:
    return live.call("POST", f"/api/rounds/{round_id}/predict", token=token, json=body)


def mine(live: LiveService, round_id: int, token: str = WRITER_TOKEN, query: str = "") -> requests.Response:
    return live.call("GET", f"/api/rounds/{round_id}/my-candidates{query}", token=token)


# ----------------------------------------------------------------------------- who and where


@SQLITE_ONLY
def test_a_token_tells_its_name_and_role(live_service: LiveService) -> None:
    answers = {
        token: live_service.call("GET", "/api/me", token=token).json()
        for token in (WRITER_TOKEN, OTHER_WRITER_TOKEN, COLLECTOR_TOKEN, EXPORTER_TOKEN, LEAD_TOKEN)
    }
    assert answers[WRITER_TOKEN] == {"name": WRITER_NAME, "role": "writer"}
    assert answers[OTHER_WRITER_TOKEN] == {"name": OTHER_WRITER_NAME, "role": "writer"}
    assert answers[COLLECTOR_TOKEN]["role"] == "collector"
    assert answers[EXPORTER_TOKEN]["role"] == "exporter"
    assert answers[LEAD_TOKEN] == {"name": credential(LEAD_TOKEN, role="lead").name, "role": "lead"}
    assert_error(live_service.call("GET", "/api/me", token=None), 401, "Authorization")
    assert_error(live_service.call("GET", "/api/me", token="not-a-token-0123456789"), 401, "Authorization")


@SQLITE_ONLY
def test_rounds_tell_their_inputs_in_order_and_their_labels(
    live_service: LiveService, sentiment_round: int, nli_round: int
) -> None:
    listed = {
        r["id"]: r for r in live_service.call("GET", "/api/rounds", token=WRITER_TOKEN).json()["rounds"]
    }
    assert (listed[sentiment_round]["inputs"], listed[sentiment_round]["labels"]) == (
        ["text"],
        SENTIMENT_LABELS,
    )
    assert (listed[nli_round]["inputs"], listed[nli_round]["labels"]) == (
        ["premise", "hypothesis"],
        list(NLI_LABELS),
    )
    summary = live_service.call("GET", f"/api/rounds/{nli_round}", token=WRITER_TOKEN).json()
    assert summary["inputs"] == ["premise", "hypothesis"]
    closed = live_service.call("POST", f"/api/rounds/{nli_round}/close").json()
    assert closed["inputs"] == ["premise", "hypothesis"] and closed["state"] == "closed"


@SQLITE_ONLY
def test_a_rounds_model_tells_how_many_tokens_it_reads(
    live_service: LiveService, sentiment_round: int, nli_round: int
) -> None:
    """``GET /api/rounds/<id>/model``: what the writers' page shows before anyone writes, and the
    number a submission is then held to."""

    def model(round_id: int, token: str | None = WRITER_TOKEN) -> requests.Response:
        return live_service.call("GET", f"/api/rounds/{round_id}/model", token=token)

    answer = model(sentiment_round).json()
    listed = {
        r["id"]: r for r in live_service.call("GET", "/api/rounds", token=WRITER_TOKEN).json()["rounds"]
    }
    assert answer == {
        "name": listed[sentiment_round]["model"]["name"],
        "hash": listed[sentiment_round]["model"]["hash"],
        "max_tokens": 128,  # the tiny model's position embeddings, below the service's 256
        "counted_over": ["text"],
        "image": None,  # a text model looks at no image
    }
    nli = model(nli_round, token=LEAD_TOKEN).json()
    assert (nli["max_tokens"], nli["counted_over"]) == (128, ["premise", "hypothesis"])
    # Held to it: with [CLS] and [SEP], 126 one-token words are taken and 127 refused, naming both numbers.
    assert predict(live_service, sentiment_round, {"text": " ".join(["good"] * 126)}).status_code == 200
    assert_error(predict(live_service, sentiment_round, {"text": " ".join(["good"] * 127)}), 422, "text",
                 says="129 tokens long and the round's model reads at most 128")  # fmt: skip
    # A collector's front end may ask too (it shows its writers the limit); an exporter may not.
    assert model(sentiment_round, token=COLLECTOR_TOKEN).json() == answer
    assert_error(model(sentiment_round, token=EXPORTER_TOKEN), 403, "Authorization",
                 says="writer, collector or lead")  # fmt: skip
    assert_error(model(sentiment_round, token=None), 401, "Authorization")
    assert_error(model(999_999), 404, "round_id")
    assert live_service.call("POST", f"/api/rounds/{nli_round}/close").status_code == 200
    assert_error(model(nli_round), 409, "round_id", says="closed")


# --------------------------------------------------------------------------------- predict


@SQLITE_ONLY
def test_predict_answers_the_models_label_and_probabilities_and_stores_nothing(
    live_service: LiveService, sentiment_round: int, nli_round: int
) -> None:
    before = candidate_count(live_service)
    for token in (WRITER_TOKEN, LEAD_TOKEN):
        answer = predict(live_service, sentiment_round, {"text": "What a lovely day."}, token=token)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"prediction", "probabilities"}
        assert body["prediction"] == NEU
        assert list(body["probabilities"]) == SENTIMENT_LABELS
        assert sum(body["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)
        assert max(body["probabilities"], key=body["probabilities"].__getitem__) == NEU
    pair = {"premise": "A man is sleeping on a bench.", "hypothesis": "Nobody is on the bench."}
    answer = predict(live_service, nli_round, {"inputs": pair})
    assert answer.status_code == 200, answer.text
    assert answer.json()["prediction"] == "neutral"
    assert list(answer.json()["probabilities"]) == list(NLI_LABELS)
    assert candidate_count(live_service) == before
    assert mine(live_service, sentiment_round).json()["total"] == 0
    # The same inputs submitted get the same answer.
    submitted = live_service.call(
        "POST",
        f"/api/rounds/{nli_round}/candidates",
        token=WRITER_TOKEN,
        json={"inputs": pair, "writer_label": "contradiction"},
    )
    assert submitted.status_code == 201, submitted.text
    assert submitted.json()["model_probabilities"] == pytest.approx(answer.json()["probabilities"])


@SQLITE_ONLY
def test_predict_refuses_what_a_submission_would_naming_the_field(
    live_service: LiveService, sentiment_round: int, nli_round: int
) -> None:
    before = candidate_count(live_service)
    # The inputs as a candidate gives them: in inputs (the task type's fields), or text alone.
    assert_error(predict(live_service, sentiment_round, {}), 422, "text", says="text is required")
    assert_error(predict(live_service, sentiment_round, {"inputs": {}}), 422, "inputs.text")
    assert_error(
        predict(live_service, nli_round, {"inputs": {"premise": "A dog runs."}}),
        422,
        "inputs.hypothesis",
        says="hypothesis is required",
    )
    assert_error(
        predict(live_service, nli_round, {"text": "A dog runs."}),
        422,
        "inputs.premise",
        says="premise is required",
    )
    pair = {"premise": "A.", "hypothesis": "B."}
    assert_error(predict(live_service, nli_round, {"inputs": {**pair, "extra": "C."}}), 422, "inputs.extra",
                 says="unknown field")  # fmt: skip
    assert_error(
        predict(live_service, sentiment_round, {"text": "A.", "inputs": {"text": "A."}}),
        422,
        "text",
        says="not both",
    )
    # Only the inputs: no label, no writer, no rationale, no input outside inputs.
    for key in ("writer_label", "writer_id", "rationale"):
        assert_error(predict(live_service, sentiment_round, {"text": "Fine.", key: POS}), 422, key,
                     says="not a known field")  # fmt: skip
    assert_error(predict(live_service, nli_round, pair), 422, "premise", says="not a known field")
    assert_error(predict(live_service, sentiment_round, {"text": " \u200b"}), 422, "text")
    assert_error(predict(live_service, nli_round, {"inputs": {**pair, "hypothesis": " \u200b"}}), 422,
                 "inputs.hypothesis")  # fmt: skip
    assert_error(predict(live_service, sentiment_round, {"text": 5}), 422, "text")
    assert_error(predict(live_service, sentiment_round, ["text"]), 422, "body")
    too_long = "a" * (live_service.services.settings.max_text_chars + 1)
    assert_error(predict(live_service, sentiment_round, {"text": too_long}), 413, "text")
    assert_error(predict(live_service, nli_round, {"inputs": {**pair, "premise": too_long}}), 413,
                 "inputs.premise")  # fmt: skip
    # Who may ask: whoever submits candidates. A collection front end shows its writers the model's
    # live guess (the drawn-digit demo's way); an exporter may not ask.
    asked = predict(live_service, sentiment_round, {"text": "Fine."}, token=COLLECTOR_TOKEN)
    assert asked.status_code == 200 and set(asked.json()) == {"prediction", "probabilities"}
    assert_error(predict(live_service, sentiment_round, {"text": "Fine."}, token=EXPORTER_TOKEN), 403,
                 "Authorization", says="writer, collector or lead")  # fmt: skip
    assert_error(predict(live_service, sentiment_round, {"text": "Fine."}, token=None), 401, "Authorization")
    # Rounds: an unknown one, and a closed one (its model answers no more questions).
    assert_error(predict(live_service, 999_999, {"text": "Fine."}), 404, "round_id")
    assert live_service.call("POST", f"/api/rounds/{sentiment_round}/close").status_code == 200
    assert_error(predict(live_service, sentiment_round, {"text": "Fine."}), 409, "round_id", says="closed")
    assert candidate_count(live_service) == before


@SQLITE_ONLY
def test_predict_is_charged_to_the_callers_scoring_budget(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> None:
    with running_service(
        database_url, tmp_path / "data", label_studio_server, tiny_model_dir,
        start_background=False, scoring_limit="10/minute",
    ) as live:  # fmt: skip
        round_id = create_round(live, "budget round")
        eight_units = {"text": " ".join(["good"] * 126)}  # 128 tokens: 8 units of 16
        assert predict(live, round_id, eight_units).status_code == 200
        refused = predict(live, round_id, eight_units)
        assert_error(refused, 429, "text", says="scoring units")
        assert refused.json()["error"]["code"] == "scoring_limited"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        # A submission draws on the same budget: 2 units are left, a short text costs 1.
        submitted = live.call(
            "POST",
            f"/api/rounds/{round_id}/candidates",
            token=WRITER_TOKEN,
            json={"text": "Fine.", "writer_label": POS},
        )
        assert submitted.status_code == 201, submitted.text
        assert predict(live, round_id, {"text": "Fine."}).status_code == 200
        assert_error(predict(live, round_id, {"text": "Fine."}), 429, "text")
        # What costs is what the model reads: 2,000 characters of one word it does not know are three
        # tokens, one unit. Another token has a budget of its own.
        other = OTHER_WRITER_TOKEN
        assert all(
            predict(live, round_id, {"text": "a" * 2000}, token=other).status_code == 200 for _ in range(2)
        )
        assert predict(live, round_id, eight_units, token=other).status_code == 200
        assert_error(predict(live, round_id, eight_units, token=other), 429, "text")


@SQLITE_ONLY
def test_the_writers_endpoints_are_documented(live_service: LiveService) -> None:
    document = live_service.call("GET", "/openapi.json", token=None).json()
    operation = document["paths"]["/api/rounds/{round_id}/predict"]["post"]
    assert operation["description"] == "Roles: writer, collector, lead"
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/PredictRequest"
    )
    assert {"200", "401", "403", "404", "409", "413", "422"} <= set(operation["responses"])
    schema = document["components"]["schemas"]["PredictRequest"]
    limit = live_service.services.settings.max_text_chars
    assert set(schema["properties"]) == {"inputs", "text"} and schema["additionalProperties"] is False
    assert schema["properties"]["text"]["anyOf"][0]["maxLength"] == limit
    text_input, image_input = schema["properties"]["inputs"]["anyOf"][0]["additionalProperties"]["anyOf"]
    assert text_input["maxLength"] == limit
    # An image task type's input: a data URL whose decoded bytes are held to DYNAVAL_MAX_IMAGE_BYTES.
    image_limit = live_service.services.settings.max_image_bytes
    assert image_input["pattern"] == "^data:image/(png|jpeg);base64,"
    assert image_input["maxLength"] == len("data:image/jpeg;base64,") + -(-image_limit // 3) * 4
    listing = document["paths"]["/api/rounds/{round_id}/my-candidates"]["get"]
    assert listing["description"] == "Roles: writer, lead"
    assert {p["name"]: p["schema"]["maximum"] for p in listing["parameters"] if p["in"] == "query"} == {
        "page": 1_000_000,
        "limit": 100,
    }
    assert (
        document["paths"]["/api/me"]["get"]["description"]
        == "Roles: writer, collector, exporter, reporter, lead"
    )


# ---------------------------------------------------------------------------- my candidates


def submit(live: LiveService, round_id: int, token: str, text_: str, label: str, **extra: str) -> str:
    body = {"text": text_, "writer_label": label, **extra}
    response = live.call("POST", f"/api/rounds/{round_id}/candidates", token=token, json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def status_of(live: LiveService, candidate_id: str) -> str:
    return str(live.call("GET", f"/api/candidates/{candidate_id}").json()["status"])


def override(live: LiveService, candidate_id: str, outcome: str) -> None:
    response = live.call(
        "POST",
        f"/api/candidates/{candidate_id}/override",
        json={"outcome": outcome, "reason": "checked by the lead"},
    )
    assert response.status_code == 200, response.text


def test_my_candidates_are_the_callers_own_with_their_mer_and_vmer(
    live_service: LiveService, sentiment_round: int
) -> None:
    live, rid = live_service, sentiment_round
    # Ana: three fool the model ("neutral"), two do not. Bo: two fool it. The collector submits one
    # naming Ana as its writer: submitted with the collector's token, so not Ana's to list.
    ana_fooled = [submit(live, rid, WRITER_TOKEN, "Ana's sly example 0.", POS, rationale="Sarcasm.")]
    ana_fooled += [submit(live, rid, WRITER_TOKEN, f"Ana's sly example {i}.", POS) for i in (1, 2)]
    ana_plain = [submit(live, rid, WRITER_TOKEN, f"Ana's plain example {i}.", NEU) for i in range(2)]
    bo_fooled = [submit(live, rid, OTHER_WRITER_TOKEN, f"Bo's example {i}.", NEG) for i in range(2)]
    collected = submit(live, rid, COLLECTOR_TOKEN, "Collected for Ana.", POS, writer_id=WRITER_NAME)
    by_lead = submit(live, rid, LEAD_TOKEN, "The lead's own example.", NEG)
    fooled = [*ana_fooled, *bo_fooled, collected, by_lead]
    wait_for(
        "the fooled candidates in Label Studio",
        lambda: all(status_of(live, c) == "in_validation" for c in fooled),
    )
    override(live, ana_fooled[0], "accepted")
    override(live, ana_fooled[1], "rejected")
    override(live, bo_fooled[0], "accepted")
    override(live, collected, "accepted")

    ana = mine(live, rid).json()
    assert ana["round_id"] == rid and ana["total"] == 5 and (ana["page"], ana["limit"]) == (1, 20)
    assert ana["counts"]["collected"] == 5
    assert (ana["counts"]["fooled"], ana["counts"]["accepted_fooled"]) == (3, 1)
    assert ana["mer"] == pytest.approx(3 / 5) and ana["vmer"] == pytest.approx(1 / 5)
    assert ana["counts"]["by_status"] == {"accepted": 1, "in_validation": 1, "not_fooled": 2, "rejected": 1}
    newest_first = [*reversed(ana_plain), *reversed(ana_fooled)]
    assert [c["id"] for c in ana["candidates"]] == newest_first
    by_id = {c["id"]: c for c in ana["candidates"]}
    first = by_id[ana_fooled[0]]
    assert first["status"] == "accepted" and first["fooled"] is True
    assert first["inputs"] == {"text": "Ana's sly example 0."} and first["writer_label"] == POS
    assert first["rationale"] == "Sarcasm." and by_id[ana_plain[0]]["rationale"] is None
    assert first["model_prediction"] == NEU and set(first["model_probabilities"]) == set(SENTIMENT_LABELS)
    assert {c["id"]: c["fooled"] for c in ana["candidates"]} == {
        **dict.fromkeys(ana_fooled, True),
        **dict.fromkeys(ana_plain, False),
    }
    # Nothing of anyone else's: not Bo's, not the collector's (though it names Ana), no votes, no names.
    assert {"writer", "votes", "submitted_by", "collected_by", "writer_id"}.isdisjoint(first)
    bo = mine(live, rid, OTHER_WRITER_TOKEN).json()
    assert sorted(c["id"] for c in bo["candidates"]) == sorted(bo_fooled)
    assert (bo["total"], bo["mer"], bo["vmer"]) == (2, 1.0, 0.5)
    lead = mine(live, rid, LEAD_TOKEN).json()
    assert [c["id"] for c in lead["candidates"]] == [by_lead] and lead["vmer"] == 0.0
    everything = mine(live, rid).text + mine(live, rid, OTHER_WRITER_TOKEN).text
    assert collected not in everything and "Collected for Ana" not in everything

    # Pages of two, newest first; past the end, an empty page with the same figures.
    pages = [mine(live, rid, query=f"?page={p}&limit=2").json() for p in (1, 2, 3, 4)]
    assert [[c["id"] for c in p["candidates"]] for p in pages] == [
        newest_first[0:2],
        newest_first[2:4],
        newest_first[4:5],
        [],
    ]
    assert {(p["total"], p["mer"], p["vmer"]) for p in pages} == {(5, ana["mer"], ana["vmer"])}

    # A round without any: zeros and no rates (nothing to divide by).
    empty = create_round(live, "nobody wrote here")
    assert mine(live, empty).json() == {
        "round_id": empty,
        "counts": {
            "collected": 0,
            "fooled": 0,
            "accepted_fooled": 0,
            "still_in_validation": 0,
            "unvalidated": 0,
            "by_status": {},
            "mer": None,
            "vmer": None,
        },
        "mer": None,
        "vmer": None,
        "total": 0,
        "page": 1,
        "limit": 20,
        "candidates": [],
    }


@SQLITE_ONLY
def test_my_candidates_refuses_other_roles_unknown_rounds_and_bad_paging(
    live_service: LiveService, sentiment_round: int
) -> None:
    for token in (COLLECTOR_TOKEN, EXPORTER_TOKEN):  # a collector submits for others: no "own" list
        assert_error(mine(live_service, sentiment_round, token), 403, "Authorization", says="writer or lead")
    assert_error(mine(live_service, 999_999), 404, "round_id")
    for query, field in (
        ("?limit=0", "limit"),
        ("?limit=101", "limit"),
        ("?page=0", "page"),
        ("?page=1000001", "page"),
        ("?page=one", "page"),
        ("?limit=1_0", "limit"),
    ):
        assert_error(mine(live_service, sentiment_round, query=query), 422, field)
    assert mine(live_service, sentiment_round, query="?page=1000000&limit=100").json()["candidates"] == []
