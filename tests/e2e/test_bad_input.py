"""Every endpoint's bad requests: a 4xx that names the field and the reason, and nothing written.

Runs against the live service wired to the real Label Studio, so "nothing written" covers both
our database and Label Studio's projects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk import LabelStudio
from sqlalchemy import text

from tests.fixtures.service import COLLECTOR_TOKEN, WEBHOOK_SECRET, WRITER_TOKEN, LiveService
from tests.support.tiny_model import build_tiny_model
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

TABLES = ("round", "candidate", "annotation", "decision")


def snapshot(service: LiveService, ls: LabelStudio) -> dict[str, Any]:
    with service.services.database.engine.connect() as connection:
        rows = {t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in TABLES}
        rounds = connection.execute(text('SELECT id, state FROM "round" ORDER BY id')).all()
    return {**rows, "rounds": [tuple(r) for r in rounds], "projects": len(list(ls.projects.list()))}


def assert_error(response: Any, status: int, field: str | None, *, says: str = "") -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert error["message"], error
    assert says.lower() in error["message"].lower(), error


@pytest.fixture
def world(live_service: LiveService, label_studio_server: Any, tmp_path: Path) -> dict[str, Any]:
    ls = LabelStudio(base_url=label_studio_server.url, api_key=label_studio_server.api_key)
    open_round = live_service.call("POST", "/api/rounds", json={"name": "open", "task": "sentiment"}).json()
    closed_round = live_service.call(
        "POST", "/api/rounds", json={"name": "closed", "task": "sentiment"}
    ).json()
    assert live_service.call("POST", f"/api/rounds/{closed_round['id']}/close").status_code == 200
    return {
        "ls": ls,
        "open": open_round["id"],
        "closed": closed_round["id"],
        "project": open_round["label_studio_project_id"],
        "wrong_labels_model": build_tiny_model(tmp_path / "wrong-labels", labels=("yes", "no")),
        "no_model": tmp_path,
    }


def test_create_round_bad_requests_write_nothing(live_service: LiveService, world: dict[str, Any]) -> None:
    before = snapshot(live_service, world["ls"])
    call = live_service.call
    good = {"name": "r", "task": "sentiment", "model": "default"}
    assert_error(call("POST", "/api/rounds", token=None, json=good), 401, "Authorization")
    assert_error(call("POST", "/api/rounds", token="not-a-token", json=good), 401, "Authorization")
    assert_error(
        call("POST", "/api/rounds", token=WRITER_TOKEN, json=good), 403, "Authorization", says="lead"
    )
    assert_error(
        call("POST", "/api/rounds", data="{not json", headers={"Content-Type": "application/json"}),
        422,
        "body",
    )
    assert_error(call("POST", "/api/rounds", json=["a list"]), 422, "body")
    assert_error(call("POST", "/api/rounds", json={"task": "sentiment"}), 422, "name")
    assert_error(call("POST", "/api/rounds", json={**good, "name": "   "}), 422, "name", says="empty")
    assert_error(call("POST", "/api/rounds", json={**good, "name": "x" * 201}), 422, "name", says="200")
    assert_error(call("POST", "/api/rounds", json={**good, "name": 5}), 422, "name")
    assert_error(call("POST", "/api/rounds", json={**good, "task": "poetry"}), 422, "task", says="sentiment")
    assert_error(call("POST", "/api/rounds", json={**good, "task": "../etc/passwd"}), 422, "task")
    assert_error(call("POST", "/api/rounds", json={**good, "model": "relative/folder"}), 422, "model")
    gone = str(world["no_model"] / "no-such-folder")
    assert_error(
        call("POST", "/api/rounds", json={**good, "model": gone}), 422, "model", says="absolute path"
    )
    assert_error(call("POST", "/api/rounds", json={**good, "model": "/tmp/a\u0000b"}), 422, "model")
    assert_error(
        call("POST", "/api/rounds", json={**good, "model": str(world["no_model"])}),
        422,
        "model",
        says="config.json",
    )
    assert_error(
        call("POST", "/api/rounds", json={**good, "model": str(world["wrong_labels_model"])}),
        422,
        "model",
        says="labels",
    )
    assert_error(call("POST", "/api/rounds", json={**good, "policy": "strict"}), 422, "policy")
    assert_error(call("POST", "/api/rounds", json={**good, "policy": {"quorum": 3}}), 422, "policy.quorum")
    assert_error(
        call("POST", "/api/rounds", json={**good, "policy": {"min_votes": 3, "max_votes": 2}}),
        422,
        "policy.max_votes",
    )
    assert_error(
        call("POST", "/api/rounds", json={**good, "policy": {"accept_share": 0.4}}),
        422,
        "policy.accept_share",
    )
    assert_error(
        call("POST", "/api/rounds", json={**good, "policy": {"min_votes": True}}), 422, "policy.min_votes"
    )
    assert_error(call("POST", "/api/rounds", json={**good, "colour": "red"}), 422, "colour")
    huge = {**good, "name": "x" * (live_service.services.settings.max_body_bytes + 10)}
    assert_error(call("POST", "/api/rounds", json=huge), 413, "body")
    assert snapshot(live_service, world["ls"]) == before


def test_round_reads_and_actions_bad_requests_write_nothing(
    live_service: LiveService, world: dict[str, Any]
) -> None:
    before = snapshot(live_service, world["ls"])
    call = live_service.call
    assert_error(call("GET", "/api/rounds/999999"), 404, "round_id")
    assert_error(call("GET", "/api/rounds", token=None), 401, "Authorization")
    assert_error(call("POST", "/api/rounds/999999/close"), 404, "round_id")
    assert_error(call("POST", f"/api/rounds/{world['open']}/close", token=WRITER_TOKEN), 403, "Authorization")
    assert_error(call("POST", f"/api/rounds/{world['closed']}/close"), 409, "round_id", says="closed")
    assert_error(call("POST", "/api/rounds/999999/sync"), 404, "round_id")
    assert_error(call("POST", f"/api/rounds/{world['open']}/sync", token=WRITER_TOKEN), 403, "Authorization")
    assert_error(call("GET", f"/api/rounds/{world['open']}/dataset?format=csv"), 422, "format", says="jsonl")
    assert_error(call("GET", "/api/rounds/999999/dataset"), 404, "round_id")
    assert_error(
        call("GET", f"/api/rounds/{world['open']}/dataset", token=WRITER_TOKEN), 403, "Authorization"
    )
    assert_error(call("GET", "/api/candidates/no-such-candidate"), 404, "candidate_id")
    assert call("GET", "/api/nothing-here").status_code == 404
    assert call("DELETE", f"/api/rounds/{world['open']}").json()["error"]["code"] == "method_not_allowed"
    assert snapshot(live_service, world["ls"]) == before


def test_submit_candidate_bad_requests_write_nothing(
    live_service: LiveService, world: dict[str, Any]
) -> None:
    before = snapshot(live_service, world["ls"])
    url = f"/api/rounds/{world['open']}/candidates"
    good = {"text": "Lovely day.", "writer_label": "positive"}  # a writer's token says who wrote it

    def post(body: Any, **kwargs: Any) -> Any:
        return live_service.call("POST", url, token=kwargs.pop("token", WRITER_TOKEN), json=body, **kwargs)

    assert_error(post(good, token=None), 401, "Authorization")
    assert_error(
        post({**good, "writer_label": "joyful"}), 422, "writer_label", says="positive, negative, neutral"
    )
    assert_error(post({**good, "writer_label": None}), 422, "writer_label")
    assert_error(post({**good, "text": ""}), 422, "text", says="empty")
    assert_error(post({**good, "text": " \n\t "}), 422, "text", says="empty")
    assert_error(post({**good, "text": 42}), 422, "text")
    assert_error(post({k: v for k, v in good.items() if k != "text"}), 422, "text")
    limit = live_service.services.settings.max_text_chars
    assert_error(post({**good, "text": "a" * (limit + 1)}), 413, "text", says=str(limit))
    # Longer than the round's model reads (the tiny model: 128 tokens, a word each here): the model
    # would judge its beginning only. The same for a try-out and for one item of a batch.
    too_long = " ".join(["good"] * 130)
    assert_error(post({**good, "text": too_long}), 422, "text", says="132 tokens long")
    in_object = {"inputs": {"text": too_long}, "writer_label": "positive"}
    assert_error(post(in_object), 422, "inputs.text", says="128")
    assert_error(
        live_service.call(
            "POST", f"/api/rounds/{world['open']}/predict", token=WRITER_TOKEN, json={"text": too_long}
        ),
        422,
        "text",
        says="reads at most 128",
    )
    assert_error(
        live_service.call(
            "POST",
            f"/api/rounds/{world['open']}/candidates/batch",
            token=WRITER_TOKEN,
            json={"candidates": [good, {**good, "text": too_long}]},
        ),
        422,
        "candidates[1].text",
        says="tokens long",
    )
    assert_error(post({**good, "writer_id": ""}), 422, "writer_id")
    assert_error(post({**good, "writer_id": 7}), 422, "writer_id")
    assert_error(post({**good, "writer_id": "w" * 201}), 422, "writer_id")
    # A collector names the writer of each candidate, so it must.
    assert_error(post(good, token=COLLECTOR_TOKEN), 422, "writer_id", says="collector")
    assert_error(post({**good, "writer_id": " \u200b"}, token=COLLECTOR_TOKEN), 422, "writer_id")
    assert_error(post({**good, "writer_id": "w" * 201}, token=COLLECTOR_TOKEN), 422, "writer_id")
    assert_error(post("just a string"), 422, "body")
    assert_error(
        live_service.call("POST", f"/api/rounds/{world['closed']}/candidates", token=WRITER_TOKEN, json=good),
        409,
        "round_id",
        says="closed",
    )
    assert_error(
        live_service.call("POST", "/api/rounds/999999/candidates", token=WRITER_TOKEN, json=good),
        404,
        "round_id",
    )
    assert snapshot(live_service, world["ls"]) == before


def test_webhook_bad_requests_write_nothing(live_service: LiveService, world: dict[str, Any]) -> None:
    before = snapshot(live_service, world["ls"])
    annotation = {
        "id": 987654,
        "task": 123456,
        "completed_by": 1,
        "result": [
            {"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": ["positive"]}}
        ],
        "was_cancelled": False,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    payload = {"action": "ANNOTATION_CREATED", "project": {"id": world["project"]}, "annotation": annotation}

    def hook(body: Any, secret: str | None = WEBHOOK_SECRET) -> Any:
        headers = {"X-Dynaval-Webhook-Secret": secret} if secret is not None else {}
        return live_service.call("POST", "/webhooks/label-studio", token=None, json=body, headers=headers)

    assert_error(hook(payload, secret=None), 401, "X-Dynaval-Webhook-Secret")
    assert_error(hook(payload, secret="wrong-secret-wrong-secret"), 401, "X-Dynaval-Webhook-Secret")
    assert_error(hook(["not", "an", "object"]), 422, "body")
    assert_error(hook({"project": {"id": world["project"]}}), 422, "action")
    assert_error(hook({**payload, "project": {"id": 99999999}}), 404, "project.id")
    assert_error(hook({**payload, "project": "x"}), 422, "project.id")
    assert_error(hook(payload), 404, "annotation.task")  # a task that is no candidate of this round
    assert_error(hook({**payload, "annotation": {"id": 1}}), 422, "annotation.task")
    assert_error(hook({**payload, "annotation": "x"}), 422, "annotation")
    assert_error(
        hook({"action": "ANNOTATIONS_DELETED", "project": {"id": world["project"]}, "annotations": "all"}),
        422,
        "annotations",
    )
    ignored = hook({"action": "PROJECT_UPDATED", "project": {"id": world["project"]}})
    assert ignored.status_code == 200 and ignored.json()["handled"] is False
    assert snapshot(live_service, world["ls"]) == before


# ------------------------------------------------- forged and malformed webhooks, over HTTP

VOTE_TABLES = ("annotation", "decision", "task_check", "gold_answer", "annotator_status")


def vote_rows(service: LiveService) -> dict[str, Any]:
    with service.services.database.engine.connect() as connection:
        counts = {
            t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in VOTE_TABLES
        }
        statuses = connection.execute(text('SELECT id, status FROM "candidate" ORDER BY id')).all()
    return {**counts, "candidates": [tuple(s) for s in statuses]}


def pushed_task(service: LiveService, round_id: int) -> int:
    """Submit a candidate that fools the tiny model ("neutral" always) and wait for its task."""
    submitted = service.call(
        "POST",
        f"/api/rounds/{round_id}/candidates",
        token=WRITER_TOKEN,
        json={"text": f"A fine day in round {round_id}.", "writer_label": "positive"},
    )
    assert submitted.status_code == 201, submitted.text
    url = f"/api/candidates/{submitted.json()['id']}"
    wait_for("the push to Label Studio", lambda: service.call("GET", url).json()["label_studio_task_id"])
    return int(service.call("GET", url).json()["label_studio_task_id"])


@pytest.fixture
def two_rounds(live_service: LiveService, world: dict[str, Any]) -> dict[str, Any]:
    """Two open rounds of the same service, each with one candidate imported into its project."""
    other = live_service.call("POST", "/api/rounds", json={"name": "other", "task": "sentiment"}).json()
    return {
        "round": world["open"],
        "project": world["project"],
        "task": pushed_task(live_service, world["open"]),
        "other_project": other["label_studio_project_id"],
        "other_task": pushed_task(live_service, other["id"]),
    }


def vote(project: int, task: int, **changes: Any) -> dict[str, Any]:
    """A well-formed ANNOTATION_CREATED webhook, as Label Studio sends it, with ``changes`` to its
    annotation."""
    return {
        "action": "ANNOTATION_CREATED",
        "project": {"id": project},
        "annotation": {
            "id": 555001,
            "task": task,
            "completed_by": 7,
            "result": [
                {
                    "from_name": "label",
                    "to_name": "text",
                    "type": "choices",
                    "value": {"choices": ["positive"]},
                }
            ],
            "was_cancelled": False,
            "lead_time": 3.5,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            **changes,
        },
    }


def post_hook(
    service: LiveService, body: Any = None, *, secret: str | None = WEBHOOK_SECRET, **kwargs: Any
) -> Any:
    headers = dict(kwargs.pop("headers", {}))
    if secret is not None:
        headers["X-Dynaval-Webhook-Secret"] = secret
    if body is not None:
        kwargs["json"] = body
    return service.call("POST", "/webhooks/label-studio", token=None, headers=headers, **kwargs)


def test_forged_webhooks_are_refused_and_write_nothing(
    live_service: LiveService, two_rounds: dict[str, Any]
) -> None:
    good = vote(two_rounds["project"], two_rounds["task"])
    before = vote_rows(live_service)
    secret_field = "X-Dynaval-Webhook-Secret"
    assert_error(post_hook(live_service, good, secret=None), 401, secret_field)
    assert_error(post_hook(live_service, good, secret=""), 401, secret_field)
    assert_error(post_hook(live_service, good, secret=WEBHOOK_SECRET[:-1]), 401, secret_field)
    assert_error(post_hook(live_service, good, secret=WEBHOOK_SECRET.upper()), 401, secret_field)
    assert_error(post_hook(live_service, good, secret=WEBHOOK_SECRET + "x"), 401, secret_field)
    forged_bearer = {"Authorization": f"Bearer {WEBHOOK_SECRET}"}
    assert_error(post_hook(live_service, good, secret=None, headers=forged_bearer), 401, secret_field)
    # A project no round uses.
    assert_error(post_hook(live_service, vote(987654321, two_rounds["task"])), 404, "project.id")
    # The other round's task, sent as this round's project, and the other way round.
    assert_error(post_hook(live_service, vote(two_rounds["project"], two_rounds["other_task"])), 404,
                 "annotation.task")  # fmt: skip
    assert_error(post_hook(live_service, vote(two_rounds["other_project"], two_rounds["task"])), 404,
                 "annotation.task")  # fmt: skip
    assert vote_rows(live_service) == before
    # The same webhook, signed and addressed right, is taken as a hint: its task is read back from
    # Label Studio, which has no annotation 555001, so no vote is stored.
    hinted = post_hook(live_service, good)
    assert hinted.status_code == 200, hinted.text
    assert hinted.json() == {"action": "ANNOTATION_CREATED", "handled": True, "tasks_to_verify": 1}
    wait_verified(live_service.call, two_rounds["round"])
    assert vote_rows(live_service) == before


def test_malformed_webhooks_are_4xx_naming_the_field_and_write_nothing(
    live_service: LiveService, two_rounds: dict[str, Any]
) -> None:
    project, task = two_rounds["project"], two_rounds["task"]
    good = vote(project, task)
    before = vote_rows(live_service)
    json_type = {"Content-Type": "application/json"}

    def refused(body: Any, status: int, field: str, **kwargs: Any) -> None:
        assert_error(post_hook(live_service, body, **kwargs), status, field)

    # Not JSON, or not an object.
    refused(None, 422, "body", data=b"{not json", headers=json_type)
    refused(None, 422, "body", data=b"\xff\xfe\x00garbage", headers=json_type)
    refused(None, 422, "body", data=b"[" * 5000 + b"]" * 5000, headers=json_type)  # nests too deeply
    refused(None, 422, "body", data=json.dumps(good).encode(), headers={"Content-Type": "text/plain"})
    refused(["ANNOTATION_CREATED"], 422, "body")
    refused("ANNOTATION_CREATED", 422, "body")
    # The action and the project.
    refused({**good, "action": 5}, 422, "action")
    refused({k: v for k, v in good.items() if k != "action"}, 422, "action")
    for project_id in ("12", 2**63, 2**64, -1, 0, True, 1.5, None, [project]):
        refused({**good, "project": {"id": project_id}}, 422, "project.id")
    refused({**good, "project": project}, 422, "project.id")
    # The annotation's task: the one thing read from it (wrong types, ids out of 64-bit range).
    for value in (2**63, 2**64, -task, 0, str(task), [task], None, True, 1.5):
        malformed = vote(project, task)
        malformed["annotation"]["task"] = value
        refused(malformed, 422, "annotation.task")
    refused({**good, "annotation": "x"}, 422, "annotation")
    refused({**good, "annotation": None}, 422, "annotation")
    deleted = {"action": "ANNOTATIONS_DELETED", "project": {"id": project}}
    for listed in ("all", [{"id": 2**63}], [{"id": "1"}], [1, 2], [{"id": -1}], None):
        refused({**deleted, "annotations": listed}, 422, "annotations")
    # Oversized: refused before its secret is even looked at.
    padding = "x" * live_service.services.settings.max_body_bytes
    refused({**good, "padding": padding}, 413, "body")
    refused({**good, "padding": padding}, 413, "body", secret=None)
    # More ids than Label Studio sends in one deletion webhook (5,000), compact enough to fit the body.
    compact = json.dumps(
        {**deleted, "annotations": [{"id": i} for i in range(1, 5_002)]}, separators=(",", ":")
    )
    assert len(compact) < live_service.services.settings.max_body_bytes
    refused(None, 413, "annotations", data=compact.encode(), headers=json_type)
    assert vote_rows(live_service) == before


def test_a_webhooks_content_beyond_its_ids_is_never_read(
    live_service: LiveService, two_rounds: dict[str, Any]
) -> None:
    """Wrong types, ids past 64 bits, unreadable times, a bogus result, NaN: none of it is read, so
    none of it is refused or stored. The webhook only names its task, which is read back from Label
    Studio, which has no such annotation: no vote."""
    before = vote_rows(live_service)
    project, task = two_rounds["project"], two_rounds["task"]
    for name, value in (
        ("id", 2**63), ("id", "555001"), ("id", None), ("id", 1.0),
        ("completed_by", 2**63), ("completed_by", True), ("completed_by", None), ("completed_by", "7"),
        ("result", "positive"), ("result", {"choices": ["positive"]}), ("result", ["not a region"]),
        ("created_at", "yesterday"), ("updated_at", "2026-13-45T00:00:00Z"),
        ("updated_at", "9999-12-31T23:59:59Z"),
    ):  # fmt: skip
        odd = vote(project, task)
        odd["annotation"][name] = value
        hinted = post_hook(live_service, odd)
        assert hinted.status_code == 200 and hinted.json()["tasks_to_verify"] == 1, (name, value, hinted.text)
    raw = json.dumps(vote(project, task)).replace('"lead_time": 3.5', '"lead_time": NaN')
    assert "NaN" in raw
    hinted = post_hook(live_service, data=raw.encode(), headers={"Content-Type": "application/json"})
    assert hinted.status_code == 200 and hinted.json()["handled"] is True, hinted.text
    wait_verified(live_service.call, two_rounds["round"])
    assert vote_rows(live_service) == before


def test_values_no_database_stores_are_refused_naming_the_field(
    live_service: LiveService, world: dict[str, Any]
) -> None:
    """Ids past the database's integers, NUL characters (PostgreSQL stores none), unpaired
    surrogates (no UTF-8 for them), NaN (not JSON) and JSON nested past the parser's depth: each a
    4xx naming the field, on every endpoint that takes them, never a database error."""
    before = snapshot(live_service, world["ls"])
    call, round_id = live_service.call, world["open"]
    json_type = {"Content-Type": "application/json"}
    for too_big in (2**31, 2**63, 10**30):
        assert_error(call("GET", f"/api/rounds/{too_big}"), 404, "round_id")
        assert_error(call("POST", f"/api/rounds/{too_big}/candidates", json={}), 404, "round_id")
    assert_error(call("GET", "/api/candidates/%00"), 404, "candidate_id")
    assert_error(call("POST", "/api/candidates/a%00b/override", json={}), 404, "candidate_id")
    assert_error(call("GET", f"/api/rounds/{round_id}/agreement?seed=-1"), 422, "seed")
    assert_error(call("GET", f"/api/rounds/{round_id}/agreement?seed={2**63}"), 422, "seed")
    assert_error(call("GET", f"/api/rounds/{round_id}/agreement?bootstrap=%00"), 422, "bootstrap")
    assert_error(call("GET", f"/api/rounds/{round_id}/dataset?format=jsonl%00"), 422, "format")
    candidates = f"/api/rounds/{round_id}/candidates"
    good = {"text": "Fine.", "writer_label": "positive"}
    assert_error(call("POST", candidates, json={**good, "writer_id": "w\u00001"}), 422, "writer_id")
    assert_error(call("POST", candidates, json={**good, "text\u0000": "x"}), 422, "body")
    raw = json.dumps(good).replace('"Fine."', '"Fine \\ud800"')
    assert_error(call("POST", candidates, data=raw.encode(), headers=json_type), 422, "text")
    raw = json.dumps({**good, "extra": 1}).replace("1}", "NaN}")
    assert_error(call("POST", candidates, data=raw.encode(), headers=json_type), 422, "body", says="NaN")
    deep = b"[" * 5000 + b"]" * 5000
    assert_error(call("POST", candidates, data=deep, headers=json_type), 422, "body", says="nests")
    batch = {"candidates": [good, {**good, "text": "nul \u0000"}]}
    assert_error(call("POST", f"{candidates}/batch", json=batch), 422, "candidates[1].text")
    assert_error(call("POST", "/api/rounds", json={"name": "r\u0000", "task": "sentiment"}), 422, "name")
    gold = {"items": [{"text": "gold\u0000", "label": "positive"}]}
    assert_error(call("POST", f"/api/rounds/{round_id}/gold", json=gold), 422, "items[0].text")
    exclusion = {"excluded": True, "reason": "why\u0000"}
    assert_error(
        call("POST", f"/api/rounds/{round_id}/annotators/a/exclusion", json=exclusion), 422, "reason"
    )
    assert snapshot(live_service, world["ls"]) == before
