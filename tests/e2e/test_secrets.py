"""Secrets never leave the service: not in its logs, its error answers, its exports or its database.

One small round runs through the live service and the real Label Studio (three candidates: two
writers' own and one a collector submits for a writer it names; three annotators, an escalation, a
sync, the dataset exported as JSONL and Parquet, the agreement report) while every logger of the
process logs at DEBUG into ``caplog``: the service's own, werkzeug's request lines, SQLAlchemy's
statements with their parameters, the Label Studio SDK's HTTP client (httpx, httpcore) and the
test's HTTP client (urllib3). A handful of refused calls present real secrets in the wrong place.
Then the logs, the refusals, the exports and a dump of every table are searched for every secret:
each writer, collector, lead and exporter token, the Label Studio API key, the webhook, pseudonym,
signing and session secrets, the id of a lead's dashboard session (signed in through the form,
used, then signed out), and the ``project.token`` that Label Studio puts in each webhook payload
(recorded on its way in). The exports must also hold no raw writer id, no writer's token name and
no Label Studio username or email, and their pseudonyms must be HMACs of the pseudonym secret that
another secret does not reproduce.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests
from sqlalchemy import inspect, text

from dynaval.bootstrap import bootstrap
from dynaval.domain.provenance import pseudonym, verify_prediction, writer_pseudonym
from dynaval.entrypoints.app import create_app
from tests.fixtures.service import LiveService, free_port, make_settings
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

POS, NEG = "positive", "negative"
WRITER_A = "writer-a-secret-token-0123456789"
WRITER_B = "writer-b-secret-token-0123456789"
LEAD = "lead-secret-token-0123456789abcd"
EXPORTER = "exporter-secret-token-0123456789"
COLLECTOR = "collector-secret-token-012345678"
COLLECTOR_NAME = "field-form"
WEBHOOK = "webhook-secret-value-0123456789ab"
PSEUDONYM = "pseudonym-secret-value-012345678"
SIGNING = "signing-secret-value-0123456789ab"
SESSION = "session-secret-value-0123456789ab"
WRITER_A_NAME = "writer-ann-7"  # the name writer A's token is configured under
RAW_WRITERS = ("alice.writer@example.org", "bob-the-writer")
OTHER_SECRET = "another-pseudonym-secret-0123456"


class WebhookRecorder:
    """WSGI middleware that keeps the raw body of every webhook Label Studio delivers (the ones with
    the right secret), to learn the payload's ``project.token``, and hands the body on unchanged."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.bodies: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        delivered = environ.get("HTTP_X_DYNAVAL_WEBHOOK_SECRET") == WEBHOOK
        if environ.get("PATH_INFO") == "/webhooks/label-studio" and delivered:
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            self.bodies.append(body)
            environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start_response)


def log_everything(caplog: pytest.LogCaptureFixture) -> list[logging.Logger]:
    """Every logger at DEBUG into ``caplog``; those that do not propagate get its handler too.
    Returns the loggers that got the handler (to take it off again)."""
    caplog.set_level(logging.DEBUG)
    attached = []
    for name in sorted(logging.root.manager.loggerDict):
        logger = logging.getLogger(name)
        caplog.set_level(logging.DEBUG, logger=name)
        if not logger.propagate and caplog.handler not in logger.handlers:
            logger.addHandler(caplog.handler)
            attached.append(logger)
    return attached


@pytest.fixture
def service(
    tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[LiveService, WebhookRecorder]]:
    """The service with every kind of secret configured, built while every logger already logs."""
    attached = log_everything(caplog)
    port = free_port()
    settings = make_settings(
        database_url=f"sqlite:///{tmp_path / 'dynaval.sqlite3'}",
        data_dir=tmp_path / "data",
        label_studio_url=label_studio_server.url,
        label_studio_api_key=label_studio_server.api_key,
        public_url=f"http://127.0.0.1:{port}",
        model_dir=tiny_model_dir,
        writer_tokens=[f"{WRITER_A_NAME}={WRITER_A}", WRITER_B],
        lead_tokens=[f"lee={LEAD}"],
        exporter_tokens=[EXPORTER],
        collector_tokens=[f"{COLLECTOR_NAME}={COLLECTOR}"],
        webhook_secret=WEBHOOK,
        pseudonym_secret=PSEUDONYM,
        signing_secret=SIGNING,
        session_secret=SESSION,
    )
    services = bootstrap(settings)
    live = LiveService(app=create_app(services, start_background=True), services=services, port=port)
    recorder = WebhookRecorder(live.app.wsgi_app)
    live.app.wsgi_app = recorder  # type: ignore[method-assign]
    attached += log_everything(caplog)  # loggers the app created while it was built
    live.start_listening()
    try:
        yield live, recorder
    finally:
        live.close()
        for logger in attached:
            logger.removeHandler(caplog.handler)


def found_in(haystack: str, needles: dict[str, str]) -> list[str]:
    """The names of the needles that occur in ``haystack``."""
    return sorted(name for name, needle in needles.items() if needle in haystack)


def dump_database(live: LiveService) -> str:
    """Every row of every table (whatever the models know of), as text."""
    engine = live.services.database.engine
    lines = []
    with engine.connect() as connection:
        for table in inspect(engine).get_table_names():
            for row in connection.execute(text(f'SELECT * FROM "{table}"')):
                lines.append(f"{table}: {tuple(row)!r}")
    return "\n".join(lines)


def test_no_secret_reaches_a_log_an_error_an_export_or_the_database(
    service: tuple[LiveService, WebhookRecorder],
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    live, recorder = service
    annotators = label_studio_annotators[:3]

    created = live.call(
        "POST", "/api/rounds", token=LEAD, json={"name": "secrets round", "task": "sentiment"}
    )
    assert created.status_code == 201, created.text
    round_id = created.json()["id"]

    writer_b_name = live.services.settings.writer_credentials[1].name  # derived from the plain token
    plan = [  # token, the writer a collector names, text, label, the three annotators' votes
        (WRITER_A, None, "The queue moved fast, what a treat.", POS, [POS, POS]),
        (COLLECTOR, RAW_WRITERS[1], "A refund in only six weeks.", NEG, [NEG, POS, NEG]),
        (WRITER_B, None, "Lovely, the lift is broken again.", POS, [NEG, NEG]),
    ]
    ids = []
    writer_of: dict[str, tuple[str, str | None]] = {}  # candidate -> (raw writer id, collector)
    for token, writer_id, text_, label, _ in plan:
        body = {"text": text_, "writer_label": label}
        if writer_id is not None:
            body["writer_id"] = writer_id
        submitted = live.call("POST", f"/api/rounds/{round_id}/candidates", token=token, json=body)
        assert submitted.status_code == 201 and submitted.json()["fooled"] is True, submitted.text
        ids.append(submitted.json()["id"])
        writer_of[ids[-1]] = {
            WRITER_A: (WRITER_A_NAME, None),
            WRITER_B: (writer_b_name, None),
            COLLECTOR: (str(writer_id), COLLECTOR_NAME),
        }[token]

    def candidate(cid: str) -> dict[str, Any]:
        wait_verified(functools.partial(live.call, token=LEAD), round_id)
        body: dict[str, Any] = live.call("GET", f"/api/candidates/{cid}", token=LEAD).json()
        return body

    def sync() -> None:  # push what is queued, reconcile, escalate (the background does it too)
        synced = live.call("POST", f"/api/rounds/{round_id}/sync", token=LEAD)
        assert synced.status_code == 200, synced.text

    sync()
    wait_for("candidates pushed", lambda: all(candidate(c)["status"] == "in_validation" for c in ids))
    for cid, (*_, votes) in zip(ids, plan, strict=True):
        task_id = candidate(cid)["label_studio_task_id"]
        for annotator, vote in zip(annotators, votes[:2], strict=False):
            label_studio_server.annotate(task_id, annotator.id, vote)
        if len(votes) == 3:
            assert candidate(cid)["status"] == "escalated"
            sync()  # Label Studio is asked for the third vote
            label_studio_server.annotate(task_id, annotators[2].id, votes[2])
    wait_for(
        "every decision",
        lambda: [candidate(c)["status"] for c in ids] == ["accepted", "accepted", "rejected"],
    )
    sync()

    # The lead signs in to the dashboard: the session id in the cookie is a secret too.
    dashboard = live.url + "/dashboard"
    login_form = live.session.get(dashboard + "/login", timeout=60)
    login_csrf = login_form.text.split('name="csrf_token" value="')[1].split('"')[0]
    signed_in = live.session.post(
        dashboard + "/login",
        data={"token": LEAD, "csrf_token": login_csrf},
        timeout=60,
        allow_redirects=False,
    )
    assert signed_in.status_code == 303, signed_in.text
    session_id = live.session.cookies.get("dynaval_session", path="/dashboard")
    assert isinstance(session_id, str) and len(session_id) >= 32
    dashboard_pages = [
        live.session.get(dashboard + path, timeout=60)
        for path in (
            "/rounds",
            f"/rounds/{round_id}",
            f"/candidates/{ids[0]}",
            f"/rounds/{round_id}/annotators",
        )
    ]
    assert [p.status_code for p in dashboard_pages] == [200, 200, 200, 200]

    # Refusals, several of them with a real secret in the wrong place.
    base = f"/api/rounds/{round_id}"
    login_form = live.session.get(dashboard + "/login", timeout=60)  # the login took its cookie
    login_csrf = login_form.text.split('name="csrf_token" value="')[1].split('"')[0]
    refusals = {
        "unknown token": live.call("GET", "/api/rounds", token="not-a-token-of-anyone-0123456789"),
        "lead token, wrong scheme": live.call(
            "GET", "/api/rounds", token=None, headers={"Authorization": f"Token {LEAD}"}
        ),
        "webhook secret as a bearer token": live.call("GET", "/api/rounds", token=WEBHOOK),
        "another writer's candidate": live.call("GET", f"/api/candidates/{ids[0]}", token=WRITER_B),
        "a writer's candidate, by a collector": live.call(
            "GET", f"/api/candidates/{ids[0]}", token=COLLECTOR
        ),
        "a writer naming another writer": live.call(
            "POST",
            f"{base}/candidates",
            token=WRITER_B,
            json={"text": "x", "writer_label": POS, "writer_id": WRITER_A_NAME},
        ),
        "exporter creates a round": live.call("POST", "/api/rounds", token=EXPORTER, json={"name": LEAD}),
        "writer reads the dataset": live.call("GET", f"{base}/dataset", token=WRITER_A),
        "bad label": live.call(
            "POST",
            f"{base}/candidates",
            token=WRITER_A,
            json={"text": "x", "writer_label": SIGNING, "writer_id": "w"},
        ),
        "wrong webhook secret": live.call(
            "POST",
            "/webhooks/label-studio",
            token=None,
            headers={"X-Dynaval-Webhook-Secret": LEAD},
            json={"action": "ANNOTATION_CREATED", "project": {"id": 1, "token": PSEUDONYM}},
        ),
        "webhook secret as a lead token": live.call(
            "POST",
            "/webhooks/label-studio",
            token=WEBHOOK,
            json={"action": "ANNOTATION_CREATED", "project": {"id": 1}},
        ),
        "dashboard login with the webhook secret": live.session.post(
            dashboard + "/login", data={"token": WEBHOOK, "csrf_token": login_csrf}, timeout=60
        ),
        "dashboard login as a writer": live.session.post(
            dashboard + "/login", data={"token": WRITER_A, "csrf_token": login_csrf}, timeout=60
        ),
        "dashboard login without the form's token": requests.post(
            dashboard + "/login", data={"token": LEAD}, timeout=60
        ),
    }
    assert {k: r.status_code for k, r in refusals.items()} == {
        "unknown token": 401,
        "lead token, wrong scheme": 401,
        "webhook secret as a bearer token": 401,
        "another writer's candidate": 403,
        "a writer's candidate, by a collector": 403,
        "a writer naming another writer": 403,
        "exporter creates a round": 403,
        "writer reads the dataset": 403,
        "bad label": 422,
        "wrong webhook secret": 401,
        "webhook secret as a lead token": 401,
        "dashboard login with the webhook secret": 401,
        "dashboard login as a writer": 403,
        "dashboard login without the form's token": 400,
    }
    # The logout revokes the session in the database (its statements are logged too).
    rounds_page = live.session.get(dashboard + "/rounds", timeout=60)
    logout_csrf = rounds_page.text.split('name="csrf_token" value="')[1].split('"')[0]
    signed_out = live.session.post(
        dashboard + "/logout", data={"csrf_token": logout_csrf}, timeout=60, allow_redirects=False
    )
    assert signed_out.status_code == 303

    # Exports, by the exporter: the dataset as JSONL and as Parquet, and the agreement report.
    jsonl = live.call("GET", f"{base}/dataset?format=jsonl", token=EXPORTER)
    parquet = live.call("GET", f"{base}/dataset?format=parquet", token=EXPORTER)
    agreement = live.call("GET", f"{base}/agreement?bootstrap=50", token=EXPORTER)
    assert (jsonl.status_code, parquet.status_code, agreement.status_code) == (200, 200, 200)
    records = [json.loads(line) for line in jsonl.text.splitlines()]
    assert sorted(r["example_id"] for r in records) == sorted(ids[:2])
    rows = pq.read_table(io.BytesIO(parquet.content)).to_pylist()
    assert sorted(r["example_id"] for r in rows) == sorted(ids[:2])

    # The webhook payloads carried the project's token; nothing may keep it.
    payloads = [json.loads(body) for body in recorder.bodies]
    assert len(payloads) >= 7  # one per vote at least
    project_tokens = {p["project"].get("token") for p in payloads}
    assert len(project_tokens) == 1, "Label Studio's webhook payloads no longer carry project.token"
    (project_token,) = project_tokens
    assert isinstance(project_token, str) and len(project_token) >= 16

    secrets = {
        "writer A's token": WRITER_A,
        "writer B's token": WRITER_B,
        "the lead's token": LEAD,
        "the exporter's token": EXPORTER,
        "the collector's token": COLLECTOR,
        "the Label Studio API key": label_studio_server.api_key,
        "the webhook secret": WEBHOOK,
        "the pseudonym secret": PSEUDONYM,
        "the signing secret": SIGNING,
        "the session secret": SESSION,
        "the payload's project.token": project_token,
        "the dashboard session id": session_id,
    }
    assert all(len(s) >= 16 for s in secrets.values())

    # The logs: every logger's records, with their tracebacks, as captured.
    names = {r.name.split(".")[0] for r in caplog.records}
    assert {"werkzeug", "sqlalchemy", "httpx", "httpcore", "urllib3"} <= names, names
    logs = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert found_in(logs, secrets) == []
    assert f"/api/candidates/{ids[0]}" in logs  # the request lines were captured

    # The error answers: JSON naming the field, never a secret, never a traceback.
    for name, response in refusals.items():
        assert found_in(response.text, secrets) == [], name
        assert "Traceback" not in response.text, name
        if response.headers["Content-Type"].startswith("application/json"):
            error = response.json()["error"]
            assert error["field"], name

    # The dashboard's pages (their CSRF tokens are HMACs of the session id, never the id).
    for response in [*dashboard_pages, rounds_page]:
        assert found_in(response.text, secrets) == [], response.url

    # The exports: no secret, no raw writer id or submitter name, no Label Studio identity.
    exported = {
        "dataset.jsonl": jsonl.text,
        "dataset.parquet (bytes)": parquet.content.decode("latin-1"),
        "dataset.parquet (values)": json.dumps(rows, ensure_ascii=False),
        "agreement": agreement.text,
    }
    identities = {f"raw writer id {w}": w for w in RAW_WRITERS} | {
        "writer A's name": WRITER_A_NAME,
        "writer B's name": writer_b_name,
    }
    for annotator in label_studio_server.client.users.list():
        if annotator.id != label_studio_server.admin_user_id:
            assert annotator.email and len(annotator.username or "") >= 4
            identities[f"email of user {annotator.id}"] = annotator.email
            identities[f"username of user {annotator.id}"] = annotator.username
    for name, content in exported.items():
        assert found_in(content, secrets) == [], name
        assert found_in(content, identities) == [], name

    # Pseudonyms are HMACs of the pseudonym secret; another secret (or none) does not make them.
    ls_ids = [str(a.id) for a in annotators]
    assert sorted(r["collected_by"] or "" for r in records) == ["", COLLECTOR_NAME]
    for record in records:
        raw, collector = writer_of[record["example_id"]]
        assert record["collected_by"] == collector
        assert record["writer"] == writer_pseudonym(PSEUDONYM, raw, collector)
        assert record["writer"] != writer_pseudonym(OTHER_SECRET, raw, collector)
        for unkeyed_id in (raw, f"{collector}:{raw}"):
            unkeyed = hashlib.sha256(f"writer:{unkeyed_id}".encode()).hexdigest()
            assert record["writer"].removeprefix("writer_") not in unkeyed
        for vote in record["votes"]:
            assert vote["annotator"] in {pseudonym(PSEUDONYM, "annotator", i) for i in ls_ids}
            assert vote["annotator"] not in {pseudonym(OTHER_SECRET, "annotator", i) for i in ls_ids}
        model = record["model"]
        signed = (model["hash"], record["inputs"], model["prediction"], model["probabilities"])
        assert verify_prediction(SIGNING, model["signature"], *signed)
        assert not verify_prediction(OTHER_SECRET, model["signature"], *signed)

    # The database keeps no secret, and no project.token.
    dump = dump_database(live)
    assert "candidate:" in dump and "annotation:" in dump
    assert found_in(dump, secrets) == []
