"""Who may call what: every route the app serves, with every kind of caller.

``ACCESS`` names every route the app serves (Flask's url_map and the webhook endpoint in front of
it), with its method, and who may call it; the first test fails when the app serves a route the
table leaves out, so a new route cannot be forgotten. Each route is then called by each caller (no
token, an unknown token, two writers, a collector, an exporter, a lead, the webhook secret as a
bearer token and in its own header) and the answer must be the table's: served (any status but
401, 403 or a failure), or 401/403 with the error naming the field, or for the lead's dashboard
pages the login redirect or the "leads only" page.

The app runs on SQLite with Label Studio unreachable (no route needs it to decide who may call it);
the writers' own candidates are checked on SQLite and PostgreSQL, with a real (tiny) model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from dynaval.adapters.db.orm import CandidateRow, RoundRow
from dynaval.bootstrap import bootstrap
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.entrypoints.app import create_app, served_routes, shutdown
from dynaval.entrypoints.auth import Role
from dynaval.service_layer.services import Services
from dynaval.settings import Settings
from tests.fixtures.service import LEAD_TOKEN, WEBHOOK_SECRET, free_port, make_settings

WRITER_A = "writer-a-token-0123456789abcdef"  # configured as ann=<token>
WRITER_B = "writer-b-token-0123456789abcdef"  # configured plain: its name is derived
EXPORTER = "exporter-token-0123456789abcdef"
COLLECTOR = "collector-token-0123456789abcdef"  # configured as form=<token>
REPORTER = "reporter-token-0123456789abcdef"  # configured as canary-bot=<token>
UNKNOWN = "not-a-token-of-anyone-0123456789"
ANNOTATOR = "annotator_0123456789abcdef0123456789abcdef"


@dataclass(frozen=True)
class Access:
    """Who may call one route: ``public``, ``api`` (a role in ``roles``; ``own``: a writer, a
    collector or a reporter only a candidate it submitted), ``webhook`` (the webhook secret
    header), ``page`` (a lead's dashboard page) or ``login`` (the login form, which reads the token
    from the form)."""

    kind: str
    roles: tuple[Role, ...] = ()
    own: bool = False
    answer: str = "served"  # what a public route answers everyone


PUBLIC = Access("public")
PAGE = Access("page")
LEAD = Access("api", (Role.LEAD,))
EVERY_ROLE = Access("api", (Role.WRITER, Role.COLLECTOR, Role.EXPORTER, Role.REPORTER, Role.LEAD))
SUBMITTERS = Access("api", (Role.WRITER, Role.COLLECTOR, Role.LEAD))
REPORTERS = Access("api", (Role.REPORTER, Role.LEAD))
READERS = Access("api", (Role.EXPORTER, Role.LEAD))
OWN_WRITERS = Access("api", (Role.WRITER, Role.LEAD))  # those who write as themselves

ACCESS: dict[tuple[str, str], Access] = {
    ("GET", "/health"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("POST", "/webhooks/label-studio"): Access("webhook"),
    ("POST", "/api/rounds"): LEAD,
    ("GET", "/api/rounds"): EVERY_ROLE,
    ("GET", "/api/me"): EVERY_ROLE,
    ("GET", "/api/task-types"): EVERY_ROLE,
    ("GET", "/api/rounds/<int:round_id>"): EVERY_ROLE,
    ("POST", "/api/rounds/<int:round_id>/predict"): SUBMITTERS,
    ("GET", "/api/rounds/<int:round_id>/my-candidates"): OWN_WRITERS,
    ("GET", "/api/rounds/<int:round_id>/model"): SUBMITTERS,
    ("POST", "/api/rounds/<int:round_id>/close"): LEAD,
    ("POST", "/api/rounds/<int:round_id>/freeze"): LEAD,
    ("POST", "/api/rounds/<int:round_id>/candidates"): SUBMITTERS,
    ("POST", "/api/rounds/<int:round_id>/candidates/batch"): SUBMITTERS,
    ("POST", "/api/rounds/<int:round_id>/captures"): REPORTERS,
    ("GET", "/api/candidates/<candidate_id>"): Access(
        "api", (Role.WRITER, Role.COLLECTOR, Role.REPORTER, Role.LEAD), own=True
    ),
    ("POST", "/api/candidates/<candidate_id>/override"): LEAD,
    ("POST", "/api/rounds/<int:round_id>/sync"): LEAD,
    ("GET", "/api/rounds/<int:round_id>/dataset"): READERS,
    ("GET", "/api/rounds/<int:round_id>/agreement"): READERS,
    ("GET", "/api/rounds/<int:round_id>/health"): READERS,
    ("POST", "/api/rounds/<int:round_id>/gold"): LEAD,
    ("GET", "/api/rounds/<int:round_id>/annotators"): LEAD,
    ("POST", "/api/rounds/<int:round_id>/annotators/<annotator>/exclusion"): LEAD,
    ("GET", "/api/rounds/<int:round_id>/exclusions"): LEAD,
    ("GET", "/api/rounds/<int:round_id>/near-duplicates"): LEAD,
    ("GET", "/api/rounds/<int:round_id>/audit"): LEAD,
    ("POST", "/api/gate"): LEAD,
    ("GET", "/api/gate-runs"): LEAD,
    ("POST", "/api/suite/revalidate"): LEAD,
    ("GET", "/api/suite/suspects"): LEAD,
    ("GET", "/api/models"): READERS,
    ("POST", "/api/releases"): LEAD,
    ("GET", "/api/releases"): READERS,
    ("GET", "/api/releases/<int:release_id>"): READERS,
    ("GET", "/api/releases/<int:release_id>/download"): READERS,
    ("POST", "/api/models/train"): LEAD,
    ("POST", "/api/models/evaluate"): LEAD,
    ("GET", "/api/jobs"): LEAD,
    ("GET", "/api/jobs/<int:job_id>"): LEAD,
    ("POST", "/api/jobs/<int:job_id>/cancel"): LEAD,
    ("GET", "/api/task-types/<task_type>/retraining"): LEAD,
    ("PUT", "/api/task-types/<task_type>/retraining"): LEAD,
    ("POST", "/api/task-types/<task_type>/retraining/run"): LEAD,
    ("GET", "/write"): PUBLIC,  # a static page: its script calls the API with the writer's token
    # A stored image by its signed URL: the signature is the credential (a wrong one: 404 for all).
    ("GET", "/images/<sha256>.png"): PUBLIC,
    ("GET", "/dashboard"): PUBLIC,  # a redirect to the rounds page, which needs a lead
    ("GET", "/dashboard/"): PUBLIC,
    ("GET", "/dashboard/login"): PUBLIC,
    ("POST", "/dashboard/login"): Access("login"),
    # Without a live session there is nothing to end: anyone is sent back to the login.
    ("POST", "/dashboard/logout"): Access("public", answer="to login"),
    ("GET", "/dashboard/static/<path:filename>"): PUBLIC,
    ("GET", "/dashboard/rounds"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>"): PAGE,
    ("GET", "/dashboard/candidates/<candidate_id>"): PAGE,
    ("POST", "/dashboard/candidates/<candidate_id>/override"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>/annotators"): PAGE,
    ("POST", "/dashboard/rounds/<int:round_id>/annotators/<annotator>/exclusion"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>/health"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>/export"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>/export/dataset.jsonl"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>/export/dataset.parquet"): PAGE,
    ("GET", "/dashboard/rounds/<int:round_id>/export/agreement.json"): PAGE,
    ("GET", "/dashboard/releases"): PAGE,
    ("GET", "/dashboard/releases/<int:release_id>"): PAGE,
    ("GET", "/dashboard/releases/<int:release_id>/download"): PAGE,
    ("GET", "/dashboard/models"): PAGE,
    ("GET", "/dashboard/images/<sha256>.png"): PAGE,
    ("POST", "/dashboard/models/revalidate"): PAGE,
    ("POST", "/dashboard/models/retraining/<task_type>"): PAGE,
}


@dataclass(frozen=True)
class Caller:
    name: str
    token: str | None  # sent as "Authorization: Bearer <token>" (and typed into the login form)
    role: Role | None = None
    webhook_header: bool = False

    @property
    def headers(self) -> dict[str, str]:
        headers = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
        if self.webhook_header:
            headers["X-Dynaval-Webhook-Secret"] = WEBHOOK_SECRET
        return headers


CALLERS = [
    Caller("no token", None),
    Caller("unknown token", UNKNOWN),
    Caller("writer A", WRITER_A, Role.WRITER),
    Caller("writer B", WRITER_B, Role.WRITER),
    Caller("collector", COLLECTOR, Role.COLLECTOR),
    Caller("exporter", EXPORTER, Role.EXPORTER),
    Caller("reporter", REPORTER, Role.REPORTER),
    Caller("lead", LEAD_TOKEN, Role.LEAD),
    Caller("webhook secret as bearer", WEBHOOK_SECRET),
    Caller("webhook secret header", None, webhook_header=True),
]


def expected(access: Access, caller: Caller) -> str:
    """What ``caller`` must get from a route with ``access`` (see :func:`observed`)."""
    if access.kind == "public":
        return access.answer
    if access.kind == "webhook":
        return "served" if caller.webhook_header else "401 X-Dynaval-Webhook-Secret"
    if access.kind == "login":
        return {Role.LEAD: "served", None: "401 page"}.get(caller.role, "403 page: leads only")
    if access.kind == "page":
        return {Role.LEAD: "served", None: "to login"}.get(caller.role, "403 page: leads only")
    if caller.role is None:
        return "401 Authorization"
    if caller.role not in access.roles:
        return "403 Authorization"
    if access.own and caller.name in ("writer B", "collector", "reporter"):  # the path's is writer A's
        return "403 Authorization"
    return "served"


def observed(response: TestResponse) -> str:
    status = response.status_code
    if status in (401, 403):
        body = response.get_json(silent=True)
        if isinstance(body, dict) and "error" in body:
            assert set(body["error"]) == {"code", "message", "field"}, body
            assert body["error"]["message"], body
            return f"{status} {body['error']['field']}"
        leads_only = "leads only" in response.get_data(as_text=True)
        return f"{status} page" + (": leads only" if leads_only else "")
    if status >= 500 and status != 503:  # 503: Label Studio is unreachable here, by design
        return f"{status} failure"
    if status in (302, 303) and response.headers.get("Location") == "/dashboard/login":
        return "to login"
    return "served"


def served_rules(app: Flask) -> set[tuple[str, str]]:
    """Flask's routes and the webhook endpoint in front of them."""
    return set(served_routes(app))


# ------------------------------------------------------------------------------------ the app


def settings_for(database_url: str, folder: Path, model_dir: Path) -> Settings:
    return make_settings(
        database_url=database_url,
        data_dir=folder / "data",
        label_studio_url=f"http://127.0.0.1:{free_port()}",
        label_studio_api_key="unused-in-these-tests",
        label_studio_timeout_s=2.0,
        public_url="http://127.0.0.1:8000",
        model_dir=model_dir,
        writer_tokens=[f"ann={WRITER_A}", WRITER_B],
        collector_tokens=[f"form={COLLECTOR}"],
        exporter_tokens=[EXPORTER],
        reporter_tokens=[f"canary-bot={REPORTER}"],
        lead_tokens=[LEAD_TOKEN],
    )


@dataclass
class Seeded:
    round_id: int
    own: str  # writer A's candidate
    older: str  # a candidate from before submitters were recorded


def seed(services: Services, model_dir: Path) -> Seeded:
    """An open round with a candidate of writer A's and one without a recorded submitter."""
    with services.database.unit_of_work() as session:
        round_row = RoundRow(
            name="access round",
            task_type="sentiment",
            model_dir=str(model_dir),
            model_name="tiny-model",
            model_hash="sha256:" + "ab12" * 16,
            labels=["positive", "negative", "neutral"],
            policy=DecisionPolicy().to_dict(),
            label_studio_project_id=4242,
        )
        session.add(round_row)
        session.commit()
        session.refresh(round_row)
        assert round_row.id is not None
        rows = [
            CandidateRow(
                id=f"00000000-0000-0000-0000-00000000000{i}",
                round_id=round_row.id,
                inputs={"text": f"Candidate number {i}, quite the thing."},
                writer_label="positive",
                writer_id="raw-writer-id",
                submitted_by=submitter,
                status="not_fooled",
                model_prediction="positive",
                model_probabilities={"positive": 0.8, "negative": 0.1, "neutral": 0.1},
                model_signature="c0ffee" * 10,
                fooled=False,
                submitted_at=datetime(2026, 3, 1, 9, i, tzinfo=UTC),
            )
            for i, submitter in enumerate(["ann", None], start=1)
        ]
        session.add_all(rows)
        session.commit()
        return Seeded(round_id=round_row.id, own=rows[0].id, older=rows[1].id)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    """The app on SQLite, Label Studio unreachable, no background worker; the model folder is
    missing (no route needs the model to decide who may call it)."""
    settings = settings_for(f"sqlite:///{tmp_path / 'dynaval.sqlite3'}", tmp_path, tmp_path / "no-model")
    application = create_app(bootstrap(settings), start_background=False)
    try:
        yield application
    finally:
        shutdown(application)


def path_of(rule: str, seeded: Seeded) -> str:
    values = {
        "round_id": str(seeded.round_id),
        "candidate_id": seeded.own,
        "annotator": ANNOTATOR,
        "filename": "dashboard.css",
        "release_id": "1",  # no release exists: served means a 404 here
        "job_id": "1",  # no job exists: served means a 404 here
        "task_type": "sentiment",
        "sha256": "0" * 64,  # no image of that hash, no signature: served means a 404 here
    }
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: values[m.group(1)], rule)


def call(client: FlaskClient, method: str, path: str, caller: Caller) -> TestResponse:
    if path == "/dashboard/login" and method == "POST":
        # Typed into the form, as a browser would send it: with the form's CSRF token. In a browser
        # of its own, so that the lead's session does not open the pages for the callers after it.
        browser = client.application.test_client()
        form = browser.get(path).get_data(as_text=True)
        csrf = form.split('name="csrf_token" value="')[1].split('"')[0]
        return browser.post(
            path, data={"token": caller.token or "", "csrf_token": csrf}, headers=caller.headers
        )
    if path.startswith("/dashboard/"):  # forms, posted with the bearer header (no CSRF token needed)
        return client.open(path, method=method, data={}, headers=caller.headers)
    body: dict[str, Any] | None = None
    if method in ("POST", "PUT"):
        body = {"action": "PING"} if path == "/webhooks/label-studio" else {}
    return client.open(path, method=method, json=body, headers=caller.headers)


# ----------------------------------------------------------------------------------- the tests


def test_the_table_names_every_route_the_app_serves(app: Flask) -> None:
    served = served_rules(app)
    assert sorted(served - set(ACCESS)) == [], "a route is missing from ACCESS: say who may call it"
    assert sorted(set(ACCESS) - served) == [], "ACCESS names a route the app no longer serves"
    # The roles the table gives an API route are the ones @requires checks (and OpenAPI publishes).
    for rule in app.url_map.iter_rules():
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            access = ACCESS[(method, rule.rule)]
            roles = getattr(app.view_functions[rule.endpoint], "required_roles", ())
            assert roles == tuple(r.value for r in access.roles), (method, rule.rule)


def test_every_route_answers_every_caller_as_the_table_says(app: Flask) -> None:
    services: Services = app.extensions["dynaval"]
    seeded = seed(services, Path("/nonexistent/model"))
    client = app.test_client()
    answers: dict[str, str] = {}
    wanted: dict[str, str] = {}
    # Closing the round first would turn later submissions into 409s: still "served". The order of
    # the calls never changes who may make them.
    for method, rule in sorted(ACCESS):
        path = path_of(rule, seeded)
        for caller in CALLERS:
            key = f"{method} {rule} by {caller.name}"
            answers[key] = observed(call(client, method, path, caller))
            wanted[key] = expected(ACCESS[(method, rule)], caller)
    assert answers == wanted
    assert len(answers) == len(ACCESS) * len(CALLERS)


def test_a_refused_call_names_the_role_it_needs(app: Flask) -> None:
    client = app.test_client()
    writer = client.get("/api/rounds/1/dataset", headers={"Authorization": f"Bearer {WRITER_A}"})
    assert writer.status_code == 403
    assert writer.get_json()["error"] == {
        "code": "forbidden",
        "message": "this needs the exporter or lead role",
        "field": "Authorization",
    }
    exporter = client.post(
        "/api/rounds/1/candidates", json={}, headers={"Authorization": f"Bearer {EXPORTER}"}
    )
    assert exporter.status_code == 403
    assert exporter.get_json()["error"]["message"] == "this needs the writer, collector or lead role"


def test_writers_and_collectors_read_their_own_candidates_and_no_one_elses(
    database_url: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    application = create_app(
        bootstrap(settings_for(database_url, tmp_path, tiny_model_dir)), start_background=False
    )
    try:
        services: Services = application.extensions["dynaval"]
        seeded = seed(services, tiny_model_dir)
        client = application.test_client()

        def get(candidate_id: str, token: str) -> TestResponse:
            return client.get(f"/api/candidates/{candidate_id}", headers={"Authorization": f"Bearer {token}"})

        def submit(token: str, **fields: str) -> str:
            body = {"text": "What a lovely day.", "writer_label": "positive", **fields}
            submitted = client.post(
                f"/api/rounds/{seeded.round_id}/candidates",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            )
            assert submitted.status_code == 201, submitted.get_data(as_text=True)
            candidate_id: str = submitted.get_json()["id"]
            return candidate_id

        by_b = submit(WRITER_B)
        collected = submit(COLLECTOR, writer_id="field-writer-7")
        with services.database.unit_of_work() as session:
            row = session.get(CandidateRow, by_b)
            assert row is not None and row.submitted_by == services.settings.writer_credentials[1].name
            assert row.submitted_by.startswith("writer-") and row.writer_id == row.submitted_by
            row = session.get(CandidateRow, collected)
            assert row is not None and (row.submitted_by, row.writer_id) == ("form", "field-writer-7")

        assert get(by_b, WRITER_B).status_code == 200
        assert get(seeded.own, WRITER_A).status_code == 200
        assert get(collected, COLLECTOR).status_code == 200
        for candidate_id, token in (
            (by_b, WRITER_A),
            (seeded.own, WRITER_B),
            (collected, WRITER_A),
            (collected, WRITER_B),
            (by_b, COLLECTOR),
            (seeded.own, COLLECTOR),
        ):
            refused = get(candidate_id, token)
            assert refused.status_code == 403
            error = refused.get_json()["error"]
            assert error["code"] == "forbidden" and error["field"] == "Authorization"
            assert "another writer's candidate" in error["message"]
        # Candidates from before submitters were recorded: no writer or collector reads them, a lead does.
        for token in (WRITER_A, WRITER_B, COLLECTOR):
            assert get(seeded.older, token).status_code == 403
        for candidate_id in (by_b, seeded.own, seeded.older, collected):
            assert get(candidate_id, LEAD_TOKEN).status_code == 200
            assert get(candidate_id, EXPORTER).status_code == 403
        # An unknown candidate is 404 for a writer too (nothing to be refused).
        missing = get("00000000-0000-0000-0000-0000000000ff", WRITER_A)
        assert missing.status_code == 404 and missing.get_json()["error"]["field"] == "candidate_id"
        # The submitter's name is kept internal: the candidate's JSON shows only the pseudonym.
        assert "submitted_by" not in get(by_b, LEAD_TOKEN).get_json()
    finally:
        shutdown(application)
