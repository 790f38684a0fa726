"""The Flask application factory. Nothing is built at import: gunicorn calls ``create_app()``."""

from __future__ import annotations

import functools
import gc
import logging
from typing import Any

from flask import Flask, jsonify
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

from dynaval.adapters.task_queue import EmbeddedConsumer, start_embedded_consumer
from dynaval.domain.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InvalidInput,
    NotFound,
    TooLarge,
    TooManyRequests,
    Unavailable,
)
from dynaval.entrypoints.auth import Unauthorized
from dynaval.entrypoints.openapi import build_openapi
from dynaval.entrypoints.webhook_wsgi import WebhookFastPath
from dynaval.service_layer.services import Services
from dynaval.service_layer.votes import WebhookUnauthorized
from dynaval.settings import Settings

log = logging.getLogger(__name__)

STATUS_OF: dict[type[DomainError], int] = {
    InvalidInput: 422,
    TooLarge: 413,
    NotFound: 404,
    Conflict: 409,
    Unavailable: 503,
    Unauthorized: 401,
    WebhookUnauthorized: 401,
    Forbidden: 403,
    TooManyRequests: 429,
}


def status_of(error: DomainError) -> int:
    """The HTTP status of a domain error."""
    for kind in type(error).__mro__:
        if kind in STATUS_OF:
            return STATUS_OF[kind]
    return 400


def error_body(code: str, message: str, field: str | None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


def render_error(error: Exception, *, max_body_bytes: int) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, JSON body and extra headers of the answer to ``error``: the Flask routes' error
    handlers and the webhook's path in front of Flask both answer with this."""
    if isinstance(error, HTTPException):
        status = error.code or 500
        field = "body" if status in (408, 413) else None
        code = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "too_large"}.get(
            status, "http_error"
        )
        message = {
            413: f"the body must be at most {max_body_bytes} bytes",
        }.get(status, error.description or error.name)
        return status, error_body(code, message, field), {}
    if isinstance(error, DomainError):
        headers = {"Retry-After": "5"} if isinstance(error, Unavailable) else {}
        if isinstance(error, TooManyRequests):
            headers = {"Retry-After": str(error.retry_after_s)}
        return status_of(error), error_body(error.code, error.message, error.field), headers
    if isinstance(error, OperationalError):
        # A locked SQLite file or an unreachable PostgreSQL: nothing was written; the caller may retry.
        log.warning("database unavailable: %s", type(error.orig).__name__)
        body = error_body("unavailable", "the database is busy or unreachable; try again", None)
        return 503, body, {"Retry-After": "1"}
    # Log the traceback for operators; the caller gets no internals.
    log.error("unhandled error", exc_info=error)
    return 500, error_body("internal", "internal error; the operator's log has the details", None), {}


def freeze_long_lived_objects() -> None:
    """Take every object alive now out of the garbage collector's sight, garbage collected first."""
    gc.collect()
    gc.freeze()


def prepare_long_running_process(app: Flask) -> None:
    """For a process that serves ``app`` for long (each gunicorn worker, once the app is loaded).

    What it loaded (Flask, SQLAlchemy, the Label Studio client; with a model, torch and
    transformers: some 560,000 objects in all) lives as long as the process, and a full garbage
    collection walking them paused every request in flight for up to 200 ms. They are frozen now,
    and again after each model the process loads.
    """
    services: Services = app.extensions["dynaval"]
    services.models.after_load = freeze_long_lived_objects
    freeze_long_lived_objects()


def create_app(
    services: Services | None = None,
    *,
    settings: Settings | None = None,
    start_background: bool | None = None,
) -> Flask:
    """Build the app around ``services`` (built from settings by the composition root when absent).

    A task-queue consumer (pushes to Label Studio, escalations, the sweep, scheduled reconcile; see
    :mod:`dynaval.entrypoints.worker`) starts in the process when ``start_background`` is true, or
    by default when ``DYNAVAL_EMBEDDED_WORKER`` says so.
    """
    if services is None:
        from dynaval.bootstrap import bootstrap

        services = bootstrap(settings)
    app = Flask("dynaval", static_folder=None)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["dynaval"] = services

    from dynaval.entrypoints import guards, pages
    from dynaval.entrypoints.routes import api

    app.register_blueprint(api)
    pages.init_app(app)
    guards.init_app(app)

    @app.get("/openapi.json")
    def openapi() -> Any:
        return jsonify(build_openapi(app))

    max_body_bytes = services.settings.max_body_bytes

    def render(error: Exception) -> Any:
        status, body, headers = render_error(error, max_body_bytes=max_body_bytes)
        return jsonify(body), status, headers

    for kind in (DomainError, OperationalError, HTTPException, Exception):
        app.register_error_handler(kind, render)
    # Label Studio's webhook is answered before Flask's request machinery (the same use case and
    # error bodies); see dynaval.entrypoints.webhook_wsgi.
    app.wsgi_app = WebhookFastPath(  # type: ignore[method-assign]
        app.wsgi_app, services, functools.partial(render_error, max_body_bytes=max_body_bytes)
    )

    run_background = start_background if start_background is not None else services.settings.embedded_worker
    if run_background:
        app.extensions["dynaval_worker"] = start_embedded_consumer(
            services.task_queue, workers=services.settings.queue_workers
        )
    return app


def shutdown(app: Flask) -> None:
    """Stop the task-queue consumer (running tasks finish) and release the app's services."""
    consumer: EmbeddedConsumer | None = app.extensions.get("dynaval_worker")
    if consumer is not None:
        consumer.stop(graceful=True)
    services: Services = app.extensions["dynaval"]
    services.close()
