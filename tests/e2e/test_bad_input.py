"""Every endpoint's bad requests: a 4xx that names the field and the reason, and nothing written.

Runs against the live service wired to the real Label Studio, so "nothing written" covers both
our database and Label Studio's projects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk import LabelStudio
from sqlalchemy import text

from tests.fixtures.service import WEBHOOK_SECRET, WRITER_TOKEN, LiveService
from tests.support.tiny_model import build_tiny_model

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
    good = {"text": "Lovely day.", "writer_label": "positive", "writer_id": "w1"}

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
    assert_error(post({**good, "writer_id": ""}), 422, "writer_id")
    assert_error(post({k: v for k, v in good.items() if k != "writer_id"}), 422, "writer_id")
    assert_error(post({**good, "writer_id": "w" * 201}), 422, "writer_id")
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
    assert_error(hook({**payload, "annotation": {"task": 1}}), 422, "annotation")
    assert_error(hook({**payload, "annotation": "x"}), 422, "annotation")
    assert_error(
        hook({"action": "ANNOTATIONS_DELETED", "project": {"id": world["project"]}, "annotations": "all"}),
        422,
        "annotations",
    )
    ignored = hook({"action": "PROJECT_UPDATED", "project": {"id": world["project"]}})
    assert ignored.status_code == 200 and ignored.json()["handled"] is False
    assert snapshot(live_service, world["ls"]) == before
