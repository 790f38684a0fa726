"""Limits, over HTTP: body size on every endpoint, text length, batch size, request rate per token.

Each refusal is the right status with ``{"error": {"code", "message", "field"}}`` naming the field,
and writes nothing (rows counted before and after). Runs against the live service and the real
Label Studio, on SQLite and PostgreSQL; the rate limit runs with a tiny limit, in memory and in the
machine's Redis.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from flask import Flask
from sqlalchemy import text

from dynaval.bootstrap import bootstrap
from dynaval.entrypoints.app import create_app, served_routes
from dynaval.settings import Settings, credential
from tests.fixtures.service import (
    COLLECTOR_TOKEN,
    LEAD_TOKEN,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    LiveService,
    free_port,
    make_settings,
)

pytestmark = pytest.mark.labelstudio

TABLES = ("round", "candidate", "annotation", "decision", "gold_item")
REDIS_URL = "redis://127.0.0.1:6379"
GOOD = {"text": "Lovely day.", "writer_label": "positive"}  # the writer's token says who wrote it


def rows(service: LiveService) -> dict[str, int]:
    with service.services.database.engine.connect() as connection:
        return {t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in TABLES}


def assert_error(response: requests.Response, status: int, field: str | None, *, says: str = "") -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "field"}, error
    assert error["field"] == field, error
    assert error["message"].strip(), error
    assert says.lower() in error["message"].lower(), error


@pytest.fixture
def open_round(live_service: LiveService) -> dict[str, Any]:
    created = live_service.call("POST", "/api/rounds", json={"name": "limits", "task": "sentiment"})
    assert created.status_code == 201, created.text
    round_: dict[str, Any] = created.json()
    return round_


# ------------------------------------------------------------------------------------ body size


def every_route(app: Flask, round_id: int, candidate_id: str) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, its placeholders filled with real values."""
    values = {"round_id": str(round_id), "candidate_id": candidate_id, "filename": "dashboard.css"}
    return [
        (method, re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: values.get(m.group(1), "someone"), rule))
        for method, rule in served_routes(app)
    ]


def test_every_endpoint_refuses_a_body_over_the_limit_with_413_and_writes_nothing(
    live_service: LiveService, open_round: dict[str, Any]
) -> None:
    # Not fooled (the tiny model answers "neutral"): nothing more happens to it in the background.
    submitted = live_service.call(
        "POST",
        f"/api/rounds/{open_round['id']}/candidates",
        token=WRITER_TOKEN,
        json={**GOOD, "writer_label": "neutral"},
    )
    assert submitted.status_code == 201, submitted.text
    limit = live_service.services.settings.max_body_bytes
    oversized = b'{"text": "' + b"a" * limit + b'"}'
    before = rows(live_service)
    routes = every_route(live_service.app, open_round["id"], submitted.json()["id"])
    assert ("POST", "/webhooks/label-studio") in routes and ("GET", "/health") in routes
    answers = {}
    for method, path in routes:
        for secret in (WEBHOOK_SECRET, None):  # the webhook refuses it before checking its secret
            headers = {"Content-Type": "application/json"}
            if secret is not None:
                headers["X-Dynaval-Webhook-Secret"] = secret
            response = live_service.call(method, path, data=oversized, headers=headers)
            answers[(method, path, secret is not None)] = response.status_code
            if response.status_code == 413 and not path.startswith("/dashboard"):
                assert_error(response, 413, "body", says=str(limit))
    assert answers == dict.fromkeys(answers, 413)
    assert rows(live_service) == before


def test_a_chunked_body_over_the_limit_is_cut_with_413(
    live_service: LiveService, open_round: dict[str, Any]
) -> None:
    limit = live_service.services.settings.max_body_bytes
    before = rows(live_service)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server learns the size while reading
        yield b'{"text": "'
        for _ in range(limit // 1024 + 1):
            yield b"a" * 1024
        yield b'", "writer_label": "positive"}'

    for path, secret in (
        (f"/api/rounds/{open_round['id']}/candidates", None),
        ("/webhooks/label-studio", WEBHOOK_SECRET),
    ):
        headers = {"Content-Type": "application/json"}
        if secret:
            headers["X-Dynaval-Webhook-Secret"] = secret
        response = live_service.call("POST", path, token=WRITER_TOKEN, data=chunks(), headers=headers)
        assert_error(response, 413, "body")
    assert rows(live_service) == before


# ---------------------------------------------------------------------------------- text length


def test_text_at_the_limit_is_taken_and_one_more_character_is_413(
    live_service: LiveService, open_round: dict[str, Any]
) -> None:
    url = f"/api/rounds/{open_round['id']}/candidates"
    limit = live_service.services.settings.max_text_chars
    before = rows(live_service)
    too_long = live_service.call("POST", url, token=WRITER_TOKEN, json={**GOOD, "text": "é" * (limit + 1)})
    assert_error(too_long, 413, "text", says=str(limit))
    assert rows(live_service) == before
    at_limit = live_service.call("POST", url, token=WRITER_TOKEN, json={**GOOD, "text": "é" * limit})
    assert at_limit.status_code == 201, at_limit.text
    assert rows(live_service)["candidate"] == before["candidate"] + 1


# ------------------------------------------------------------------------------------- batches


def batch_of(n: int, *, collected: bool = False) -> list[dict[str, str]]:
    """``n`` candidates as a writer sends them (their token names them), or as a collector sends
    them (``collected``: each names its writer)."""
    labels = ("positive", "negative", "neutral")
    items = [{"text": f"Sentence number {i}.", "writer_label": labels[i % 3]} for i in range(n)]
    if collected:
        for i, item in enumerate(items):
            item["writer_id"] = f"w{i % 4}"
    return items


def test_a_batch_is_stored_scored_together_and_answered_in_order(
    live_service: LiveService, open_round: dict[str, Any]
) -> None:
    items = batch_of(24)
    before = rows(live_service)
    model = live_service.services.models.get_path(open_round["model"]["folder"])
    passes_before = model.batches_run
    response = live_service.call(
        "POST",
        f"/api/rounds/{open_round['id']}/candidates/batch",
        token=WRITER_TOKEN,
        json={"candidates": items},
    )
    assert response.status_code == 201, response.text
    created = response.json()["candidates"]
    assert [c["inputs"]["text"] for c in created] == [i["text"] for i in items]
    assert [c["writer_label"] for c in created] == [i["writer_label"] for i in items]
    assert len({c["id"] for c in created}) == len(items)
    # The tiny model always answers "neutral": scored, signed, and fooled exactly when it should be.
    for candidate in created:
        assert candidate["model_prediction"] == "neutral" and candidate["model_signature"]
        assert candidate["fooled"] is (candidate["writer_label"] != "neutral")
        assert candidate["status"] != "scoring"
    # Through the micro-batcher: the 24 texts shared forward passes.
    assert model.batches_run - passes_before < len(items)
    assert rows(live_service)["candidate"] == before["candidate"] + len(items)
    for candidate in created:
        again = live_service.call("GET", f"/api/candidates/{candidate['id']}", token=WRITER_TOKEN)
        assert again.status_code == 200 and again.json()["inputs"] == candidate["inputs"]


def test_a_batch_over_the_limit_is_413_naming_candidates_and_writes_nothing(
    live_service: LiveService, open_round: dict[str, Any]
) -> None:
    limit = live_service.services.settings.max_batch_size
    assert limit == 100  # the documented default
    url = f"/api/rounds/{open_round['id']}/candidates/batch"
    before = rows(live_service)
    response = live_service.call("POST", url, token=WRITER_TOKEN, json={"candidates": batch_of(limit + 1)})
    assert_error(response, 413, "candidates", says=str(limit))
    assert rows(live_service) == before
    at_limit = live_service.call("POST", url, token=WRITER_TOKEN, json={"candidates": batch_of(limit)})
    assert at_limit.status_code == 201, at_limit.text
    assert len(at_limit.json()["candidates"]) == limit


def test_a_batch_with_any_bad_item_is_refused_whole_naming_the_item_and_field(
    live_service: LiveService, open_round: dict[str, Any]
) -> None:
    url = f"/api/rounds/{open_round['id']}/candidates/batch"
    good = batch_of(5)

    def post(body: Any, token: str | None = WRITER_TOKEN) -> requests.Response:
        return live_service.call("POST", url, token=token, json=body)

    def with_item(index: int, item: Any) -> dict[str, Any]:
        items: list[Any] = [dict(i) for i in good]
        items[index] = item
        return {"candidates": items}

    before = rows(live_service)
    limit = live_service.services.settings.max_text_chars
    assert_error(post(with_item(3, {**good[3], "writer_label": "joyful"})), 422, "candidates[3].writer_label")
    assert_error(post(with_item(0, {**good[0], "text": "  "})), 422, "candidates[0].text", says="empty")
    assert_error(post(with_item(4, {**good[4], "text": 7})), 422, "candidates[4].text")
    assert_error(post(with_item(1, {**good[1], "writer_id": "w" * 201})), 422, "candidates[1].writer_id")
    # A collector names every item's writer.
    collected = batch_of(5, collected=True)
    without_writer = [dict(i) for i in collected]
    del without_writer[2]["writer_id"]
    assert_error(post({"candidates": without_writer}, token=COLLECTOR_TOKEN), 422, "candidates[2].writer_id")
    collected[1]["writer_id"] = "w" * 201
    assert_error(post({"candidates": collected}, token=COLLECTOR_TOKEN), 422, "candidates[1].writer_id")
    assert_error(post(with_item(1, "a string")), 422, "candidates[1]")
    assert_error(post(with_item(2, {**good[2], "text": "a" * (limit + 1)})), 413, "candidates[2].text")
    assert_error(post(with_item(3, {**good[3], "text": "nul\u0000byte"})), 422, "candidates[3].text")
    assert_error(post({"candidates": []}), 422, "candidates")
    assert_error(post({"candidates": {"text": "x"}}), 422, "candidates")
    assert_error(post({}), 422, "candidates")
    assert_error(post({"candidates": good, "round": 1}), 422, "round")
    assert_error(post([good]), 422, "body")
    assert_error(post({"candidates": good}, token=None), 401, "Authorization")
    assert_error(
        live_service.call(
            "POST", "/api/rounds/999999/candidates/batch", token=WRITER_TOKEN, json={"candidates": good}
        ),
        404,
        "round_id",
    )
    assert live_service.call("POST", f"/api/rounds/{open_round['id']}/close").status_code == 200
    assert_error(post({"candidates": good}), 409, "round_id", says="closed")
    assert rows(live_service) == before


def test_the_batch_endpoint_is_documented(limited: LiveService) -> None:
    document = limited.call("GET", "/openapi.json", token=None).json()
    operation = document["paths"]["/api/rounds/{round_id}/candidates/batch"]["post"]
    assert {"201", "401", "404", "409", "413", "422", "429"} <= set(operation["responses"])
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert schema["required"] == ["candidates"]
    assert schema["properties"]["candidates"]["minItems"] == 1


# ------------------------------------------------------------------------------------- rate


def limited_app(
    database_url: str, folder: Path, label_studio_server: Any, model_dir: Path, **overrides: Any
) -> LiveService:
    port = free_port()
    settings = make_settings(
        database_url=database_url,
        data_dir=folder / "data",
        label_studio_url=label_studio_server.url,
        label_studio_api_key=label_studio_server.api_key,
        public_url=f"http://127.0.0.1:{port}",
        model_dir=model_dir,
        **overrides,
    )
    services = bootstrap(settings)
    live = LiveService(app=create_app(services, start_background=False), services=services, port=port)
    live.start_listening()
    return live


@pytest.fixture
def limited(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> Iterator[LiveService]:
    """The service with a limit of 5 requests a minute per caller and 3 per address without a valid
    credential, counted in memory."""
    live = limited_app(
        database_url, tmp_path, label_studio_server, tiny_model_dir,
        rate_limit="5/minute", anonymous_rate_limit="3/minute",
    )  # fmt: skip
    try:
        yield live
    finally:
        live.close()


def assert_rate_limited(response: requests.Response) -> int:
    assert_error(response, 429, "Authorization", says="retry after")
    assert response.json()["error"]["code"] == "rate_limited"
    wait_s = int(response.headers["Retry-After"])
    assert 1 <= wait_s <= 60
    return wait_s


def test_a_token_over_its_rate_gets_429_with_retry_after_and_nothing_is_written(
    limited: LiveService,
) -> None:
    created = limited.call("POST", "/api/rounds", json={"name": "rated", "task": "sentiment"})
    assert created.status_code == 201, created.text
    url = f"/api/rounds/{created.json()['id']}/candidates"
    for _ in range(5):
        assert limited.call("POST", url, token=WRITER_TOKEN, json=GOOD).status_code == 201
    before = rows(limited)
    assert_rate_limited(limited.call("POST", url, token=WRITER_TOKEN, json=GOOD))
    assert_rate_limited(limited.call("GET", "/api/rounds", token=WRITER_TOKEN))
    assert rows(limited) == before
    # Another token has its own budget (the lead spent one on the round).
    for _ in range(4):
        assert limited.call("GET", "/api/rounds").status_code == 200
    assert_rate_limited(limited.call("GET", "/api/rounds"))


def test_the_webhook_and_health_are_never_refused_for_rate(limited: LiveService) -> None:
    payload = {"action": "PROJECT_UPDATED", "project": {"id": 1}}
    for _ in range(12):
        assert limited.call("GET", "/health", token=None).status_code == 200
        hook = limited.call(
            "POST",
            "/webhooks/label-studio",
            token=None,
            json=payload,
            headers={"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET},
        )
        assert hook.status_code == 200, hook.text
    # They spent nothing of the address's budget either.
    assert limited.call("GET", "/openapi.json", token=None).status_code == 200


def test_without_a_valid_credential_requests_count_against_the_address_apart(limited: LiveService) -> None:
    # Made-up tokens do not buy a fresh budget each: they all count against 127.0.0.1, under the
    # stricter anonymous limit, with no token at all too.
    for i in range(3):
        assert_error(limited.call("GET", "/api/rounds", token=f"made-up-token-{i}"), 401, "Authorization")
    refused = limited.call("GET", "/api/rounds", token="yet-another-made-up-token")
    assert_rate_limited(refused)
    assert "without a valid credential" in refused.json()["error"]["message"]
    assert_rate_limited(limited.call("GET", "/openapi.json", token=None))
    # ... and spend nothing of a caller's, though the caller comes from the same address.
    for _ in range(5):
        assert limited.call("GET", "/api/rounds", token=WRITER_TOKEN).status_code == 200
    assert_rate_limited(limited.call("GET", "/api/rounds", token=WRITER_TOKEN))


def test_an_empty_rate_limit_turns_it_off(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> None:
    live = limited_app(database_url, tmp_path, label_studio_server, tiny_model_dir, rate_limit="")
    try:
        assert all(live.call("GET", "/api/rounds").status_code == 200 for _ in range(30))
        document = live.call("GET", "/openapi.json").json()
        assert "429" not in document["paths"]["/api/rounds"]["get"]["responses"]
    finally:
        live.close()


def test_a_rate_limit_that_does_not_parse_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="DYNAVAL_RATE_LIMIT"):
        Settings(development=True, data_dir=tmp_path, rate_limit="lots")
    assert Settings(development=True, data_dir=tmp_path, rate_limit=" 10/second;600/hour ").rate_limit == (
        "10/second;600/hour"
    )


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis does not answer at {REDIS_URL} (scripts/test starts it)", pytrace=False)
    yield client
    client.close()


def test_processes_sharing_redis_share_one_budget_keyed_by_the_callers_name(
    database_url: str,
    tmp_path: Path,
    label_studio_server: Any,
    tiny_model_dir: Path,
    redis_client: redis.Redis,
) -> None:
    # A token of its own, so runs of this test never share a count.
    token = "lead-" + secrets.token_hex(16)
    name = credential(token, role="lead").name  # a plain token's name: lead- and 8 hex digits of its hash
    apps = [
        limited_app(
            database_url,
            tmp_path / folder,
            label_studio_server,
            tiny_model_dir,
            rate_limit="4/minute",
            rate_limit_storage=REDIS_URL,
            lead_tokens=[token],
        )
        for folder in ("one", "two")
    ]
    try:
        one, two = apps
        assert one.call("GET", "/api/rounds", token=token).status_code == 200
        assert two.call("GET", "/api/rounds", token=token).status_code == 200
        assert one.call("GET", "/api/rounds", token=token).status_code == 200
        assert two.call("GET", "/api/rounds", token=token).status_code == 200
        assert_rate_limited(one.call("GET", "/api/rounds", token=token))
        assert_rate_limited(two.call("GET", "/api/rounds", token=token))
        keys = [k.decode() for k in redis_client.scan_iter(match="*dynaval*")]
        mine = [k for k in keys if f"lead:{name}" in k]
        assert mine, keys
        assert not [k for k in keys if token in k], "the raw token reached the limiter's storage"
    finally:
        for live in apps:
            live.close()
        for key in redis_client.scan_iter(match=f"*{name}*"):
            redis_client.delete(key)


def test_an_unreachable_rate_limit_storage_never_fails_a_request(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> None:
    live = limited_app(
        database_url,
        tmp_path,
        label_studio_server,
        tiny_model_dir,
        rate_limit="3/minute",
        rate_limit_storage=f"redis://127.0.0.1:{free_port()}",
    )
    try:
        answers = [live.call("GET", "/api/rounds").status_code for _ in range(5)]
        # Counted in this process's memory meanwhile: still limited, never a 500.
        assert answers == [200, 200, 200, 429, 429]
    finally:
        live.close()


# ---------------------------------------------------------------------------------- model work


def texts(n: int, chars: int, *, start: int = 0) -> list[dict[str, str]]:
    """``n`` candidates whose texts have ``chars`` characters each, and five tokens whatever their
    length (two words and a long one the tiny test model does not know: one token each), as a
    writer or lead sends them: their token names the writer."""
    out = []
    for i in range(start, start + n):
        stem = f"Sentence {i} "
        text = stem + "a" * (chars - len(stem))
        out.append({"text": text, "writer_label": "positive"})
    return out


def of_tokens(n: int, tokens: int, *, start: int = 0) -> list[dict[str, str]]:
    """``n`` candidates the tiny test model reads as ``tokens`` tokens each ([CLS], a word of its
    own, then punctuation, a token a mark, then [SEP]): few characters for their cost."""
    return [
        {"text": f"item{i} " + "!" * (tokens - 3), "writer_label": "positive"}
        for i in range(start, start + n)
    ]


def assert_scoring_limited(response: requests.Response, field: str) -> None:
    assert_error(response, 429, field, says="scoring units")
    assert response.json()["error"]["code"] == "scoring_limited"
    assert 1 <= int(response.headers["Retry-After"]) <= 60


@pytest.fixture
def scoring_limited(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> Iterator[LiveService]:
    """The service with the default request limit and a budget of 100 scoring units a minute."""
    live = limited_app(
        database_url,
        tmp_path,
        label_studio_server,
        tiny_model_dir,
        rate_limit="600/minute",
        scoring_limit="100/minute",
    )
    try:
        yield live
    finally:
        live.close()


def test_scoring_is_limited_by_model_work_per_token_not_by_requests(scoring_limited: LiveService) -> None:
    live = scoring_limited
    created = live.call("POST", "/api/rounds", json={"name": "costly", "task": "sentiment"})
    assert created.status_code == 201, created.text
    single = f"/api/rounds/{created.json()['id']}/candidates"
    batch = single + "/batch"

    def post_batch(items: list[dict[str, str]], token: str = WRITER_TOKEN) -> requests.Response:
        return live.call("POST", batch, token=token, json={"candidates": items})

    # Ten examples of 128 tokens cost 80 units (one per started 16 tokens of each), though they are
    # 131 characters each: 20 left.
    assert post_batch(of_tokens(10, 128)).status_code == 201
    before = rows(live)
    # Three more cost 24: refused whole, nothing stored, with Retry-After, though this token has sent
    # 2 requests of the 600 a minute it may.
    assert_scoring_limited(post_batch(of_tokens(3, 128, start=100)), "candidates")
    assert rows(live) == before
    # Characters cost nothing the model does not read: three texts of 2,000 characters in five tokens
    # each cost 3 units (by characters they cost 120): 17 left.
    assert post_batch(texts(3, 2000, start=200)).status_code == 201
    # Single examples of 128 tokens cost 8 each: two are taken (1 unit left), a third is refused,
    # naming the text.
    for start in (300, 301):
        answer = live.call("POST", single, token=WRITER_TOKEN, json=of_tokens(1, 128, start=start)[0])
        assert answer.status_code == 201, answer.text
    assert_scoring_limited(
        live.call("POST", single, token=WRITER_TOKEN, json=of_tokens(1, 128, start=400)[0]), "text"
    )
    assert rows(live)["candidate"] == before["candidate"] + 5
    assert live.call("POST", single, token=WRITER_TOKEN, json=GOOD).status_code == 201  # 1 unit: 0 left
    # Reading is not scoring, and another token has its own budget.
    assert live.call("GET", "/api/rounds", token=WRITER_TOKEN).status_code == 200
    lead = post_batch(of_tokens(10, 128, start=500), token=LEAD_TOKEN)
    assert lead.status_code == 201, lead.text


def test_a_request_costing_more_than_the_whole_budget_is_413_naming_the_field(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> None:
    live = limited_app(database_url, tmp_path, label_studio_server, tiny_model_dir, scoring_limit="10/minute")
    try:
        created = live.call("POST", "/api/rounds", json={"name": "too costly", "task": "sentiment"})
        url = f"/api/rounds/{created.json()['id']}/candidates/batch"
        before = rows(live)
        response = live.call("POST", url, token=WRITER_TOKEN, json={"candidates": texts(11, 40)})
        assert_error(response, 413, "candidates", says="11 scoring units")
        assert rows(live) == before
        assert (
            live.call("POST", url, token=WRITER_TOKEN, json={"candidates": texts(10, 40)}).status_code == 201
        )
    finally:
        live.close()


def test_processes_sharing_redis_share_one_scoring_budget(
    database_url: str,
    tmp_path: Path,
    label_studio_server: Any,
    tiny_model_dir: Path,
    redis_client: redis.Redis,
) -> None:
    token = "lead-" + secrets.token_hex(16)
    name = credential(token, role="lead").name
    apps = [
        limited_app(
            database_url,
            tmp_path / folder,
            label_studio_server,
            tiny_model_dir,
            scoring_limit="12/minute",
            rate_limit_storage=REDIS_URL,
            lead_tokens=[token],
        )
        for folder in ("one", "two")
    ]
    try:
        one, two = apps
        created = one.call("POST", "/api/rounds", token=token, json={"name": "shared", "task": "sentiment"})
        url = f"/api/rounds/{created.json()['id']}/candidates/batch"
        assert one.call("POST", url, token=token, json={"candidates": texts(8, 40)}).status_code == 201
        before = rows(two)
        assert_scoring_limited(
            two.call("POST", url, token=token, json={"candidates": texts(5, 40)}), "candidates"
        )
        assert rows(two) == before
        assert two.call("POST", url, token=token, json={"candidates": texts(4, 40)}).status_code == 201
        assert_scoring_limited(
            one.call("POST", url, token=token, json={"candidates": texts(1, 40)}), "candidates"
        )
        keys = [k.decode() for k in redis_client.scan_iter(match="*scoring*")]
        assert [k for k in keys if f"lead:{name}" in k], keys
        assert not [k for k in keys if token in k], "the raw token reached the limiter's storage"
    finally:
        for live in apps:
            live.close()
        for key in redis_client.scan_iter(match=f"*{name}*"):
            redis_client.delete(key)


def test_an_unreachable_storage_still_limits_scoring_in_memory_and_never_fails(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> None:
    live = limited_app(
        database_url,
        tmp_path,
        label_studio_server,
        tiny_model_dir,
        scoring_limit="5/minute",
        rate_limit_storage=f"redis://127.0.0.1:{free_port()}",
    )
    try:
        created = live.call("POST", "/api/rounds", json={"name": "no redis", "task": "sentiment"})
        url = f"/api/rounds/{created.json()['id']}/candidates/batch"
        assert (
            live.call("POST", url, token=WRITER_TOKEN, json={"candidates": texts(5, 40)}).status_code == 201
        )
        assert_scoring_limited(
            live.call("POST", url, token=WRITER_TOKEN, json={"candidates": texts(1, 40)}), "candidates"
        )
    finally:
        live.close()


def test_a_scoring_limit_that_does_not_parse_is_refused_at_start_and_an_empty_one_is_off(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="DYNAVAL_SCORING_LIMIT"):
        Settings(development=True, data_dir=tmp_path, scoring_limit="lots")
    assert Settings(development=True, data_dir=tmp_path).scoring_limit == "4000/minute"
    assert Settings(development=True, data_dir=tmp_path, scoring_limit=" ").scoring_limit == ""
