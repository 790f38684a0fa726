"""The lead's dashboard session, as the pages meet it: the cookies, the CSRF tokens of the forms,
and :func:`lead_page`, which serves a page to a lead (a session's cookie or a lead's bearer token)
and nobody else. The sessions themselves are kept by :mod:`dynaval.service_layer.dashboard.sessions`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from flask import current_app, g, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from dynaval.entrypoints.auth import SESSION_COOKIE, Caller, Role, Unauthorized, caller_of, session_caller
from dynaval.service_layer.services import Services

F = TypeVar("F", bound=Callable[..., Any])

LOGIN_COOKIE = "dynaval_login"
"""Holds the random value the login form's CSRF token is derived from (before any session)."""
COOKIE_PATH = "/dashboard"  # the API never reads the cookies: they are not sent there
FORM_EXPIRED = "The form has expired: reload the page and try again."
CROSS_ORIGIN = frozenset({"cross-site", "same-site"})
"""``Sec-Fetch-Site`` values of a request another origin (Label Studio's port included) started."""


def _services() -> Services:
    services: Services = current_app.extensions["dynaval"]
    return services


def mac(purpose: str, value: str) -> str:
    key = _services().settings.resolved_session_secret.encode()
    return hmac.new(key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def same(presented: str, wanted: str) -> bool:
    return bool(wanted) and hmac.compare_digest(presented.encode(), wanted.encode())


def csrf_token() -> str:
    """The token a form posted with the session must carry (empty without a session)."""
    session_id = g.get("session_id")
    return mac("csrf", session_id) if session_id else ""


def from_another_origin() -> bool:
    return request.headers.get("Sec-Fetch-Site", "").lower() in CROSS_ORIGIN


def form_is_ours(wanted: str) -> bool:
    """A form posted with a cookie came from our own page: its CSRF token is ``wanted``, and the
    browser (when it says) saw it start on this origin."""
    return not from_another_origin() and same(request.form.get("csrf_token", ""), wanted)


def set_cookie(response: BaseResponse, name: str, value: str, *, path: str, max_age: int | None) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        secure=_services().settings.resolved_session_cookie_secure,
        httponly=True,
        samesite="Lax",
    )


def delete_cookie(response: BaseResponse, name: str, *, path: str) -> None:
    response.delete_cookie(
        name,
        path=path,
        secure=_services().settings.resolved_session_cookie_secure,
        httponly=True,
        samesite="Lax",
    )


def forget_session(response: BaseResponse) -> BaseResponse:
    delete_cookie(response, SESSION_COOKIE, path=COOKIE_PATH)
    return response


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
            caller = session_caller()
        if caller is None:
            response = redirect(url_for("dashboard.login"))
            # A cookie naming a session that ended is of no use any more.
            return forget_session(response) if request.cookies.get(SESSION_COOKIE) else response
        if caller.role is not Role.LEAD:
            return render_template("forbidden.html"), 403
        g.caller = caller
        if request.method == "POST" and not header and not form_is_ours(csrf_token()):
            return render_template("error.html", status=400, message=FORM_EXPIRED), 400
        return view(*args, **kwargs)

    return guarded  # type: ignore[return-value]
