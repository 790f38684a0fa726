"""Label Studio's webhook over HTTP: the path in front of Flask answers as the Flask route does.

An ordinary webhook (POST, a JSON body of known length, no query string) is answered by
:class:`dynaval.entrypoints.webhook_wsgi.WebhookFastPath`; anything else reaches the Flask route.
A query string sends the same request to the Flask route, so each case is sent both ways and the
answers and the stored state are compared. Candidates are written straight into the database (SQLite
and PostgreSQL), as in ``test_verified_votes.py``, whose fake of our Label Studio port holds what
Label Studio has.
"""

from __future__ import annotations

import functools
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import EnvironBuilder

from dynaval.entrypoints.errors import render_error
from dynaval.entrypoints.webhook_wsgi import WEBHOOK_PATH, WebhookFastPath
from dynaval.service_layer.services import Services
from dynaval.service_layer.verification import verify_round
from tests.fixtures.service import WEBHOOK_SECRET
from tests.integration.test_verified_votes import (
    PROJECT,
    add_candidate,
    add_round,
    candidate_state,
    waiting_tasks,
)
from tests.support.label_studio_copy import T0, LabelStudioCopy, annotation_json, deletion_webhook, webhook


def annotation_payload(
    annotation_id: int,
    task_id: int,
    annotator: int,
    label: str | None,
    *,
    project_id: int = PROJECT,
    **kwargs: Any,
) -> dict[str, Any]:
    action = kwargs.pop("action", "ANNOTATION_CREATED")
    return webhook(action, project_id, annotation_json(annotation_id, task_id, annotator, label, **kwargs))


FAST = WEBHOOK_PATH
VIA_FLASK = WEBHOOK_PATH + "?via=flask"
SECRET = {"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET}


def answer(client: FlaskClient, path: str, **kwargs: Any) -> tuple[int, Any, str | None]:
    response = client.post(path, **kwargs)
    assert response.content_type == "application/json"
    return response.status_code, response.get_json(), response.headers.get("Retry-After")


@pytest.mark.usefixtures("label_studio")
def test_refusals_are_the_same_on_both_paths_and_write_nothing(app: Flask, services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    good = annotation_payload(1, 11, 101, "negative")
    deep = b"[" * 5000 + b"]" * 5000
    cases: list[tuple[int, dict[str, Any]]] = [
        (401, {"json": good}),
        (401, {"json": good, "headers": {"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET + "x"}}),
        (401, {"json": good, "headers": {"Authorization": f"Bearer {WEBHOOK_SECRET}"}}),
        (422, {"data": b"{not json", "headers": SECRET, "content_type": "application/json"}),
        (422, {"data": b"\xff\xfe\x00", "headers": SECRET, "content_type": "application/json"}),
        (422, {"data": deep, "headers": SECRET, "content_type": "application/json"}),
        (422, {"data": b"", "headers": SECRET, "content_type": "application/json"}),
        (422, {"json": ["ANNOTATION_CREATED"], "headers": SECRET}),
        (422, {"json": {**good, "action": 5}, "headers": SECRET}),
        (422, {"json": {**good, "project": {"id": 2**63}}, "headers": SECRET}),
        (422, {"json": {**good, "annotation": {**good["annotation"], "task": "11"}}, "headers": SECRET}),
        (422, {"json": {"action": "ANNOTATIONS_DELETED", "project": {"id": PROJECT}}, "headers": SECRET}),
        (404, {"json": annotation_payload(1, 11, 101, "negative", project_id=999), "headers": SECRET}),
        (404, {"json": annotation_payload(1, 12, 101, "negative"), "headers": SECRET}),
        (200, {"json": {**good, "action": "PROJECT_UPDATED"}, "headers": SECRET}),
    ]
    before = candidate_state(services, candidate_id)
    with app.test_client() as client:
        for status, request in cases:
            fast = answer(client, FAST, **request)
            flask = answer(client, VIA_FLASK, **request)
            assert fast == flask, request
            assert fast[0] == status, (request, fast)
            if status != 200:
                assert set(fast[1]["error"]) == {"code", "message", "field"}
    assert candidate_state(services, candidate_id) == before
    assert waiting_tasks(services) == []


def test_votes_sent_either_way_end_in_the_same_state(
    app: Flask, services: Services, label_studio: LabelStudioCopy
) -> None:
    """One candidate gets its webhooks before Flask, its twin the same ones through Flask; each
    webhook's task is read back from Label Studio after it."""
    round_id = add_round(services)
    twins = {
        11: add_candidate(services, round_id, task_id=11),
        12: add_candidate(services, round_id, task_id=12),
    }
    answers: dict[int, list[tuple[int, Any, str | None]]] = {11: [], 12: []}
    with app.test_client() as client:
        for task, path, base in ((11, FAST, 0), (12, VIA_FLASK, 100)):
            edited = annotation_json(base + 3, task, 103, "positive", updated=T0 + timedelta(minutes=1))
            # (what happens in Label Studio, the webhook that comes): "put" or "delete" an annotation,
            # or None for a webhook about nothing Label Studio has (forged, or a repeat).
            steps: list[tuple[str | None, Any]] = [
                (None, annotation_payload(base + 99, task, 109, "negative")),  # forged
                ("put", annotation_json(base + 1, task, 101, "negative")),
                ("put", annotation_json(base + 2, task, 102, "negative")),
                (None, annotation_payload(base + 2, task, 102, "negative")),  # repeated: changes nothing
                ("put", annotation_json(base + 3, task, 103, "negative")),
                ("put", edited),
                ("delete", base + 1),
            ]
            for change, argument in steps:
                if change == "put":
                    label_studio.put(argument)
                    body = webhook("ANNOTATION_CREATED", PROJECT, argument)
                elif change == "delete":
                    label_studio.delete(argument)
                    body = deletion_webhook(PROJECT, [argument])
                else:
                    body = argument
                answers[task].append(answer(client, path, json=body, headers=SECRET))
                verify_round(services, round_id)
    assert answers[11] == answers[12]
    assert [a[0] for a in answers[11]] == [200] * 7
    assert [a[1]["tasks_to_verify"] for a in answers[11]] == [1] * 7
    fast_state, flask_state = candidate_state(services, twins[11]), candidate_state(services, twins[12])
    assert fast_state[:2] == flask_state[:2] == ("in_validation", 5)  # 2 votes left: short of 3
    assert [(annotator, label) for _, annotator, label in fast_state[2]] == [
        ("102", "negative"),
        ("103", "positive"),
    ]
    assert [(a, label) for _, a, label in flask_state[2]] == [(a, label) for _, a, label in fast_state[2]]


class ResetStream(io.RawIOBase):
    """A request body whose client resets the connection after ``sent`` bytes."""

    def __init__(self, body: bytes, sent: int) -> None:
        self._left = io.BytesIO(body[:sent])

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._left.read(len(buffer))
        if not data:
            raise ConnectionResetError("the client went away")
        buffer[: len(data)] = data
        return len(data)


def raw_answer(app: Flask, path: str, stream: Any, content_length: int) -> tuple[str, Any]:
    """Call the app as gunicorn does, with a body that may end before its Content-Length."""
    path, _, query = path.partition("?")
    environ = EnvironBuilder(
        path=path,
        query_string=query,
        method="POST",
        data=b"",
        content_type="application/json",
        headers=SECRET,
    ).get_environ()
    environ["wsgi.input"] = stream
    environ["CONTENT_LENGTH"] = str(content_length)
    started: list[str] = []
    data = b"".join(app.wsgi_app(environ, lambda status, headers, *_: started.append(status)))
    return started[0], json.loads(data)


@pytest.mark.usefixtures("label_studio")
def test_a_client_that_goes_away_mid_body_gets_the_same_answer_both_ways(
    app: Flask, services: Services
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    body = json.dumps(annotation_payload(1, 11, 101, "negative")).encode()
    before = candidate_state(services, candidate_id)
    # The body ends before its Content-Length: Werkzeug's ClientDisconnected, a 400, both ways.
    fast = raw_answer(app, FAST, io.BytesIO(body[:100]), len(body))
    assert fast == raw_answer(app, VIA_FLASK, io.BytesIO(body[:100]), len(body))
    assert fast[0] == "400 BAD REQUEST" and fast[1]["error"]["code"] == "http_error"
    # The connection is reset mid-body.
    fast = raw_answer(app, FAST, ResetStream(body, 100), len(body))
    assert fast == raw_answer(app, VIA_FLASK, ResetStream(body, 100), len(body))
    assert fast[0] in ("400 BAD REQUEST", "500 INTERNAL SERVER ERROR"), fast
    assert candidate_state(services, candidate_id) == before
    assert waiting_tasks(services) == []


def test_a_database_failure_gets_the_same_answer_both_ways(app: Flask, services: Services) -> None:
    """Whatever the database raises mid-webhook, both paths answer it alike (SQLite: a locked or
    broken file is a 503 the caller may retry)."""
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=11)
    with services.database.engine.begin() as connection:
        cascade = "" if services.database.is_sqlite else " CASCADE"
        connection.exec_driver_sql(f"DROP TABLE task_check{cascade}")
    with app.test_client() as client:
        fast = answer(client, FAST, json=annotation_payload(1, 11, 101, "negative"), headers=SECRET)
        flask = answer(client, VIA_FLASK, json=annotation_payload(1, 11, 101, "negative"), headers=SECRET)
    assert fast == flask
    if services.database.is_sqlite:  # "no such table" is an OperationalError
        assert fast[0] == 503 and fast[1]["error"]["code"] == "unavailable" and fast[2] == "1"
    else:  # PostgreSQL's UndefinedTable is not: an internal error, its details in the log only
        assert fast[0] == 500 and fast[1]["error"]["code"] == "internal"


def test_only_an_ordinary_webhook_is_answered_before_flask(services: Services) -> None:
    """Every request that is not an ordinary webhook reaches the app behind, untouched."""
    reached: list[str] = []

    def behind(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        reached.append(
            f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}?{environ.get('QUERY_STRING', '')}"
        )
        start_response("418 I'M A TEAPOT", [("Content-Type", "text/plain")])
        return [b"behind"]

    fast_path = WebhookFastPath(
        behind, services, functools.partial(render_error, max_body_bytes=services.settings.max_body_bytes)
    )

    def status_of(environ_changes: dict[str, str] | None = None, **kwargs: Any) -> str:
        environ = EnvironBuilder(**kwargs).get_environ()
        environ.update(environ_changes or {})
        started: list[str] = []
        body = b"".join(fast_path(environ, lambda status, headers, *_: started.append(status)))
        assert body  # every answer has a body
        return started[0]

    body = json.dumps({"action": "PROJECT_UPDATED"}).encode()
    json_type = "application/json"
    limit = services.settings.max_body_bytes
    # An ordinary webhook, refused (no secret) or ignored (an action we do not handle): answered here.
    assert status_of(path=FAST, method="POST", data=body, content_type=json_type) == "401 UNAUTHORIZED"
    assert status_of(path=FAST, method="POST", data=body, content_type=json_type, headers=SECRET) == "200 OK"
    charset = "application/json; charset=utf-8"
    assert status_of(path=FAST, method="POST", data=body, content_type=charset, headers=SECRET) == "200 OK"
    assert reached == []
    # Everything else goes behind.
    behind_cases: list[dict[str, Any]] = [
        {"path": FAST, "method": "GET"},
        {"path": FAST + "/", "method": "POST", "data": body, "content_type": json_type},
        {"path": "/api/rounds", "method": "POST", "data": body, "content_type": json_type},
        {"path": FAST, "method": "POST", "data": body, "content_type": json_type, "query_string": "a=1"},
        {"path": FAST, "method": "POST", "data": body, "content_type": "text/plain"},
        {"path": FAST, "method": "POST", "data": body, "content_type": "application/vnd.api+json"},
        {"path": FAST, "method": "POST", "data": b"x" * (limit + 1), "content_type": json_type},
        # A chunked body, whatever its Content-Length says: Flask decides.
        {
            "path": FAST,
            "method": "POST",
            "data": body,
            "content_type": json_type,
            "environ_changes": {"HTTP_TRANSFER_ENCODING": "chunked"},
        },
    ]
    for case in behind_cases:
        assert status_of(**case) == "418 I'M A TEAPOT", case
    chunked = EnvironBuilder(path=FAST, method="POST", data=body, content_type=json_type).get_environ()
    del chunked["CONTENT_LENGTH"]  # a chunked body: its length is not known up front
    list(fast_path(chunked, lambda *_: None))
    assert len(reached) == len(behind_cases) + 1
