"""Label Studio's webhook over HTTP: one endpoint, in front of Flask, owns every request to its path.

:class:`dynaval.entrypoints.webhook.LabelStudioWebhookEndpoint` answers every request to
``/webhooks/label-studio`` (another method, a query string, a chunked body, a body over the limit,
a body that is not JSON) and passes every other request on untouched. Candidates are written
straight into the database (SQLite and PostgreSQL), as in ``test_verified_votes.py``, whose fake of
our Label Studio port holds what Label Studio has.
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
from dynaval.entrypoints.webhook import WEBHOOK_PATH, LabelStudioWebhookEndpoint
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.vote_reading import verify_round
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


SECRET = {"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET}
JSON = "application/json"


def answer(client: FlaskClient, path: str = WEBHOOK_PATH, method: str = "POST", **kwargs: Any) -> Any:
    response = client.open(path, method=method, **kwargs)
    assert response.content_type == JSON
    # The API's security headers, on every answer the endpoint gives.
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-store"
    assert "Content-Security-Policy" in response.headers
    return response


@pytest.mark.usefixtures("label_studio")
def test_refusals_name_the_field_and_write_nothing(app: Flask, services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    good = annotation_payload(1, 11, 101, "negative")
    deep = b"[" * 5000 + b"]" * 5000
    limit = services.settings.max_body_bytes
    cases: list[tuple[int, str | None, dict[str, Any]]] = [
        (401, None, {"json": good}),
        (401, None, {"json": good, "headers": {"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET + "x"}}),
        (401, None, {"json": good, "headers": {"Authorization": f"Bearer {WEBHOOK_SECRET}"}}),
        # The body's size is refused before the secret is looked at.
        (413, None, {"data": b"x" * (limit + 1), "content_type": JSON}),
        (413, None, {"data": b"x" * (limit + 1), "content_type": JSON, "headers": SECRET}),
        (422, "body", {"data": b"{not json", "headers": SECRET, "content_type": JSON}),
        (422, "body", {"data": b"\xff\xfe\x00", "headers": SECRET, "content_type": JSON}),
        (422, "body", {"data": deep, "headers": SECRET, "content_type": JSON}),
        (422, "body", {"data": b"", "headers": SECRET, "content_type": JSON}),
        (422, "body", {"data": json.dumps(good), "headers": SECRET, "content_type": "text/plain"}),
        (422, "body", {"json": ["ANNOTATION_CREATED"], "headers": SECRET}),
        (422, "action", {"json": {**good, "action": 5}, "headers": SECRET}),
        (422, "project.id", {"json": {**good, "project": {"id": 2**63}}, "headers": SECRET}),
        (
            422,
            "annotation.task",
            {"json": {**good, "annotation": {**good["annotation"], "task": "11"}}, "headers": SECRET},
        ),
        (
            422,
            "annotations",
            {"json": {"action": "ANNOTATIONS_DELETED", "project": {"id": PROJECT}}, "headers": SECRET},
        ),
        (404, "project.id", {"json": annotation_payload(1, 11, 101, "x", project_id=999), "headers": SECRET}),
        (404, "annotation.task", {"json": annotation_payload(1, 12, 101, "negative"), "headers": SECRET}),
    ]
    before = candidate_state(services, candidate_id)
    with app.test_client() as client:
        for status, field, request in cases:
            response = answer(client, **request)
            assert response.status_code == status, (request, response.get_json())
            error = response.get_json()["error"]
            assert set(error) == {"code", "message", "field"}
            if field is not None:
                assert error["field"] == field, (request, error)
        # Another method: 405, saying which one is allowed.
        for method in ("GET", "PUT", "DELETE", "PATCH"):
            response = answer(client, method=method, json=good, headers=SECRET)
            assert response.status_code == 405 and response.headers["Allow"] == "POST", method
        # An action the service does not handle is answered and ignored.
        ignored = answer(client, json={**good, "action": "PROJECT_UPDATED"}, headers=SECRET)
        assert ignored.status_code == 200 and ignored.get_json()["handled"] is False
    assert candidate_state(services, candidate_id) == before
    assert waiting_tasks(services) == []


def test_votes_end_in_label_studios_state(
    app: Flask, services: Services, label_studio: LabelStudioCopy
) -> None:
    """Each webhook's task is read back from Label Studio after it: forged and repeated webhooks
    change nothing, an edit and a deletion in Label Studio do. A query string and a charset
    change nothing either."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    edited = annotation_json(3, 11, 103, "positive", updated=T0 + timedelta(minutes=1))
    # (what happens in Label Studio, the webhook that comes): "put" or "delete" an annotation,
    # or None for a webhook about nothing Label Studio has (forged, or a repeat).
    steps: list[tuple[str | None, Any]] = [
        (None, annotation_payload(99, 11, 109, "negative")),  # forged
        ("put", annotation_json(1, 11, 101, "negative")),
        ("put", annotation_json(2, 11, 102, "negative")),
        (None, annotation_payload(2, 11, 102, "negative")),  # repeated: changes nothing
        ("put", annotation_json(3, 11, 103, "negative")),
        ("put", edited),
        ("delete", 1),
    ]
    paths = [WEBHOOK_PATH, WEBHOOK_PATH + "?via=anything"]
    with app.test_client() as client:
        for number, (change, argument) in enumerate(steps):
            if change == "put":
                label_studio.put(argument)
                body = webhook("ANNOTATION_CREATED", PROJECT, argument)
            elif change == "delete":
                label_studio.delete(argument)
                body = deletion_webhook(PROJECT, [argument])
            else:
                body = argument
            response = answer(
                client,
                paths[number % 2],
                data=json.dumps(body),
                content_type=JSON + "; charset=utf-8",
                headers=SECRET,
            )
            assert response.status_code == 200, response.get_json()
            assert response.get_json()["tasks_to_verify"] == 1
            verify_round(services, round_id)
    status, votes, stored = candidate_state(services, candidate_id)
    assert (status, votes) == ("in_validation", 5)  # 2 votes left: short of 3
    assert [(annotator, label) for _, annotator, label in stored] == [
        ("102", "negative"),
        ("103", "positive"),
    ]


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


def raw_answer(
    app: Flask, stream: Any, content_length: int | None, **environ_changes: Any
) -> tuple[str, Any]:
    """Call the app as the WSGI server does, with a body that may end before its Content-Length
    (``content_length`` None: a chunked body, whose length is not known up front)."""
    environ = EnvironBuilder(
        path=WEBHOOK_PATH, method="POST", data=b"", content_type=JSON, headers=SECRET
    ).get_environ()
    environ["wsgi.input"] = stream
    if content_length is None:
        environ.pop("CONTENT_LENGTH", None)
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    else:
        environ["CONTENT_LENGTH"] = str(content_length)
    environ.update(environ_changes)
    started: list[str] = []
    data = b"".join(app.wsgi_app(environ, lambda status, headers, *_: started.append(status)))
    return started[0], json.loads(data)


@pytest.mark.usefixtures("label_studio")
def test_a_client_that_goes_away_mid_body_changes_nothing(app: Flask, services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    body = json.dumps(annotation_payload(1, 11, 101, "negative")).encode()
    before = candidate_state(services, candidate_id)
    # The body ends before its Content-Length: Werkzeug's ClientDisconnected, a 400.
    status, answered = raw_answer(app, io.BytesIO(body[:100]), len(body))
    assert status == "400 BAD REQUEST" and answered["error"]["code"] == "http_error"
    # The connection is reset mid-body: an error, never a stored vote.
    status, answered = raw_answer(app, ResetStream(body, 100), len(body))
    assert status in ("400 BAD REQUEST", "500 INTERNAL SERVER ERROR"), status
    assert candidate_state(services, candidate_id) == before
    assert waiting_tasks(services) == []


@pytest.mark.usefixtures("label_studio")
def test_a_chunked_body_is_read_up_to_the_limit(app: Flask, services: Services) -> None:
    """A server that ends the body itself (``wsgi.input_terminated``, as gunicorn) lets a chunked
    webhook be read, up to DYNAVAL_MAX_BODY_BYTES; one that cannot gives an empty body, a 422."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    body = json.dumps(annotation_payload(1, 11, 101, "negative")).encode()
    status, answered = raw_answer(app, io.BytesIO(body), None, **{"wsgi.input_terminated": True})
    assert (status, answered["tasks_to_verify"]) == ("200 OK", 1)
    assert waiting_tasks(services) == [11]
    limit = services.settings.max_body_bytes
    padded = body[:-1] + b', "pad": "' + b"x" * limit + b'"}'
    status, answered = raw_answer(app, io.BytesIO(padded), None, **{"wsgi.input_terminated": True})
    assert status == "413 REQUEST ENTITY TOO LARGE", answered
    status, answered = raw_answer(app, io.BytesIO(body), None)
    assert status == "422 UNPROCESSABLE ENTITY" and answered["error"]["field"] == "body"
    assert candidate_state(services, candidate_id)[1] == 0


def test_a_database_failure_is_an_error_the_caller_may_retry(app: Flask, services: Services) -> None:
    """Whatever the database raises mid-webhook is rendered as the Flask app renders it (SQLite: a
    locked or broken file is a 503 the caller may retry)."""
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=11)
    with services.database.engine.begin() as connection:
        cascade = "" if services.database.is_sqlite else " CASCADE"
        connection.exec_driver_sql(f"DROP TABLE task_check{cascade}")
    with app.test_client() as client:
        response = answer(client, json=annotation_payload(1, 11, 101, "negative"), headers=SECRET)
    error = response.get_json()["error"]
    if services.database.is_sqlite:  # "no such table" is an OperationalError
        assert (response.status_code, error["code"]) == (503, "unavailable")
        assert response.headers["Retry-After"] == "1"
    else:  # PostgreSQL's UndefinedTable is not: an internal error, its details in the log only
        assert (response.status_code, error["code"]) == (500, "internal")
        assert "task_check" not in error["message"]


def test_every_request_to_the_path_is_answered_here_and_no_other(services: Services) -> None:
    reached: list[str] = []

    def behind(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        reached.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}")
        start_response("418 I'M A TEAPOT", [("Content-Type", "text/plain")])
        return [b"behind"]

    endpoint = LabelStudioWebhookEndpoint(
        behind, services, functools.partial(render_error, max_body_bytes=services.settings.max_body_bytes)
    )

    def status_of(**kwargs: Any) -> str:
        started: list[str] = []
        body = b"".join(endpoint(EnvironBuilder(**kwargs).get_environ(), lambda s, h, *_: started.append(s)))
        assert body  # every answer has a body
        return started[0]

    body = json.dumps({"action": "PROJECT_UPDATED"}).encode()
    limit = services.settings.max_body_bytes
    here: list[tuple[str, dict[str, Any]]] = [
        ("401 UNAUTHORIZED", {"method": "POST", "data": body, "content_type": JSON}),
        ("200 OK", {"method": "POST", "data": body, "content_type": JSON, "headers": SECRET}),
        (
            "200 OK",
            {"method": "POST", "data": body, "content_type": JSON, "query_string": "a=1", "headers": SECRET},
        ),
        ("405 METHOD NOT ALLOWED", {"method": "GET"}),
        ("405 METHOD NOT ALLOWED", {"method": "HEAD"}),
        ("405 METHOD NOT ALLOWED", {"method": "OPTIONS"}),
        (
            "413 REQUEST ENTITY TOO LARGE",
            {"method": "POST", "data": b"x" * (limit + 1), "content_type": JSON},
        ),
        (
            "422 UNPROCESSABLE ENTITY",
            {"method": "POST", "data": body, "content_type": "text/plain", "headers": SECRET},
        ),
    ]
    for status, request in here:
        assert status_of(path=WEBHOOK_PATH, **request) == status, request
    assert reached == []
    for path in (WEBHOOK_PATH + "/", "/webhooks", "/api/rounds", "/health"):
        assert status_of(path=path, method="POST", data=body, content_type=JSON) == "418 I'M A TEAPOT"
    assert reached == [f"POST {path}" for path in (WEBHOOK_PATH + "/", "/webhooks", "/api/rounds", "/health")]
