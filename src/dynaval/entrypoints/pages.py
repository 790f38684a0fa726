"""The lead's dashboard: server-rendered pages under ``/dashboard``.

Every page needs the lead credential: the session cookie the login form sets, or an
``Authorization: Bearer <lead token>`` header. Without one a page redirects to the login; a
writer's token gets 403. The session holds no token, only an HMAC fingerprint of it, checked
against the configured lead tokens on every request (so removing a token ends its sessions).
Forms posted with the session carry a CSRF token derived from it.

Each handler parses the request, calls one use case (``service_layer.dashboard`` and the API's
own use cases) and renders a template; the templates only display.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any, TypeVar

from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)

from dynaval.domain.errors import DomainError
from dynaval.entrypoints.app import status_of
from dynaval.entrypoints.auth import Caller, Role, Unauthorized, caller_of, caller_of_token
from dynaval.entrypoints.guards import query_int
from dynaval.entrypoints.routes import dataset_download
from dynaval.service_layer import agreement, dataset, gold, overrides
from dynaval.service_layer import dashboard as use_cases
from dynaval.service_layer.dashboard import FiguresCache
from dynaval.service_layer.services import Services
from dynaval.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

pages = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
)

SESSION_COOKIE = "dynaval_session"
SESSION_KEY = "lead"
CACHE = "dynaval_dashboard_figures"
DASH = "—"


def init_app(app: Flask) -> None:
    """Register the dashboard on ``app``: its blueprint, the session cookie and the figures cache."""
    services: Services = app.extensions["dynaval"]
    app.secret_key = services.settings.resolved_session_secret
    app.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=services.settings.resolved_session_cookie_secure,
    )
    app.extensions[CACHE] = FiguresCache(wait_s=services.settings.dashboard_wait_ms / 1000)
    app.register_blueprint(pages)


def _services() -> Services:
    services: Services = current_app.extensions["dynaval"]
    return services


def _cache() -> FiguresCache:
    cache: FiguresCache = current_app.extensions[CACHE]
    return cache


# ------------------------------------------------------------------------------------ the lead


def _fingerprint(settings: Settings, token: str) -> str:
    return hmac.new(
        settings.resolved_session_secret.encode(), b"lead:" + token.encode(), hashlib.sha256
    ).hexdigest()


def _session_caller(settings: Settings) -> Caller | None:
    """The lead whose token the session's fingerprint matches, or None."""
    kept = session.get(SESSION_KEY)
    if not isinstance(kept, str):
        return None
    found = None
    for credential in settings.lead_credentials:
        if hmac.compare_digest(kept, _fingerprint(settings, credential.token)) and found is None:
            found = Caller(Role.LEAD, credential.name)
    return found


def _csrf_token() -> str:
    """The token a form posted with the session must carry (empty without a session)."""
    kept = session.get(SESSION_KEY)
    if not isinstance(kept, str):
        return ""
    key = _services().settings.resolved_session_secret.encode()
    return hmac.new(key, b"csrf:" + kept.encode(), hashlib.sha256).hexdigest()


def lead_page(view: F) -> F:
    """Serve the page to a lead (session or bearer header); redirect anyone else to the login,
    except a writer's token, which gets 403."""

    @wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        settings = _services().settings
        header = request.headers.get("Authorization")
        caller: Caller | None
        if header:
            try:
                caller = caller_of(settings, header)
            except Unauthorized:
                caller = None
        else:
            caller = _session_caller(settings)
        if caller is None:
            return redirect(url_for("dashboard.login"))
        if caller.role is not Role.LEAD:
            return render_template("forbidden.html"), 403
        g.caller = caller
        if request.method == "POST" and not header:
            presented = request.form.get("csrf_token", "")
            if not hmac.compare_digest(presented.encode(), _csrf_token().encode()):
                return render_template(
                    "error.html", status=400, message="The form has expired: reload the page and try again."
                ), 400
        return view(*args, **kwargs)

    return guarded  # type: ignore[return-value]


@pages.app_context_processor
def _page_globals() -> dict[str, Any]:
    caller = g.get("caller")
    return {
        "lead_name": caller.name if caller is not None and caller.role is Role.LEAD else None,
        "csrf_token": _csrf_token,
        "DASH": DASH,
    }


@pages.app_template_filter("fmt3")
def _fmt3(value: float | None) -> str:
    """A figure with 3 decimals, or a dash when it is undefined."""
    return DASH if value is None else f"{value:.3f}"


@pages.app_template_filter("when")
def _when(value: str | None) -> str:
    """An ISO 8601 time as ``2026-03-01 09:00:00 UTC`` (the API's times are UTC)."""
    if not value:
        return DASH
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@pages.app_template_filter("heat")
def _heat(value: float | None) -> str:
    """A heatmap background: red (0) through amber to green (1); grey when undefined."""
    if value is None:
        return "background-color: #f1f5f9"
    hue = round(120 * max(0.0, min(1.0, value)))
    return f"background-color: hsl({hue}, 70%, {88 - 18 * value:.0f}%)"


@pages.errorhandler(DomainError)
def _domain_error(error: DomainError) -> Any:
    status = status_of(error)
    return render_template("error.html", status=status, message=error.message), status


# ----------------------------------------------------------------------------------- the login


@pages.get("")
@pages.get("/")
def home() -> Any:
    return redirect(url_for("dashboard.rounds"))


@pages.get("/login")
def login() -> Any:
    return render_template("login.html")


@pages.post("/login")
def login_submit() -> Any:
    session.clear()
    caller = caller_of_token(_services().settings, request.form.get("token", "").strip())
    if caller is None:
        return render_template("login.html", error="Unknown token."), 401
    if caller.role is not Role.LEAD:
        return render_template("login.html", error="The dashboard is for leads only."), 403
    session[SESSION_KEY] = _fingerprint(_services().settings, request.form.get("token", "").strip())
    return redirect(url_for("dashboard.rounds"), code=303)


@pages.get("/logout")
def logout() -> Any:
    session.clear()
    return redirect(url_for("dashboard.login"))


# ---------------------------------------------------------------------------------- the pages


@pages.get("/rounds")
@lead_page
def rounds() -> Any:
    figures = use_cases.rounds_overview(_services(), _cache())
    return render_template("rounds.html", rounds=figures, chart=use_cases.rounds_chart(figures))


@pages.get("/rounds/<int:round_id>")
@lead_page
def round_queue(round_id: int) -> Any:
    services = _services()
    figures = use_cases.round_figures(services, _cache(), round_id)
    queue = use_cases.decision_queue(
        services,
        round_id,
        status=request.args.get("status", ""),
        q=request.args.get("q", ""),
        page=query_int("page", 1) or 1,
        by_status=figures.counts.by_status,
    )
    return render_template(
        "round.html",
        round=figures,
        nav_round=figures,
        queue=queue,
        label_studio_url=services.settings.label_studio_url.rstrip("/"),
    )


@pages.get("/candidates/<candidate_id>")
@lead_page
def candidate(candidate_id: str) -> Any:
    return _candidate_page(candidate_id)


def _candidate_page(candidate_id: str, *, error: str | None = None, status: int = 200) -> Any:
    services = _services()
    view = use_cases.candidate_view(services, candidate_id)
    nav = use_cases.round_nav(services, view.candidate["round_id"])
    return render_template(
        "candidate.html",
        view=view,
        nav_round=nav,
        label_studio_url=services.settings.label_studio_url.rstrip("/"),
        error=error,
        form=request.form if error else {},
    ), status


@pages.post("/candidates/<candidate_id>/override")
@lead_page
def override(candidate_id: str) -> Any:
    try:
        overrides.override_decision(
            _services(),
            candidate_id=candidate_id,
            outcome=request.form.get("outcome"),
            reason=request.form.get("reason"),
            by=g.caller.name,
        )
    except DomainError as exc:
        if status_of(exc) == 404:
            raise
        return _candidate_page(candidate_id, error=exc.message, status=status_of(exc))
    return redirect(url_for("dashboard.candidate", candidate_id=candidate_id), code=303)


@pages.get("/rounds/<int:round_id>/annotators")
@lead_page
def annotators(round_id: int) -> Any:
    return _annotators_page(round_id)


def _annotators_page(round_id: int, *, error: str | None = None, status: int = 200) -> Any:
    services = _services()
    nav = use_cases.round_nav(services, round_id)
    view = use_cases.annotators_view(services, _cache(), round_id)
    return render_template(
        "annotators.html", view=view, chart=use_cases.annotators_chart(view), nav_round=nav, error=error
    ), status


@pages.post("/rounds/<int:round_id>/annotators/<annotator>/exclusion")
@lead_page
def toggle_exclusion(round_id: int, annotator: str) -> Any:
    try:
        gold.set_exclusion_by_lead(
            _services(),
            round_id=round_id,
            annotator=annotator,
            excluded=request.form.get("excluded") == "true",
            reason=request.form.get("reason"),
        )
    except DomainError as exc:
        if exc.field == "round_id":
            raise
        return _annotators_page(round_id, error=exc.message, status=status_of(exc))
    return redirect(url_for("dashboard.annotators", round_id=round_id), code=303)


@pages.get("/rounds/<int:round_id>/export")
@lead_page
def export(round_id: int) -> Any:
    services = _services()
    nav = use_cases.round_nav(services, round_id)
    accepted = dataset.count_accepted(services, round_id)
    return render_template("export.html", round=nav, nav_round=nav, accepted=accepted)


@pages.get("/rounds/<int:round_id>/export/dataset.jsonl")
@lead_page
def export_jsonl(round_id: int) -> Response:
    return dataset_download(_services(), round_id, "jsonl")


@pages.get("/rounds/<int:round_id>/export/dataset.parquet")
@lead_page
def export_parquet(round_id: int) -> Response:
    return dataset_download(_services(), round_id, "parquet")


@pages.get("/rounds/<int:round_id>/export/agreement.json")
@lead_page
def export_agreement(round_id: int) -> Response:
    response = jsonify(agreement.round_agreement(_services(), round_id))
    response.headers["Content-Disposition"] = f'attachment; filename="round-{round_id}-agreement.json"'
    return response
