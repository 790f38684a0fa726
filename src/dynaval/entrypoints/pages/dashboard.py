"""The lead's dashboard: server-rendered pages under ``/dashboard``.

Every page needs the lead credential: the session cookie the login form sets, or an
``Authorization: Bearer <lead token>`` header. Without one a page redirects to the login; a
writer's token gets 403. The cookie holds only a random session id; the session itself lives in
the database (``service_layer.dashboard_sessions``), so the logout, the lifetime and the idle
timeout hold on every worker and machine, and a copied cookie dies with its session.

Every form posted with the session carries a CSRF token derived from the session id; the login
form, posted before any session exists, carries one derived from a random value in a cookie of its
own (signed double submit). Cookies alone protect nothing here: Label Studio, on another port of
the same host, is the same site for SameSite and may even set cookies for this host. Browsers that
say so (``Sec-Fetch-Site``) have posts from another origin refused outright.

Each handler parses the request, calls one use case (``service_layer.dashboard`` and the API's
own use cases) and renders a template; the templates only display.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
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
    url_for,
)

from dynaval.domain.errors import DomainError, InvalidInput, NotFound
from dynaval.domain.images.image import image_ref, is_image_ref, is_sha256
from dynaval.entrypoints.api.limited_models import request_models
from dynaval.entrypoints.api.routes import FIGURES_CACHE, dataset_download, release_download
from dynaval.entrypoints.api.schemas import (
    ExclusionChange,
    OverrideCreate,
    RetrainingPolicyRequest,
    RevalidateRequest,
)
from dynaval.entrypoints.auth import (
    SESSION_COOKIE,
    Role,
    caller_of_token,
)
from dynaval.entrypoints.errors import status_of
from dynaval.entrypoints.guards import query_int
from dynaval.entrypoints.pages import charts
from dynaval.entrypoints.pages.lead_session import (
    COOKIE_PATH,
    FORM_EXPIRED,
    LOGIN_COOKIE,
    csrf_token,
    delete_cookie,
    forget_session,
    form_is_ours,
    lead_page,
    mac,
    set_cookie,
)
from dynaval.service_layer.agreement import reports as agreement
from dynaval.service_layer.dashboard import models_page
from dynaval.service_layer.dashboard import sessions as dashboard_sessions
from dynaval.service_layer.dashboard import views as use_cases
from dynaval.service_layer.dashboard.figures_cache import FiguresCache
from dynaval.service_layer.dataset_records import round_dataset as dataset
from dynaval.service_layer.health import near_duplicates, round_health
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.regression import revalidation
from dynaval.service_layer.releases import catalog
from dynaval.service_layer.retraining import policies as retraining
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import annotator_exclusion, overrides

F = TypeVar("F", bound=Callable[..., Any])

pages = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
)

CACHE = FIGURES_CACHE
DASH = "—"
FLAGGED_SHOWN = 20
"""Flagged near-duplicates listed above a round's queue (all: ``GET /api/rounds/<id>/near-duplicates``)."""


def init_app(app: Flask) -> None:
    """Register the dashboard on ``app``: its blueprint and the figures cache."""
    services: Services = app.extensions["dynaval"]
    app.extensions[CACHE] = FiguresCache(wait_s=services.settings.dashboard_wait_ms / 1000)
    app.register_blueprint(pages)


def _services() -> Services:
    services: Services = current_app.extensions["dynaval"]
    return services


def _cache() -> FiguresCache:
    cache: FiguresCache = current_app.extensions[CACHE]
    return cache


@pages.app_context_processor
def _page_globals() -> dict[str, Any]:
    caller = g.get("caller")
    return {
        "lead_name": caller.name if caller is not None and caller.role is Role.LEAD else None,
        "signed_in": bool(g.get("session_id")),
        "csrf_token": csrf_token,
        "DASH": DASH,
        # Where a person opens a task in Label Studio: the adapter knows Label Studio's URLs.
        "task_url": _services().label_studio.task_url,
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


HEAT_STEPS = 20


@pages.app_template_filter("heat")
def _heat(value: float | None) -> str:
    """A heatmap cell's class: ``heat-0`` (red, 0) through amber to ``heat-20`` (green, 1), in steps
    of 0.05; ``heat-none`` (grey) when undefined. Classes, not a style attribute: the pages'
    Content-Security-Policy allows no inline style (dashboard.css defines the colours)."""
    if value is None:
        return "heat-none"
    return f"heat-{round(HEAT_STEPS * max(0.0, min(1.0, value)))}"


@pages.app_template_test("image_ref")
def _is_image_ref(value: object) -> bool:
    """Whether an input is a stored image (an image task type's): shown as its thumbnail."""
    return is_image_ref(value)


@pages.get("/images/<sha256>.png")
@lead_page
def image(sha256: str) -> Any:
    """A stored image's thumbnail, for a lead's pages (the session is the credential)."""
    if not is_sha256(sha256):
        raise NotFound("no such image", field="image")
    return Response(stored_images.thumbnail(_services().images, image_ref(sha256)), mimetype="image/png")


@pages.errorhandler(DomainError)
def _domain_error(error: DomainError) -> Any:
    status = status_of(error)
    return render_template("error.html", status=status, message=error.message), status


# ----------------------------------------------------------------------------------- the login


@pages.get("")
@pages.get("/")
def home() -> Any:
    return redirect(url_for("dashboard.rounds"))


def _login_page(*, error: str | None = None, status: int = 200) -> Any:
    """The login form, with a CSRF token derived from the random value in the login cookie (a new
    one when the browser has none)."""
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    fresh = len(nonce) < 32
    if fresh:
        nonce = secrets.token_urlsafe(32)
    response = current_app.make_response(
        (render_template("login.html", error=error, login_csrf=mac("login", nonce)), status)
    )
    if fresh:
        set_cookie(response, LOGIN_COOKIE, nonce, path=url_for("dashboard.login"), max_age=None)
    return response


@pages.get("/login")
def login() -> Any:
    return _login_page()


@pages.post("/login")
def login_submit() -> Any:
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not form_is_ours(mac("login", nonce)):
        return _login_page(error=FORM_EXPIRED, status=400)
    token = request.form.get("token", "").strip()
    caller = caller_of_token(_services().settings, token)
    if caller is None:
        return _login_page(error="Unknown token.", status=401)
    if caller.role is not Role.LEAD or caller.name is None:
        return _login_page(error="The dashboard is for leads only.", status=403)
    session_id = dashboard_sessions.start(
        _services(), lead=caller.name, token=token, replacing=request.cookies.get(SESSION_COOKIE)
    )
    response = redirect(url_for("dashboard.rounds"), code=303)
    max_age = math.ceil(_services().settings.session_lifetime_s)  # the server ends it anyway
    set_cookie(response, SESSION_COOKIE, session_id, path=COOKIE_PATH, max_age=max_age)
    delete_cookie(response, LOGIN_COOKIE, path=url_for("dashboard.login"))
    return response


@pages.post("/logout")
def logout() -> Any:
    """End the session (revoked in the database, so a copy of the cookie dies too) and forget the
    cookie. A session that already ended needs no form; a live one needs the page's CSRF token."""
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if session_id and dashboard_sessions.resolve(_services(), session_id) is not None:
        if not form_is_ours(mac("csrf", session_id)):
            return render_template("error.html", status=400, message=FORM_EXPIRED), 400
        dashboard_sessions.end(_services(), session_id)
    return forget_session(redirect(url_for("dashboard.login"), code=303))


# ---------------------------------------------------------------------------------- the pages


@pages.get("/rounds")
@lead_page
def rounds() -> Any:
    figures = use_cases.rounds_overview(_services(), _cache())
    return render_template("rounds.html", rounds=figures, chart=charts.rounds_chart(figures))


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
    flagged = near_duplicates.flagged_candidates(services, round_id, limit=FLAGGED_SHOWN)
    return render_template(
        "round.html",
        round=figures,
        nav_round=figures,
        queue=queue,
        flagged=flagged,
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
        error=error,
        form=request.form if error else {},
    ), status


def _form(*names: str) -> dict[str, str]:
    """The form's fields among ``names``, for the API's request model (a field left out is missing)."""
    return {name: value for name in names if (value := request.form.get(name)) is not None}


@pages.post("/candidates/<candidate_id>/override")
@lead_page
def override(candidate_id: str) -> Any:
    try:
        # The API's request model checks the form too: one set of rules for an override.
        body = request_models(_services().settings).validate(OverrideCreate, _form("outcome", "reason"))
        overrides.override_decision(
            _services(),
            candidate_id=candidate_id,
            outcome=body.outcome,
            reason=body.reason,
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
        "annotators.html", view=view, chart=charts.annotators_chart(view), nav_round=nav, error=error
    ), status


@pages.post("/rounds/<int:round_id>/annotators/<annotator>/exclusion")
@lead_page
def toggle_exclusion(round_id: int, annotator: str) -> Any:
    try:
        form = {**_form("reason"), "excluded": request.form.get("excluded") == "true"}
        body = request_models(_services().settings).validate(ExclusionChange, form)
        annotator_exclusion.set_exclusion_by_lead(
            _services(),
            round_id=round_id,
            annotator=annotator,
            excluded=body.excluded,
            reason=body.reason,
        )
    except DomainError as exc:
        if exc.field == "round_id":
            raise
        return _annotators_page(round_id, error=exc.message, status=status_of(exc))
    return redirect(url_for("dashboard.annotators", round_id=round_id), code=303)


@pages.get("/rounds/<int:round_id>/health")
@lead_page
def health(round_id: int) -> Any:
    view = round_health.round_health(_services(), _cache(), round_id)
    return render_template(
        "health.html",
        view=view,
        nav_round=use_cases.RoundNav(view.round_id, view.name),
        clusters=view.health.clusters[: round_health.CLUSTERS_SHOWN],
        chart=charts.health_chart(view),
    )


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


# ------------------------------------------------------------------------------------ releases


def _card_html(card: str) -> tuple[str, str]:
    """A release card as (its YAML header, its body as HTML). The Markdown is rendered with raw HTML
    turned off (a round's name in the card is text, never markup) and unsafe links refused."""
    from markdown_it import MarkdownIt

    header, body = "", card
    if card.startswith("---\n"):
        end = card.find("\n---\n", 4)
        if end != -1:
            header, body = card[4:end], card[end + 5 :]
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(body)
    return header, html


@pages.get("/releases")
@lead_page
def releases_page() -> Any:
    listed = [catalog.release_summary(r) for r in catalog.list_releases(_services())]
    return render_template("releases.html", releases=list(reversed(listed)))


@pages.get("/releases/<int:release_id>")
@lead_page
def release_page(release_id: int) -> Any:
    release = catalog.get_release(_services(), release_id)
    card = catalog.release_card(_services().release_files, release)
    header, html = _card_html(card)
    return render_template(
        "release.html", release=catalog.release_summary(release), card_header=header, card_html=html
    )


@pages.get("/releases/<int:release_id>/download")
@lead_page
def release_page_download(release_id: int) -> Response:
    return release_download(_services(), release_id)


# -------------------------------------------------------------------------------------- models


@pages.get("/models")
@lead_page
def models() -> Any:
    return _models_page()


def _models_page(*, error: str | None = None, status: int = 200, error_at: str = "suspects") -> Any:
    services = _services()
    view = models_page.models_page(
        services, _cache(), split=request.args.get("split") or None, page=query_int("page", 1) or 1
    )
    policies = [retraining.policy_view(services, name) for name in services.catalog.names()]
    page = render_template("models.html", view=view, retraining=policies, error=error, error_at=error_at)
    return page, status


RETRAINING_NUMBERS = ("every", "min_interval_s", "max_flips", "epochs", "seed", "batch_size", "learning_rate")
NULL_WHEN_BLANK = ("every", "learning_rate")
"""Blank in the form: off (``every``), the task's recipe (``learning_rate``)."""


@pages.post("/models/retraining/<task_type>")
@lead_page
def set_retraining(task_type: str) -> Any:
    """A task type's retraining policy, set from the models page's form, as PUT
    /api/task-types/<task>/retraining sets it (the same request model checks the form)."""
    try:
        form: dict[str, Any] = {"with_seed_set": request.form.get("with_seed_set") == "on"}
        for name, given in request.form.items():
            value = given.strip()
            if name in ("csrf_token", "with_seed_set") or (value == "" and name not in NULL_WHEN_BLANK):
                continue  # left blank: its default
            form[name] = _form_value(name, value)
        body = request_models(_services().settings).validate(RetrainingPolicyRequest, form)
        retraining.set_policy(_services(), task_type, body.model_dump(), by=g.caller.name)
    except DomainError as exc:
        message = f"{exc.field}: {exc.message}" if exc.field else exc.message
        return _models_page(error=message, status=status_of(exc), error_at="retraining")
    return redirect(url_for("dashboard.models") + "#retraining", code=303)


def _form_value(name: str, value: str) -> Any:
    """A form field as the API's body holds it: blank ``every`` or ``learning_rate`` is null, the
    choices are words, the rest numbers (a field the request model does not know is left to it)."""
    if value == "":
        return None
    if name not in RETRAINING_NUMBERS:
        return value
    try:
        return int(value) if name != "learning_rate" else float(value)
    except ValueError:
        raise InvalidInput(f"{value!r} is not a number", field=name) from None


@pages.post("/models/revalidate")
@lead_page
def revalidate_suspects() -> Any:
    """The suspect cases ticked on the models page go back to Label Studio, as POST
    /api/suite/revalidate sends them (the same request model checks the form)."""
    try:
        form: dict[str, Any] = {"cases": request.form.getlist("cases")}
        if name := request.form.get("name", "").strip():
            form["name"] = name
        if not form["cases"]:
            raise InvalidInput("tick at least one suspect case to send", field="cases")
        body = request_models(_services().settings).validate(RevalidateRequest, form)
        revalidation.send_suspects_to_revalidation(
            _services(), case_ids=body.cases, by=g.caller.name, name=body.name
        )
    except DomainError as exc:
        return _models_page(error=exc.message, status=status_of(exc))
    return redirect(url_for("dashboard.models") + "#suspects", code=303)
