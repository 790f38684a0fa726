"""The lead's dashboard without a browser: who may see the pages, the sessions (kept in the
database: the logout, the lifetime and idle timeout, copied cookies, the CSRF tokens of the login
and the forms), the security headers, that the figures equal the API's, the decision queue's order,
paging and filters, overrides (form and API) and their audit log, the annotators page and the
downloads.

Most tests drive the app with Flask's test client, on SQLite and PostgreSQL, over a round written
straight into the database (decisions taken by the real rule from stored annotations), with Label
Studio unreachable: no page may need it. The last test runs against ``live_service`` and a real
Label Studio: a vote that arrives after an override does not change the candidate's status.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import random
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from flask import Flask
from flask.testing import FlaskClient
from pydantic import ValidationError
from sqlalchemy import delete, func
from sqlmodel import col, select
from werkzeug.test import TestResponse

from dynaval.adapters.db import queries as round_queries_module
from dynaval.adapters.db.candidates import record_of
from dynaval.adapters.db.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    AuditEventRow,
    CandidateRow,
    DashboardSessionRow,
    DecisionRow,
    ExclusionEventRow,
    RoundRow,
    as_utc,
)
from dynaval.adapters.db.unit_of_work import SqlUnitOfWork
from dynaval.bootstrap import bootstrap
from dynaval.domain.agreement.report import nominal_alpha_of_codes, round_alpha
from dynaval.domain.provenance import pseudonym
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.votes import current_votes
from dynaval.entrypoints.app import create_app, shutdown
from dynaval.entrypoints.auth import SESSION_COOKIE
from dynaval.entrypoints.headers import DATA_POLICY, PAGE_POLICY
from dynaval.entrypoints.pages import dashboard as dashboard_pages
from dynaval.service_layer.dashboard import views as dashboard
from dynaval.service_layer.dashboard.figures_cache import FiguresCache
from dynaval.service_layer.services import Services
from tests.e2e.test_validation_loop import wait_for
from tests.fixtures.service import (
    LEAD_TOKEN,
    NAMED_TOKEN,
    PSEUDONYM_SECRET,
    WRITER_TOKEN,
    LiveService,
    free_port,
    make_settings,
)

POS, NEG, NEU = "positive", "negative", "neutral"
LABELS = [POS, NEG, NEU]
DASH = "—"
PROJECT = 4242


# ---------------------------------------------------------------------------------- the pages' HTML


class PageIds(HTMLParser):
    """Every element with a data-testid: its attributes and its text (nested text included)."""

    VOID = frozenset({"input", "br", "img", "meta", "link", "hr", "source", "wbr", "col", "area", "base"})

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None], list[str]]] = []
        self._open: list[tuple[str, list[str] | None]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        buffer: list[str] | None = None
        test_id = attributes.get("data-testid")
        if test_id is not None:
            buffer = []
            self.found.append((test_id, attributes, buffer))
        if tag not in self.VOID:
            self._open.append((tag, buffer))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            open_tag, _ = self._open.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, buffer in self._open:
            if buffer is not None:
                buffer.append(data)

    def all(self, test_id: str) -> list[str]:
        return [" ".join("".join(b).split()) for t, _, b in self.found if t == test_id]

    def text(self, test_id: str) -> str:
        texts = self.all(test_id)
        assert len(texts) == 1, f"expected one data-testid={test_id!r}, found {len(texts)}"
        return texts[0]

    def attr(self, test_id: str, name: str) -> str | None:
        matches = [a for t, a, _ in self.found if t == test_id]
        assert len(matches) == 1, f"expected one data-testid={test_id!r}, found {len(matches)}"
        return matches[0].get(name)

    def ids(self, prefix: str) -> list[str]:
        return [t.removeprefix(prefix) for t, _, _ in self.found if t.startswith(prefix)]


def fmt3(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def lead(client: FlaskClient, path: str, token: str = LEAD_TOKEN, **kwargs: Any) -> TestResponse:
    return client.get(path, headers={"Authorization": f"Bearer {token}"}, **kwargs)


def page(client: FlaskClient, path: str) -> PageIds:
    response = lead(client, path)
    assert response.status_code == 200, (path, response.status_code, response.get_data(as_text=True)[:500])
    assert response.mimetype == "text/html"
    return PageIds(response.get_data(as_text=True))


def api(client: FlaskClient, path: str) -> Any:
    response = lead(client, path)
    assert response.status_code == 200, (path, response.get_data(as_text=True))
    return response.get_json()


# ------------------------------------------------------------------------------------- the round


@dataclass
class Seeded:
    round_id: int
    ids: dict[str, str] = field(default_factory=dict)
    annotators: dict[str, str] = field(default_factory=dict)  # raw Label Studio id -> pseudonym


# key -> (text, writer label, votes as (annotator, label, flagged))
CASES: dict[str, tuple[str, str, list[tuple[str, str | None, bool]]]] = {
    "acc1": (
        "A sequel even longer than the first, wonderful.",
        POS,
        [("11", POS, False), ("12", POS, False)],
    ),
    "acc2": ("Cold soup after two hours, my favourite.", NEG, [("11", NEG, False), ("13", NEG, False)]),
    "rej1": ("Not bad at all, said nobody.", POS, [("12", NEG, False), ("13", NEG, False)]),
    "esc1": ("Well, the hotel was certainly memorable.", POS, [("11", POS, False), ("12", NEG, False)]),
    "flag": ("Five stars. Buy watches at my site.", POS, [("11", POS, True), ("13", POS, True)]),
    "open": ("The parcel came on the promised day, more or less.", NEG, [("12", NEG, False)]),
    "tie3": (
        "It is a film with actors in it 100% of the time.",
        NEU,
        [("11", POS, False), ("12", NEG, False), ("13", NEU, False)],
    ),
}
FILLERS = 58  # candidates that did not fool the model: 65 in all, so the queue has two pages


def seed_round(services: Services, *, name: str = "Sentiment round 1", fillers: int = FILLERS) -> Seeded:
    """A round written straight into the database; every decision is taken by the real rule."""
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    with services.database.unit_of_work() as session:
        round_row = RoundRow(
            name=name,
            task_type="sentiment",
            state="closed",
            model_dir="/nonexistent/model",
            model_name="tiny-model",
            model_hash="sha256:" + "ab12" * 16,
            labels=LABELS,
            policy=DecisionPolicy().to_dict(),
            label_studio_project_id=PROJECT,
        )
        session.add(round_row)
        session.commit()
        session.refresh(round_row)
        assert round_row.id is not None
        seeded = Seeded(round_id=round_row.id)
        annotation_id = session.exec(select_max_annotation_id()).one() or 0
        task_id = 1000 * round_row.id
        for i, (key, (text, label, votes)) in enumerate(CASES.items()):
            candidate = CandidateRow(
                id=f"{round_row.id:04d}0000-0000-0000-0000-{i:012d}",
                round_id=round_row.id,
                inputs={"text": text},
                writer_label=label,
                writer_id=f"writer-{i % 3}",
                status="in_validation",
                model_prediction=NEU if label != NEU else POS,
                model_probabilities={POS: 0.2, NEG: 0.2, NEU: 0.6},
                model_signature="c0ffee" * 10,
                fooled=True,
                submitted_at=start + timedelta(minutes=i),
                label_studio_task_id=task_id + i,
                wanted_votes=2,
                label_studio_overlap=2,
            )
            session.add(candidate)
            session.commit()
            decide_again(services, candidate.id, cause="pushed")
            for annotator, vote, flagged in votes:
                annotation_id += 1
                session.add(
                    AnnotationRow(
                        id=annotation_id,
                        candidate_id=candidate.id,
                        round_id=round_row.id,
                        annotator_id=annotator,
                        label=vote,
                        flagged=flagged,
                        flag_reason="an advert" if flagged else None,
                        lead_time_s=12.5,
                        created_at=start + timedelta(hours=1, minutes=i),
                        updated_at=start + timedelta(hours=1, minutes=i),
                    )
                )
                seeded.annotators[annotator] = pseudonym(PSEUDONYM_SECRET, "annotator", annotator)
            session.commit()
            decide_again(services, candidate.id, cause="webhook")
            seeded.ids[key] = candidate.id
        for j in range(fillers):
            filler = CandidateRow(
                id=f"{round_row.id:04d}0000-0000-0000-0001-{j:012d}",
                round_id=round_row.id,
                inputs={"text": f"Route {j} buses leave every {10 + j % 20} minutes."},
                writer_label=NEU,
                writer_id="writer-9",
                status="not_fooled",
                model_prediction=NEU,
                model_probabilities={POS: 0.1, NEG: 0.1, NEU: 0.8},
                model_signature="beef" * 16,
                fooled=False,
                submitted_at=start + timedelta(hours=2, minutes=j),
            )
            session.add(filler)
            seeded.ids[f"filler{j}"] = filler.id
        session.commit()
    return seeded


def decide_again(services: Services, candidate_id: str, *, cause: str) -> bool:
    """The rule applied to the candidate's stored votes, as reading them back does; whether it
    changed the decision."""
    assert services.database is not None
    with SqlUnitOfWork(services.database) as uow:
        candidate = uow.candidates.get(candidate_id, for_update=True)
        assert candidate is not None
        policy = uow.rounds.get(candidate.round_id).policy
        entry = candidate.decide(
            uow.candidates.annotations(candidate_id),
            policy,
            excluded=uow.annotators.excluded(candidate.round_id),
            cause=cause,
            at=datetime.now(UTC),
        )
        uow.candidates.save(candidate)
        uow.commit()
    return entry is not None


def select_max_annotation_id() -> Any:
    return select(func.max(AnnotationRow.id))


@pytest.fixture
def app(dashboard_app: Flask) -> Flask:
    return dashboard_app


@pytest.fixture
def seeded(services: Services) -> Seeded:
    return seed_round(services)


# ------------------------------------------------------------------------------ who sees the pages


def page_paths(seeded: Seeded) -> list[str]:
    rid, cid = seeded.round_id, seeded.ids["rej1"]
    return [
        "/dashboard/rounds",
        f"/dashboard/rounds/{rid}",
        f"/dashboard/rounds/{rid}?status=rejected&q=nobody&page=1",
        f"/dashboard/candidates/{cid}",
        f"/dashboard/rounds/{rid}/annotators",
        f"/dashboard/rounds/{rid}/export",
        f"/dashboard/rounds/{rid}/export/dataset.jsonl",
        f"/dashboard/rounds/{rid}/export/dataset.parquet",
        f"/dashboard/rounds/{rid}/export/agreement.json",
        "/dashboard/models",
    ]


def test_pages_redirect_to_the_login_without_a_lead_and_refuse_a_writer(
    client: FlaskClient, seeded: Seeded
) -> None:
    for path in page_paths(seeded):
        anonymous = client.get(path)
        assert (anonymous.status_code, anonymous.headers["Location"]) == (302, "/dashboard/login"), path
        unknown = lead(client, path, token="not-a-token-of-anyone-0123456")
        assert (unknown.status_code, unknown.headers["Location"]) == (302, "/dashboard/login"), path
        writer = lead(client, path, token=WRITER_TOKEN)
        assert writer.status_code == 403, path
        assert "leads only" in writer.get_data(as_text=True)
        assert lead(client, path).status_code == 200, path
        assert lead(client, path, token=NAMED_TOKEN).status_code == 200, path
    assert client.get("/dashboard").headers["Location"] == "/dashboard/rounds"


def test_posts_without_a_lead_write_nothing(client: FlaskClient, services: Services, seeded: Seeded) -> None:
    rid, cid = seeded.round_id, seeded.ids["rej1"]
    override = {"outcome": "accepted", "reason": "The validators missed the sarcasm."}
    exclusion = {"excluded": "true", "reason": "Too fast."}
    posts = [
        (f"/dashboard/candidates/{cid}/override", override),
        (f"/dashboard/rounds/{rid}/annotators/{seeded.annotators['11']}/exclusion", exclusion),
    ]
    for path, form in posts:
        assert client.post(path, data=form).status_code == 302
        writer = client.post(path, data=form, headers={"Authorization": f"Bearer {WRITER_TOKEN}"})
        assert writer.status_code == 403
    assert api(client, f"/api/candidates/{cid}")["status"] == "rejected"
    assert not any(r["excluded"] for r in api(client, f"/api/rounds/{rid}/annotators")["annotators"])
    assert api(client, f"/api/rounds/{rid}/audit") == {"events": []}


def form_token(html: str) -> str:
    """The CSRF token of the (first) form on a page."""
    return html.split('name="csrf_token" value="')[1].split('"')[0]


def sign_in(client: FlaskClient, token: str = NAMED_TOKEN) -> TestResponse:
    """Type ``token`` into the login form, as a browser would: the form's CSRF token comes along."""
    csrf = form_token(client.get("/dashboard/login").get_data(as_text=True))
    return client.post("/dashboard/login", data={"token": token, "csrf_token": csrf})


def session_cookie(client: FlaskClient) -> str | None:
    cookie = client.get_cookie(SESSION_COOKIE, path="/dashboard")
    return None if cookie is None else cookie.value


def sign_out(client: FlaskClient) -> TestResponse:
    csrf = form_token(client.get("/dashboard/rounds").get_data(as_text=True))
    return client.post("/dashboard/logout", data={"csrf_token": csrf})


def session_rows(services: Services) -> list[DashboardSessionRow]:
    with services.database.unit_of_work() as session:
        return list(session.exec(select(DashboardSessionRow)).all())


def test_the_login_form_sets_a_session_and_the_logout_ends_it(
    client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    form = PageIds(client.get("/dashboard/login").get_data(as_text=True))
    assert form.ids("login-submit") == [""] and form.ids("nav-rounds") == [""]
    html = client.get("/dashboard/login").get_data(as_text=True)
    assert '<form method="post"' in html and 'name="token" type="password"' in html

    wrong = sign_in(client, "not-a-token-of-anyone-0123456")
    assert wrong.status_code == 401 and 'name="token" type="password"' in wrong.get_data(as_text=True)
    writer = sign_in(client, WRITER_TOKEN)
    assert writer.status_code == 403 and "leads only" in writer.get_data(as_text=True)
    assert client.get("/dashboard/rounds").status_code == 302  # neither left a session
    assert session_cookie(client) is None and session_rows(services) == []

    signed_in = sign_in(client)
    assert signed_in.status_code == 303 and signed_in.headers["Location"] == "/dashboard/rounds"
    cookie = client.get_cookie(SESSION_COOKIE, path="/dashboard")
    assert cookie is not None and cookie.http_only and cookie.same_site == "Lax"
    assert NAMED_TOKEN not in cookie.value
    # The database holds the session under the SHA-256 of its id, never the id or the token.
    (row,) = session_rows(services)
    assert row.id_hash == hashlib.sha256(cookie.value.encode()).hexdigest() != cookie.value
    assert row.lead == "grace" and row.revoked_at is None
    assert NAMED_TOKEN not in repr(row) and cookie.value not in repr(row)
    rounds = client.get("/dashboard/rounds")
    assert rounds.status_code == 200
    assert PageIds(rounds.get_data(as_text=True)).text("nav-lead") == "grace"
    for path in page_paths(seeded):
        assert client.get(path).status_code == 200, path

    # A form posted with the session needs the page's CSRF token.
    cid = seeded.ids["rej1"]
    body = {"outcome": "accepted", "reason": "Sarcasm."}
    assert client.post(f"/dashboard/candidates/{cid}/override", data=body).status_code == 400
    assert api(client, f"/api/candidates/{cid}")["status"] == "rejected"

    # The logout is a POST with that token too: without it the session goes on.
    assert client.get("/dashboard/logout").status_code == 405
    assert client.post("/dashboard/logout").status_code == 400
    assert client.post("/dashboard/logout", data={"csrf_token": "0" * 64}).status_code == 400
    assert client.get("/dashboard/rounds").status_code == 200
    out = sign_out(client)
    assert (out.status_code, out.headers["Location"]) == (303, "/dashboard/login")
    assert session_cookie(client) is None  # the browser forgets the cookie
    (row,) = session_rows(services)
    assert row.revoked_at is not None  # and the server the session
    for path in page_paths(seeded):
        assert client.get(path).status_code == 302, path
    # A logout without a live session has nothing to end: back to the login, no token needed.
    again = client.post("/dashboard/logout")
    assert (again.status_code, again.headers["Location"]) == (303, "/dashboard/login")


def test_a_copied_session_cookie_is_refused_after_the_logout_on_every_worker(
    app: Flask, client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    """Two apps on one database stand for two gunicorn workers or two machines: a session begun on
    one holds on the other, and the logout on one ends it on both, for every copy of the cookie."""
    other = create_app(bootstrap(services.settings), start_background=False)
    try:
        assert sign_in(client).status_code == 303
        session_id = session_cookie(client)
        assert session_id is not None
        copies = [app.test_client(), other.test_client()]
        for copy in copies:
            copy.set_cookie(SESSION_COOKIE, session_id, path="/dashboard")
            assert copy.get("/dashboard/rounds").status_code == 200
        assert sign_out(client).status_code == 303
        for copy in copies:
            for path in page_paths(seeded):
                refused = copy.get(path)
                assert (refused.status_code, refused.headers["Location"]) == (302, "/dashboard/login"), path
            # The refusal tells the browser to forget the cookie, which no longer names a session.
            assert session_cookie(copy) is None
        # A form posted with a copy and the page's token writes nothing either.
        cid = seeded.ids["rej1"]
        thief = other.test_client()
        thief.set_cookie(SESSION_COOKIE, session_id, path="/dashboard")
        csrf = hmac.new(
            services.settings.resolved_session_secret.encode(), f"csrf:{session_id}".encode(), hashlib.sha256
        ).hexdigest()
        posted = thief.post(
            f"/dashboard/candidates/{cid}/override",
            data={"csrf_token": csrf, "outcome": "accepted", "reason": "After the logout."},
        )
        assert posted.status_code == 302
        assert api(client, f"/api/candidates/{cid}")["status"] == "rejected"
    finally:
        shutdown(other)


def test_removing_a_lead_token_from_the_configuration_ends_its_sessions(
    client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    assert sign_in(client).status_code == 303
    session_id = session_cookie(client)
    assert session_id is not None
    without_grace = services.settings.model_copy(update={"lead_tokens": [LEAD_TOKEN]})
    other = create_app(bootstrap(without_grace), start_background=False)
    try:
        copy = other.test_client()
        copy.set_cookie(SESSION_COOKIE, session_id, path="/dashboard")
        assert copy.get("/dashboard/rounds").status_code == 302
        assert client.get("/dashboard/rounds").status_code == 200  # where the token is still configured
    finally:
        shutdown(other)


@pytest.fixture
def short_sessions(database_url: str, tmp_path: Path) -> Iterator[Flask]:
    """The app with a session lifetime of 10 minutes and an idle timeout of 2."""
    settings = make_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        label_studio_url=f"http://127.0.0.1:{free_port()}",
        label_studio_api_key="unused-in-these-tests",
        public_url="http://127.0.0.1:8000",
        model_dir=tmp_path / "no-model",
        session_lifetime_s=600,
        session_idle_s=120,
    )
    application = create_app(bootstrap(settings), start_background=False)
    try:
        yield application
    finally:
        shutdown(application)


def _age_session(services: Services, **moved: timedelta) -> None:
    """Move the session's times back, as if that much time had passed."""
    with services.database.unit_of_work() as session:
        (row,) = session.exec(
            select(DashboardSessionRow).where(col(DashboardSessionRow.revoked_at).is_(None))
        )
        for name, delta in moved.items():
            setattr(row, name, as_utc(getattr(row, name)) - delta)
        session.add(row)
        session.commit()


def test_a_session_ends_after_its_lifetime_and_after_idling_as_configured(short_sessions: Flask) -> None:
    services: Services = short_sessions.extensions["dynaval"]
    client = short_sessions.test_client()
    signed_in = sign_in(client, LEAD_TOKEN)
    assert signed_in.status_code == 303
    assert "Max-Age=600" in signed_in.headers["Set-Cookie"]
    (row,) = session_rows(services)
    assert as_utc(row.expires_at) - as_utc(row.created_at) == timedelta(seconds=600)

    # Used within the idle timeout: it holds, and the use is noted.
    _age_session(services, last_seen_at=timedelta(seconds=100))
    assert client.get("/dashboard/rounds").status_code == 200
    (row,) = session_rows(services)
    assert datetime.now(UTC) - as_utc(row.last_seen_at) < timedelta(seconds=10)
    # Unused for longer than the idle timeout: refused.
    _age_session(services, last_seen_at=timedelta(seconds=121))
    refused = client.get("/dashboard/rounds")
    assert (refused.status_code, refused.headers["Location"]) == (302, "/dashboard/login")
    assert session_cookie(client) is None

    # Past its lifetime: refused however busy the lead was.
    assert sign_in(client, LEAD_TOKEN).status_code == 303
    _age_session(services, created_at=timedelta(seconds=601), expires_at=timedelta(seconds=601))
    assert client.get("/dashboard/rounds").status_code == 302
    # Rows that can no longer hold are deleted at the next login.
    assert sign_in(client, LEAD_TOKEN).status_code == 303
    assert len(session_rows(services)) == 1


def test_session_defaults_are_short() -> None:
    settings = make_settings(
        database_url="sqlite://",
        data_dir=Path("unused"),
        label_studio_url="http://127.0.0.1:1",
        label_studio_api_key="unused-in-these-tests",
        public_url="http://127.0.0.1:8000",
        model_dir=Path("unused"),
    )
    assert (settings.session_lifetime_s, settings.session_idle_s) == (4 * 3600, 30 * 60)
    for bad in ({"session_lifetime_s": 0}, {"session_idle_s": -1}):
        with pytest.raises(ValidationError):
            settings.model_validate({**settings.model_dump(), **bad})


def test_the_login_needs_its_csrf_token_and_gives_a_new_session_id(
    client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    def refused(response: TestResponse) -> None:
        assert response.status_code == 400
        shown = PageIds(response.get_data(as_text=True))
        assert "form has expired" in shown.text("login-error")
        assert session_cookie(client) is None and session_rows(services) == []

    url = "/dashboard/login"
    refused(client.post(url, data={"token": NAMED_TOKEN}))  # no token, no login cookie yet
    csrf = form_token(client.get(url).get_data(as_text=True))
    refused(client.post(url, data={"token": NAMED_TOKEN}))  # the login cookie, no token
    refused(client.post(url, data={"token": NAMED_TOKEN, "csrf_token": "0" * 64}))
    # Another origin (Label Studio on another port is the same site): refused even with the token.
    for site in ("same-site", "cross-site"):
        refused(
            client.post(
                url, data={"token": NAMED_TOKEN, "csrf_token": csrf}, headers={"Sec-Fetch-Site": site}
            )
        )
    # The token belongs to the login cookie it was derived from: another browser's cookie fails.
    elsewhere = client.application.test_client()
    elsewhere.get(url)
    refused(elsewhere.post(url, data={"token": NAMED_TOKEN, "csrf_token": csrf}))

    # A session id planted in the browser before the login is never the one signed in.
    client.set_cookie(SESSION_COOKIE, "planted-session-id-0123456789abcdef", path="/dashboard")
    assert client.post(url, data={"token": NAMED_TOKEN, "csrf_token": csrf}).status_code == 303
    first = session_cookie(client)
    assert first is not None and first != "planted-session-id-0123456789abcdef"
    assert client.get("/dashboard/rounds").status_code == 200
    # Signing in again gives a new id and revokes the one the browser held.
    assert sign_in(client).status_code == 303
    second = session_cookie(client)
    assert second is not None and second != first
    copy = client.application.test_client()
    copy.set_cookie(SESSION_COOKIE, first, path="/dashboard")
    assert copy.get("/dashboard/rounds").status_code == 302
    assert client.get("/dashboard/rounds").status_code == 200
    # A session form posted from another origin is refused, with the right token too.
    cid = seeded.ids["rej1"]
    page_csrf = form_token(client.get(f"/dashboard/candidates/{cid}").get_data(as_text=True))
    body = {"csrf_token": page_csrf, "outcome": "accepted", "reason": "Sarcasm."}
    framed = client.post(
        f"/dashboard/candidates/{cid}/override", data=body, headers={"Sec-Fetch-Site": "same-site"}
    )
    assert framed.status_code == 400
    assert api(client, f"/api/candidates/{cid}")["status"] == "rejected"
    ours = client.post(
        f"/dashboard/candidates/{cid}/override", data=body, headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert ours.status_code == 303


# ----------------------------------------------------------------------------- security headers


class InlineCode(HTMLParser):
    """Every inline script, inline style and event handler attribute on a page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[str] = []
        self._in_script = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        for name in attributes:
            if name == "style" or name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
        if tag == "style":
            self.found.append("<style>")
        if tag == "script":
            # A data block (JSON) is never executed, so the policy does not apply to it.
            kind = attributes.get("type") or ""
            self._in_script = "src" not in attributes and kind != "application/json"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.found.append(f"<script>{data.strip()[:40]}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False


def test_every_answer_sends_the_security_headers_and_pages_hold_no_inline_code(
    client: FlaskClient, seeded: Seeded
) -> None:
    def common(response: TestResponse, what: str) -> None:
        assert response.headers["X-Content-Type-Options"] == "nosniff", what
        assert response.headers["X-Frame-Options"] == "DENY", what
        assert response.headers["Referrer-Policy"] == "same-origin", what
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"], what

    pages = [path for path in page_paths(seeded) if "/export/" not in path]
    pages += [f"/dashboard/candidates/{seeded.ids['filler0']}", "/dashboard/candidates/nope"]
    for path in pages:
        response = lead(client, path)
        assert response.mimetype == "text/html", path
        common(response, path)
        policy = response.headers["Content-Security-Policy"]
        assert policy == PAGE_POLICY, path
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert response.headers["Cache-Control"] == "no-store", path
        assert InlineCode(response.get_data(as_text=True)).found == [], path
    heatmap = lead(client, f"/dashboard/rounds/{seeded.round_id}/annotators").get_data(as_text=True)
    # The heatmap's colours are classes (dashboard.css), one per step of 0.05.
    assert re.search(r'<td data-testid="pair-[^"]+" class="heat-(1?[0-9]|20)">', heatmap)
    # Pages without a lead: the login, the leads-only page, the refused form.
    signed_out = client.application.test_client()
    login_page = signed_out.get("/dashboard/login")
    forbidden = lead(signed_out, "/dashboard/rounds", token=WRITER_TOKEN)
    expired = signed_out.post("/dashboard/login", data={"token": LEAD_TOKEN})
    to_login = signed_out.get("/dashboard/rounds")  # a redirect, with a line of HTML
    assert to_login.status_code == 302
    for what, response in (
        ("login", login_page),
        ("forbidden", forbidden),
        ("expired", expired),
        ("redirect", to_login),
    ):
        common(response, what)
        assert response.headers["Content-Security-Policy"] == PAGE_POLICY, what
        assert response.headers["Cache-Control"] == "no-store", what
        assert InlineCode(response.get_data(as_text=True)).found == [], what
    # Data: the JSON API, the downloads, the redirects, the errors.
    rid = seeded.round_id
    data = [
        lead(client, f"/api/rounds/{rid}"),
        lead(client, f"/api/rounds/{rid}/agreement"),
        lead(client, f"/dashboard/rounds/{rid}/export/dataset.jsonl"),
        lead(client, f"/dashboard/rounds/{rid}/export/dataset.parquet"),
        lead(client, f"/dashboard/rounds/{rid}/export/agreement.json"),
        client.get("/api/rounds"),
        client.get("/api/nothing-here"),
        client.get("/health"),
    ]
    for response in data:
        what = f"{response.request.path} {response.status_code}"
        common(response, what)
        assert response.headers["Content-Security-Policy"] == DATA_POLICY, what
        assert response.headers["Cache-Control"] == "no-store", what
        response.close()
    # The static files hold no data: the browser may keep them.
    script = client.get("/dashboard/static/dashboard.js")
    common(script, "dashboard.js")
    assert "no-store" not in script.headers.get("Cache-Control", "")
    script.close()


def test_every_heatmap_class_has_a_colour_in_the_stylesheet() -> None:
    """The heatmap's colours moved from style attributes to classes: each class the template filter
    can give a cell has its colour in dashboard.css."""
    css = (Path(dashboard_pages.__file__).parent / "static" / "dashboard.css").read_text()
    given = {dashboard_pages._heat(value) for value in [None, -0.5, 1.5, *(i / 1000 for i in range(1001))]}
    assert given == {"heat-none", *(f"heat-{i}" for i in range(21))}
    for name in given:
        assert re.search(rf"td\.{name} \{{ background-color: [^;]+; \}}", css), name


# ------------------------------------------------------------------------------------ the figures


def expected_figures(summary: dict[str, Any], agreement: dict[str, Any]) -> dict[str, str]:
    counts = summary["counts"]
    ci = agreement["ci95"] or [None, None]
    assert summary["agreement"]["alpha"] == pytest.approx(agreement["alpha"], abs=1e-12)
    return {
        "collected": str(counts["collected"]),
        "fooled": str(counts["fooled"]),
        "in-validation": str(counts["still_in_validation"]),
        "accepted": str(counts["by_status"].get("accepted", 0)),
        "rejected": str(counts["by_status"].get("rejected", 0)),
        "flagged": str(counts["by_status"].get("flagged", 0)),
        "mer": fmt3(summary["mer"]),
        "vmer": fmt3(summary["vmer"]),
        "alpha": fmt3(agreement["alpha"]),
        "ci-low": fmt3(ci[0]),
        "ci-high": fmt3(ci[1]),
    }


def test_the_rounds_page_shows_the_apis_figures_and_charts_them(
    client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    empty = seed_round(services, name="Empty round", fillers=0)
    with services.database.unit_of_work() as session:
        session.execute(delete(AnnotationRow).where(col(AnnotationRow.round_id) == empty.round_id))
        session.commit()
    shown = page(client, "/dashboard/rounds")
    assert sorted(shown.ids("round-row-")) == sorted([str(seeded.round_id), str(empty.round_id)])
    chart = json.loads(_script(lead(client, "/dashboard/rounds").get_data(as_text=True), "rounds-chart-data"))
    assert shown.ids("rounds-chart") == [""]
    for index, rid in enumerate(sorted([seeded.round_id, empty.round_id])):
        summary = api(client, f"/api/rounds/{rid}")
        agreement = api(client, f"/api/rounds/{rid}/agreement")
        for name, value in expected_figures(summary, agreement).items():
            assert shown.text(f"round-{rid}-{name}") == value, (rid, name)
        assert shown.text(f"round-{rid}-name") == summary["name"]
        assert shown.text(f"round-{rid}-state") == summary["state"]
        assert summary["model_hash"].startswith(shown.text(f"round-{rid}-model-hash").rstrip("…"))
        assert chart["alpha"][index] == agreement["alpha"]
        assert chart["ci_low"][index] == (agreement["ci95"] or [None])[0]
        assert chart["vmer"][index] == summary["vmer"]
    assert shown.text(f"round-{empty.round_id}-alpha") == DASH  # no vote: alpha undefined
    assert shown.text(f"round-{seeded.round_id}-alpha") != DASH
    html = lead(client, "/dashboard/rounds").get_data(as_text=True)
    assert "/dashboard/static/vendor/chartjs/chart.umd.min.js" in html and "https://" not in html
    script = client.get("/dashboard/static/vendor/chartjs/chart.umd.min.js")
    assert script.status_code == 200 and b"Chart.js v4" in script.get_data()[:200]
    script.close()


def _script(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}">') + len(f'id="{element_id}">')
    return html[start : html.index("</script>", start)]


def test_round_figures_are_computed_once_until_a_vote_changes(
    app: Flask, client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    cache: FiguresCache = app.extensions["dynaval_dashboard_figures"]
    rid = seeded.round_id
    page(client, "/dashboard/rounds")
    misses = cache.misses
    for _ in range(3):
        page(client, "/dashboard/rounds")
        page(client, f"/dashboard/rounds/{rid}")
    assert cache.misses == misses and cache.hits >= 6
    before = page(client, "/dashboard/rounds").text(f"round-{rid}-alpha")
    # A fourth annotator agrees on every labelled candidate: alpha changes, and so does the page.
    add_agreeing_votes(services, seeded, "14")
    after = page(client, "/dashboard/rounds").text(f"round-{rid}-alpha")
    assert cache.misses == misses + 1
    assert after == fmt3(api(client, f"/api/rounds/{rid}/agreement")["alpha"]) and after != before


def add_agreeing_votes(services: Services, seeded: Seeded, annotator: str) -> None:
    """A new annotator agrees on every labelled candidate: the round's alpha changes."""
    with services.database.unit_of_work() as session:
        top = int(session.exec(select_max_annotation_id()).one() or 0)
        for n, key in enumerate(("acc1", "acc2", "rej1", "esc1", "open", "tie3"), start=1):
            session.add(
                AnnotationRow(
                    id=top + n,
                    candidate_id=seeded.ids[key],
                    round_id=seeded.round_id,
                    annotator_id=annotator,
                    label=CASES[key][1],
                    created_at=datetime.now(UTC),
                    updated_at=datetime.now(UTC),
                )
            )
        session.commit()


def test_a_slow_recompute_shows_the_previous_figures_marked_until_the_new_ones_are_ready(
    app: Flask, client: FlaskClient, services: Services, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a round of 100,000 candidates: the page answers at once, and says its figures are older."""
    rid = seeded.round_id
    before = page(client, "/dashboard/rounds")
    assert before.ids("figures-stale") == []
    release = threading.Event()
    real_report = dashboard.agreement.round_agreement_report

    def slow_report(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(30)
        return real_report(*args, **kwargs)

    monkeypatch.setattr(dashboard.agreement, "round_agreement_report", slow_report)
    cache: FiguresCache = app.extensions["dynaval_dashboard_figures"]
    add_agreeing_votes(services, seeded, "15")
    during = page(client, "/dashboard/rounds")
    assert during.text(f"round-{rid}-alpha") == before.text(f"round-{rid}-alpha")
    assert "newer votes are being counted" in during.text("figures-stale")
    assert page(client, f"/dashboard/rounds/{rid}").ids("figures-stale") == [""]
    release.set()
    cache.settle()
    after = page(client, "/dashboard/rounds")
    assert after.ids("figures-stale") == []
    assert after.text(f"round-{rid}-alpha") == fmt3(api(client, f"/api/rounds/{rid}/agreement")["alpha"])
    assert after.text(f"round-{rid}-alpha") != before.text(f"round-{rid}-alpha")


def test_the_session_cookie_is_secure_when_the_service_is_served_over_https(tmp_path: Path) -> None:
    for public_url, secure in (("https://dynaval.example.org", True), ("http://127.0.0.1:8000", False)):
        settings = make_settings(
            database_url=f"sqlite:///{tmp_path / (str(secure) + '.sqlite3')}",
            data_dir=tmp_path / "data",
            label_studio_url=f"http://127.0.0.1:{free_port()}",
            label_studio_api_key="unused-in-these-tests",
            public_url=public_url,
            model_dir=tmp_path / "no-model",
        )
        application = create_app(bootstrap(settings), start_background=False)
        try:
            client = application.test_client()
            login_page = client.get("/dashboard/login")
            assert ("Secure" in login_page.headers["Set-Cookie"]) is secure, public_url
            response = sign_in(client, LEAD_TOKEN)
            assert response.status_code == 303
            set_cookies = response.headers.getlist("Set-Cookie")
            (session_set,) = [c for c in set_cookies if c.startswith(f"{SESSION_COOKIE}=")]
            assert ("Secure" in session_set) is secure, public_url
            assert "HttpOnly" in session_set and "SameSite=Lax" in session_set
            assert "Path=/dashboard;" in session_set or session_set.endswith("Path=/dashboard")
        finally:
            shutdown(application)


# -------------------------------------------------------------------------------------- the queue


def test_the_queue_lists_escalated_and_flagged_first_and_pages_by_fifty(
    client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    rid = seeded.round_id
    first = page(client, f"/dashboard/rounds/{rid}")
    summary = api(client, f"/api/rounds/{rid}")
    agreement = api(client, f"/api/rounds/{rid}/agreement")
    for name in ("collected", "mer", "vmer", "alpha", "ci-low", "ci-high"):
        assert first.text(f"round-{rid}-{name}") == expected_figures(summary, agreement)[name]
    total = len(seeded.ids)
    assert first.text("queue-total") == str(total)
    rows = first.ids("candidate-row-")
    assert len(rows) == 50 and first.ids("page-prev") == [] and first.ids("page-next") == [""]
    assert rows[:2] == [seeded.ids["esc1"], seeded.ids["flag"]]  # urgent first, by submission
    second = page(client, f"/dashboard/rounds/{rid}?page=2")
    assert second.ids("page-prev") == [""] and second.ids("page-next") == []
    assert len(second.ids("candidate-row-")) == total - 50
    assert sorted(rows + second.ids("candidate-row-")) == sorted(seeded.ids.values())
    assert page(client, f"/dashboard/rounds/{rid}?page=9").ids("candidate-row-") == []
    # A page number is ASCII digits: anything else is a clear error naming it, not a guess.
    for junk in ("oops", "\uff12", "1_0"):
        refused = lead(client, f"/dashboard/rounds/{rid}?page={junk}")
        assert refused.status_code == 422 and "page must be" in refused.get_data(as_text=True), junk

    # Each row shows the API's view of the candidate.
    for key in CASES:
        cid = seeded.ids[key]
        candidate = api(client, f"/api/candidates/{cid}")
        assert first.text(f"candidate-{cid}-text") == candidate["inputs"]["text"]
        assert first.text(f"candidate-{cid}-writer-label") == candidate["writer_label"]
        assert first.text(f"candidate-{cid}-prediction") == candidate["model_prediction"]
        assert first.text(f"candidate-{cid}-status") == candidate["status"]
        assert first.text(f"candidate-{cid}-agreement") == fmt3(candidate["agreement"]["item_agreement"])
        votes = first.text(f"candidate-{cid}-votes")
        assert int(votes.split(":")[0]) == len(candidate["votes"])
        assert all(v["label"] in votes for v in candidate["votes"])
        rule = first.text(f"candidate-{cid}-rule")
        assert candidate["decision"]["rule_version"] in rule and candidate["decision"]["reason"] in rule
        assert first.attr(f"candidate-link-{cid}", "href") == f"/dashboard/candidates/{cid}"
        task = candidate["label_studio_task_id"]
        ls_url = services.settings.label_studio_url
        assert first.attr(f"ls-link-{cid}", "href") == f"{ls_url}/projects/{PROJECT}/data?task={task}"
    assert first.ids(f"ls-link-{seeded.ids['filler0']}") == []  # no task, no link
    assert first.text(f"candidate-{seeded.ids['filler0']}-rule") == DASH


def test_the_queue_filters_by_status_and_searches_the_text(client: FlaskClient, seeded: Seeded) -> None:
    rid = seeded.round_id
    statuses = {
        status: sorted(c for k, c in seeded.ids.items() if k in CASES and _status(client, c) == status)
        for status in ("accepted", "rejected", "escalated", "flagged", "in_validation")
    }
    for status, ids in statuses.items():
        shown = page(client, f"/dashboard/rounds/{rid}?status={status}")
        assert sorted(shown.ids("candidate-row-")) == ids, status
        assert shown.text("queue-total") == str(len(ids))
    assert page(client, f"/dashboard/rounds/{rid}?status=not_fooled").text("queue-total") == str(FILLERS)
    assert page(client, f"/dashboard/rounds/{rid}?status=nonsense").text("queue-total") == "0"
    # Case-insensitive, and % and _ are literal characters, not wildcards.
    assert page(client, f"/dashboard/rounds/{rid}?q=HOTEL").ids("candidate-row-") == [seeded.ids["esc1"]]
    assert page(client, f"/dashboard/rounds/{rid}?q=100%25").ids("candidate-row-") == [seeded.ids["tie3"]]
    assert page(client, f"/dashboard/rounds/{rid}?q=10_").text("queue-total") == "0"
    both = page(client, f"/dashboard/rounds/{rid}?q=buses&status=not_fooled&page=2")
    assert both.text("queue-total") == str(FILLERS) and len(both.ids("candidate-row-")) == FILLERS - 50
    next_href = page(client, f"/dashboard/rounds/{rid}?q=buses").attr("page-next", "href")
    assert next_href is not None and "q=buses" in next_href and "page=2" in next_href


def _status(client: FlaskClient, candidate_id: str) -> str:
    return str(api(client, f"/api/candidates/{candidate_id}")["status"])


# -------------------------------------------------------------------------------- the candidate


def test_the_candidate_page_shows_the_provenance_record(client: FlaskClient, seeded: Seeded) -> None:
    cid = seeded.ids["esc1"]
    shown = page(client, f"/dashboard/candidates/{cid}")
    candidate = api(client, f"/api/candidates/{cid}")
    expected = {
        "example-id": cid,
        "writer": candidate["writer"],
        "writer-label": candidate["writer_label"],
        "model-hash": "sha256:" + "ab12" * 16,
        "model-prediction": candidate["model_prediction"],
        "model-signature": candidate["model_signature"],
        "status": "escalated",
        "label-studio-task": str(candidate["label_studio_task_id"]),
    }
    assert {key: shown.text(f"prov-{key}") for key in expected} == expected
    votes = shown.all("vote-row")
    assert len(votes) == len(candidate["votes"]) == 2
    for vote in candidate["votes"]:
        assert sum(vote["annotator"] in row and vote["label"] in row for row in votes) == 1
    history = shown.all("history-row")
    assert len(history) == len(candidate["history"]) == 2
    assert "escalated webhook dynaval-majority/1" in history[-1]
    assert shown.all("audit-row") == []
    assert shown.ids("override-form") == [""] and shown.ids("form-error") == []
    assert shown.attr("override-form", "action") == f"/dashboard/candidates/{cid}/override"
    assert len(shown.all("nav-round")) == len(shown.all("nav-export")) == 1
    # The whole record, as the dataset would hold it, is on the page too.
    record = json.loads(shown.text("prov-record"))
    assert record["example_id"] == cid and record["decision"]["override"] is None
    assert lead(client, "/dashboard/candidates/no-such-candidate").status_code == 404


# -------------------------------------------------------------------------------------- overrides


def test_an_override_through_the_form_is_audited_and_moves_the_candidate_into_the_dataset(
    app: Flask, client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    rid, cid = seeded.round_id, seeded.ids["rej1"]
    signed_in = sign_in(client)
    assert signed_in.status_code == 303
    form = client.get(f"/dashboard/candidates/{cid}").get_data(as_text=True)
    csrf = form.split('name="csrf_token" value="')[1].split('"')[0]
    url = f"/dashboard/candidates/{cid}/override"

    blank = client.post(url, data={"csrf_token": csrf, "outcome": "accepted", "reason": "   "})
    assert blank.status_code == 422
    shown = PageIds(blank.get_data(as_text=True))
    assert "reason" in shown.text("form-error") and shown.text("prov-status") == "rejected"
    bad = client.post(url, data={"csrf_token": csrf, "outcome": "maybe", "reason": "Because."})
    assert bad.status_code == 422 and "outcome" in PageIds(bad.get_data(as_text=True)).text("form-error")
    with services.database.unit_of_work() as session:
        assert session.get(CandidateRow, cid).override_outcome is None  # type: ignore[union-attr]
        assert session.exec(select(AuditEventRow)).all() == []
    assert _dataset_ids(client, rid) == sorted([seeded.ids["acc1"], seeded.ids["acc2"]])

    reason = "The validators missed the sarcasm; the lead checked the source."
    done = client.post(url, data={"csrf_token": csrf, "outcome": "accepted", "reason": reason})
    assert done.status_code in (302, 303) and done.headers["Location"] == f"/dashboard/candidates/{cid}"
    shown = PageIds(client.get(f"/dashboard/candidates/{cid}").get_data(as_text=True))
    assert shown.text("prov-status") == "accepted" and shown.ids("form-error") == []
    (audit,) = shown.all("audit-row")
    assert audit.startswith("override grace") and reason in audit and "rejected → accepted" in audit
    history = shown.all("history-row")
    assert "accepted override lead-override/1" in history[-1]

    events = api(client, f"/api/rounds/{rid}/audit")["events"]
    assert [(e["candidate_id"], e["action"], e["by"], e["reason"]) for e in events] == [
        (cid, "override", "grace", reason)
    ]
    assert (events[0]["status_before"], events[0]["status_after"]) == ("rejected", "accepted")
    assert _dataset_ids(client, rid) == sorted([seeded.ids["acc1"], seeded.ids["acc2"], cid])
    record = next(
        json.loads(line)
        for line in lead(client, f"/dashboard/rounds/{rid}/export/dataset.jsonl")
        .get_data(as_text=True)
        .splitlines()
        if json.loads(line)["example_id"] == cid
    )
    override = record["decision"]["override"]
    assert (override["outcome"], override["reason"], override["by"]) == ("accepted", reason, "grace")
    assert record["decision"]["outcome"] == "rejected"  # the rule's, kept beside the override
    queue = page(client, f"/dashboard/rounds/{rid}?status=accepted")
    assert cid in queue.ids("candidate-row-") and reason in queue.text(f"candidate-{cid}-rule")


def _dataset_ids(client: FlaskClient, round_id: int) -> list[str]:
    body = lead(client, f"/api/rounds/{round_id}/dataset?format=jsonl").get_data(as_text=True)
    return sorted(json.loads(line)["example_id"] for line in body.splitlines())


def test_the_override_api_names_the_bad_field_and_records_who_overrode(
    client: FlaskClient, services: Services, seeded: Seeded
) -> None:
    rid, cid = seeded.round_id, seeded.ids["acc1"]
    url = f"/api/candidates/{cid}/override"
    headers = {"Authorization": f"Bearer {NAMED_TOKEN}"}
    bad_bodies = {
        "outcome": [{"outcome": "maybe", "reason": "x"}, {"reason": "x"}, {"outcome": None, "reason": "x"}],
        "reason": [
            {"outcome": "rejected"},
            {"outcome": "rejected", "reason": "  "},
            {"outcome": "rejected", "reason": 3},
        ],
    }
    for field_name, bodies in bad_bodies.items():
        for body in bodies:
            response = client.post(url, json=body, headers=headers)
            assert response.status_code == 422, body
            assert response.get_json()["error"]["field"] == field_name, body
    assert client.post(url, data="not json", headers=headers).get_json()["error"]["field"] == "body"
    writer = client.post(
        url, json={"outcome": "rejected", "reason": "x"}, headers={"Authorization": f"Bearer {WRITER_TOKEN}"}
    )
    assert writer.status_code == 403
    unknown = client.post(
        "/api/candidates/nope/override", json={"outcome": "rejected", "reason": "x"}, headers=headers
    )
    assert unknown.status_code == 404
    queued = seeded.ids["filler0"]
    with services.database.unit_of_work() as session:
        row = session.get(CandidateRow, queued)
        assert row is not None
        row.status = "queued"
        session.add(row)
        session.commit()
    conflict = client.post(
        f"/api/candidates/{queued}/override", json={"outcome": "rejected", "reason": "x"}, headers=headers
    )
    assert conflict.status_code == 409
    assert _audit_and_override_rows(services) == (0, 0)
    assert api(client, f"/api/candidates/{cid}")["override"] is None

    reason = "Two of the three sentences are copied from a review site."
    response = client.post(url, json={"outcome": "rejected", "reason": f"  {reason}  "}, headers=headers)
    assert response.status_code == 200
    body = response.get_json()
    assert body["id"] == cid and body["status"] == "rejected"
    assert {k: body["override"][k] for k in ("outcome", "reason", "by")} == {
        "outcome": "rejected",
        "reason": reason,
        "by": "grace",
    }
    assert body["decision"]["override"] == body["override"]
    assert body["history"][-1]["cause"] == "override"
    assert _dataset_ids(client, rid) == [seeded.ids["acc2"]]  # rejected by override: out of the dataset

    # A plain token's name is lead- and the first 8 hex digits of its SHA-256.
    again = lead_post(client, url, {"outcome": "accepted", "reason": "Checked again."}, LEAD_TOKEN)
    assert again.status_code == 200
    plain_name = "lead-" + hashlib.sha256(LEAD_TOKEN.encode()).hexdigest()[:8]
    events = api(client, f"/api/rounds/{rid}/audit")["events"]
    assert [(e["by"], e["status_before"], e["status_after"]) for e in events] == [
        ("grace", "accepted", "rejected"),
        (plain_name, "rejected", "accepted"),
    ]
    assert lead(client, "/api/rounds/999/audit").status_code == 404
    assert (
        client.get(
            f"/api/rounds/{rid}/audit", headers={"Authorization": f"Bearer {WRITER_TOKEN}"}
        ).status_code
        == 403
    )

    # A later vote is stored but does not change the overridden status.
    with services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, rid)
        candidate = session.get(CandidateRow, cid)
        assert round_row is not None and candidate is not None
        top = int(session.exec(select_max_annotation_id()).one() or 0)
        for n, annotator in enumerate(("13", "14"), start=1):
            session.add(
                AnnotationRow(
                    id=top + n,
                    candidate_id=cid,
                    round_id=rid,
                    annotator_id=annotator,
                    label=NEG,
                    created_at=datetime.now(UTC),
                    updated_at=datetime.now(UTC),
                )
            )
        session.commit()
    assert decide_again(services, cid, cause="webhook") is False
    after = api(client, f"/api/candidates/{cid}")
    assert after["status"] == "accepted" and len(after["votes"]) == 4


def lead_post(client: FlaskClient, path: str, body: dict[str, Any], token: str) -> TestResponse:
    return client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})


def _audit_and_override_rows(services: Services) -> tuple[int, int]:
    with services.database.unit_of_work() as session:
        audit = len(session.exec(select(AuditEventRow)).all())
        overrides = len(session.exec(select(DecisionRow).where(DecisionRow.cause == "override")).all())
        return audit, overrides


# ------------------------------------------------------------------------------ the annotators


def test_the_annotators_page_shows_the_report_pairs_and_confusion_and_toggles_exclusion(
    client: FlaskClient, seeded: Seeded
) -> None:
    rid = seeded.round_id
    shown = page(client, f"/dashboard/rounds/{rid}/annotators")
    report = api(client, f"/api/rounds/{rid}/annotators")["annotators"]
    agreement = api(client, f"/api/rounds/{rid}/agreement")
    assert (
        sorted(shown.ids("annotator-row-"))
        == sorted(r["annotator"] for r in report)
        == sorted(seeded.annotators.values())
    )
    for row in report:
        name = row["annotator"]
        assert shown.text(f"annotator-{name}-votes") == str(row["votes"])
        assert shown.text(f"annotator-{name}-agreement") == fmt3(row["agreement_with_others"])
        assert shown.text(f"annotator-{name}-gold-accuracy") == fmt3(row["gold_accuracy"]) == DASH
        assert shown.text(f"annotator-{name}-gold-count") == "0/0"
        assert shown.text(f"annotator-{name}-excluded") == "no"
    pairwise = agreement["pairwise"]
    for i, a in enumerate(pairwise["annotators"]):
        for j, b in enumerate(pairwise["annotators"]):
            cell = shown.text(f"pair-{a}-{b}")
            assert cell == f"{fmt3(pairwise['agreement'][i][j])} ({pairwise['shared_items'][i][j]})"
    assert shown.ids("pairwise-heatmap") == [""] and shown.ids("confusion-table") == [""]
    # Writer label x validators' majority: acc1, acc2 agree; rej1 pos->neg; esc1 tie (left out);
    # flag pos->pos; open neg->neg (one vote); tie3 (three labels) left out.
    confusion = {(w, v): int(shown.text(f"confusion-{w}-{v}")) for w in LABELS for v in LABELS}
    assert {k: n for k, n in confusion.items() if n} == {(POS, POS): 2, (NEG, NEG): 2, (POS, NEG): 1}

    a = seeded.annotators["11"]
    url = f"/dashboard/rounds/{rid}/annotators/{a}/exclusion"
    headers = {"Authorization": f"Bearer {LEAD_TOKEN}"}
    blank = client.post(url, data={"excluded": "true", "reason": " "}, headers=headers)
    assert blank.status_code == 422 and PageIds(blank.get_data(as_text=True)).ids("form-error") == [""]
    done = client.post(url, data={"excluded": "true", "reason": "Answered far too fast."}, headers=headers)
    assert (
        done.status_code in (302, 303) and done.headers["Location"] == f"/dashboard/rounds/{rid}/annotators"
    )
    shown = page(client, f"/dashboard/rounds/{rid}/annotators")
    assert shown.text(f"annotator-{a}-excluded") == "yes"
    row = next(r for r in api(client, f"/api/rounds/{rid}/annotators")["annotators"] if r["annotator"] == a)
    assert row["excluded"] and row["excluded_by"] == "lead"
    # Its votes no longer count: alpha on the rounds page follows the API's.
    assert page(client, "/dashboard/rounds").text(f"round-{rid}-alpha") == fmt3(
        api(client, f"/api/rounds/{rid}/agreement")["alpha"]
    )
    back = client.post(url, data={"excluded": "false", "reason": "Checked by hand."}, headers=headers)
    assert back.status_code in (302, 303)
    assert page(client, f"/dashboard/rounds/{rid}/annotators").text(f"annotator-{a}-excluded") == "no"
    unknown = client.post(
        f"/dashboard/rounds/{rid}/annotators/annotator_nobody/exclusion",
        data={"excluded": "true", "reason": "x"},
        headers=headers,
    )
    assert unknown.status_code == 404


# ------------------------------------------------------------------------------------ the export


def test_the_export_page_serves_the_apis_files(client: FlaskClient, seeded: Seeded) -> None:
    rid = seeded.round_id
    shown = page(client, f"/dashboard/rounds/{rid}/export")
    base = f"/dashboard/rounds/{rid}/export"
    assert shown.attr("download-jsonl", "href") == f"{base}/dataset.jsonl"
    assert shown.attr("download-parquet", "href") == f"{base}/dataset.parquet"
    assert shown.attr("download-agreement", "href") == f"{base}/agreement.json"

    jsonl = lead(client, f"{base}/dataset.jsonl")
    assert jsonl.headers["Content-Disposition"].startswith("attachment")
    assert jsonl.get_data() == lead(client, f"/api/rounds/{rid}/dataset?format=jsonl").get_data()
    parquet = lead(client, f"{base}/dataset.parquet")
    rows = pq.read_table(io.BytesIO(parquet.get_data())).to_pylist()
    assert sorted(r["example_id"] for r in rows) == _dataset_ids(client, rid)
    agreement = lead(client, f"{base}/agreement.json")
    assert agreement.headers["Content-Disposition"].startswith("attachment")
    assert agreement.get_json() == api(client, f"/api/rounds/{rid}/agreement")
    assert lead(client, "/dashboard/rounds/999/export").status_code == 404


# ------------------------------------------------------------------------- the round's votes


def test_the_rounds_votes_are_each_annotators_current_vote(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The column query behind the round figures counts the same votes as the domain's
    ``current_votes``: the latest non-cancelled annotation saying something, ties by id. It reads
    in pages (three rows here, so that a candidate's rows straddle pages), and the integer columns
    a release's alpha is computed from give exactly the tuples' alpha and interval."""
    monkeypatch.setattr(round_queries_module, "VOTE_PAGE", 3)
    seeded = seed_round(services, fillers=0)
    rid = seeded.round_id
    rng = random.Random(5)
    base = datetime(2026, 4, 1, tzinfo=UTC)
    with services.database.unit_of_work() as session:
        session.execute(delete(AnnotationRow).where(col(AnnotationRow.round_id) == rid))
        next_id = int(session.exec(select_max_annotation_id()).one() or 0) + 1
        for cid in seeded.ids.values():
            for _ in range(rng.randrange(0, 9)):
                label = rng.choice([*LABELS, None])
                session.add(
                    AnnotationRow(
                        id=next_id + rng.randrange(0, 3),  # ids out of time order
                        candidate_id=cid,
                        round_id=rid,
                        annotator_id=rng.choice(["11", "12", "13"]),
                        label=label,
                        flagged=rng.random() < 0.3,
                        was_cancelled=rng.random() < 0.2,
                        created_at=base,
                        updated_at=base + timedelta(minutes=rng.randrange(0, 4)),  # ties too
                    )
                )
                next_id += 3
        session.add(
            ExclusionEventRow(
                round_id=rid,
                annotator_id="13",
                excluded=True,
                decided_by="lead",
                reason="x",
                gold_correct=0,
                gold_total=0,
            )
        )
        session.add(
            AnnotatorStatusRow(round_id=rid, annotator_id="13", excluded=True, decided_by="lead", reason="x")
        )
        session.commit()
    with services.database.unit_of_work() as session:
        rows = session.exec(select(AnnotationRow).where(AnnotationRow.round_id == rid)).all()
        by_candidate: dict[str, list[AnnotationRow]] = {}
        for row in rows:
            by_candidate.setdefault(row.candidate_id, []).append(row)
        expected = sorted(
            (cid, vote.annotator, vote.label)
            for cid, group in by_candidate.items()
            for vote in current_votes([record_of(r) for r in group])
            if vote.label is not None
        )
        writer_id = session.exec(select(CandidateRow.writer_id).where(CandidateRow.round_id == rid)).first()
    with SqlUnitOfWork(services.database, read_only=True) as uow:
        assert sorted(uow.round_queries.labelled_votes(rid)) == expected
        assert sorted(uow.round_queries.counted_votes(rid)) == [v for v in expected if v[1] != "13"]
        assert len(expected) > 5
        # The writer who is annotator "12" too: their votes on their own examples never count.
        links = {str(writer_id): "12"}
        for writer_annotators in (None, links):
            counted = uow.round_queries.counted_votes(rid, writer_annotators)
            codes = uow.round_queries.counted_vote_codes(rid, writer_annotators)
            assert len(codes.items) == len(counted)
            assert codes.labels.tolist() == [label for _c, _a, label in counted]
            from_tuples = round_alpha(counted, values=LABELS, bootstrap=300, seed=4)
            assert round_alpha(codes, values=LABELS, bootstrap=300, seed=4) == from_tuples
            # A release's round figures take it from the codes: the same.
            assert nominal_alpha_of_codes(codes, LABELS, bootstrap=300, seed=4) == from_tuples
            assert from_tuples.ci95 is not None
        assert len(uow.round_queries.counted_votes(rid, links)) < len(uow.round_queries.counted_votes(rid))
    with SqlUnitOfWork(services.database, read_only=True) as uow:
        empty = uow.round_queries.counted_vote_codes(10**6)
        assert len(empty.items) == 0
        assert round_alpha(empty, values=LABELS).alpha is None


# ----------------------------------------------------------------------- with a real Label Studio


@pytest.mark.labelstudio
def test_a_vote_after_an_override_is_stored_but_does_not_change_the_status(
    live_service: LiveService, label_studio_server: Any, label_studio_annotators: list[Any]
) -> None:
    call = live_service.call
    created = call("POST", "/api/rounds", json={"name": "override round", "task": "sentiment"})
    assert created.status_code == 201, created.text
    round_id, project_id = created.json()["id"], created.json()["label_studio_project_id"]
    text = "Oh great, another meeting that could have been an email."
    body = {"text": text, "writer_label": NEG}
    submitted = call("POST", f"/api/rounds/{round_id}/candidates", token=WRITER_TOKEN, json=body)
    assert submitted.status_code == 201 and submitted.json()["fooled"] is True
    cid = submitted.json()["id"]

    def candidate() -> dict[str, Any]:
        result: dict[str, Any] = call("GET", f"/api/candidates/{cid}").json()
        return result

    wait_for("pushed", lambda: candidate()["label_studio_task_id"] is not None)
    task_id = candidate()["label_studio_task_id"]
    a, b, c = label_studio_annotators[:3]
    label_studio_server.annotate(task_id, a.id, POS)
    label_studio_server.annotate(task_id, b.id, POS)
    wait_for("rejected", lambda: candidate()["status"] == "rejected")

    reason = "Sarcasm: the writer is right."
    overridden = call(
        "POST", f"/api/candidates/{cid}/override", json={"outcome": "accepted", "reason": reason}
    )
    assert overridden.status_code == 200 and overridden.json()["status"] == "accepted"
    label_studio_server.annotate(task_id, c.id, POS)
    wait_for("third vote stored", lambda: len(candidate()["votes"]) == 3)
    sync = call("POST", f"/api/rounds/{round_id}/sync")
    assert sync.status_code == 200, sync.text
    after = candidate()
    assert after["status"] == "accepted" and after["override"]["reason"] == reason
    assert [h["cause"] for h in after["history"]].count("override") == 1
    records = call("GET", f"/api/rounds/{round_id}/dataset?format=jsonl").text.splitlines()
    assert [json.loads(r)["decision"]["override"]["reason"] for r in records] == [reason]

    # The pages show the same, with the lead's bearer header.
    shown = PageIds(call("GET", f"/dashboard/candidates/{cid}").text)
    assert shown.text("prov-status") == "accepted" and len(shown.all("vote-row")) == 3
    assert len(shown.all("audit-row")) == 1
    queue = PageIds(call("GET", f"/dashboard/rounds/{round_id}").text)
    link = queue.attr(f"ls-link-{cid}", "href")
    assert link == f"{label_studio_server.url}/projects/{project_id}/data?task={task_id}"
