"""How an error becomes an HTTP answer: one place for the API's routes, the dashboard's pages and
the webhook's path in front of Flask. Every error body is ``{"error": {"code", "message", "field"}}``."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

from dynaval.domain.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InvalidInput,
    NearDuplicateRefused,
    NotFound,
    TooLarge,
    TooManyRequests,
    Unavailable,
)
from dynaval.entrypoints.auth import Unauthorized
from dynaval.service_layer.validation.webhooks import WebhookUnauthorized

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


def render_error(
    error: Exception, *, max_body_bytes: int, body_limit_says: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, JSON body and extra headers of the answer to ``error``: the Flask routes' error
    handlers and the webhook's path in front of Flask both answer with this."""
    if isinstance(error, HTTPException):
        status = error.code or 500
        field = "body" if status in (408, 413) else None
        code = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "too_large"}.get(
            status, "http_error"
        )
        message = {
            413: body_limit_says or f"the body must be at most {max_body_bytes} bytes",
        }.get(status, error.description or error.name)
        return status, error_body(code, message, field), {}
    if isinstance(error, DomainError):
        headers = {"Retry-After": "5"} if isinstance(error, Unavailable) else {}
        if isinstance(error, TooManyRequests):
            headers = {"Retry-After": str(error.retry_after_s)}
        body = error_body(error.code, error.message, error.field)
        if isinstance(error, NearDuplicateRefused):
            body["error"]["near_duplicates"] = error.near_duplicates
        return status_of(error), body, headers
    if isinstance(error, OperationalError):
        # A locked SQLite file or an unreachable PostgreSQL: nothing was written; the caller may retry.
        # The driver's message says why ("database is locked"); it holds no bound values.
        log.warning("database unavailable: %s: %s", type(error.orig).__name__, str(error.orig)[:200])
        body = error_body("unavailable", "the database is busy or unreachable; try again", None)
        return 503, body, {"Retry-After": "1"}
    # Log the traceback for operators; the caller gets no internals.
    log.error("unhandled error", exc_info=error)
    return 500, error_body("internal", "internal error; the operator's log has the details", None), {}
