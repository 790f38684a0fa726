"""Bearer-token roles. One decorator, so no route repeats a permission block.

Roles: a writer submits candidates as themselves and reads their own; a collector (an outside
collection front end) submits candidates for the writers it names and reads the ones it submitted;
an exporter reads round datasets and agreement reports; a reporter reports failures found in
production to capture rounds and reads the captures it reported; a lead may do everything (and
submits and reports as themselves). Label Studio's webhook has no role: it presents its own secret
in its own header, and that secret is no bearer token.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import Any, TypeVar

from flask import current_app, g, request

from dynaval.domain.errors import DomainError, Forbidden
from dynaval.service_layer.dashboard import sessions as dashboard_sessions
from dynaval.settings import Settings

SESSION_COOKIE = "dynaval_session"
"""The dashboard's session cookie: a random id naming a lead's session kept in the database."""

F = TypeVar("F", bound=Callable[..., Any])


class Role(StrEnum):
    WRITER = "writer"
    COLLECTOR = "collector"
    EXPORTER = "exporter"
    REPORTER = "reporter"
    LEAD = "lead"


class Unauthorized(DomainError):
    code = "unauthorized"


@dataclass(frozen=True)
class Caller:
    """Who is calling: the role, and the name their token is configured under (``name=token``, or
    one derived from the token)."""

    role: Role
    name: str | None = None

    @property
    def owner(self) -> str | None:
        """The submitter whose candidates alone this caller may read (a writer, a collector or a
        reporter: themselves), or None for a caller who may read every candidate."""
        return self.name if self.role in (Role.WRITER, Role.COLLECTOR, Role.REPORTER) else None

    @property
    def submits_for_others(self) -> bool:
        """Whether this caller names the writer of each candidate it submits (a collector) rather
        than being that writer (a writer, a lead)."""
        return self.role is Role.COLLECTOR


def _match(presented: str, tokens: Iterable[tuple[str, str]]) -> str | None:
    """The name paired with ``presented`` among ``(name, token)`` pairs, or None."""
    # Compare against every token so timing does not tell which one nearly matched.
    found = None
    for name, token in tokens:
        if token and hmac.compare_digest(presented.encode(), token.encode()) and found is None:
            found = name
    return found


def caller_of_token(settings: Settings, presented: str) -> Caller | None:
    """The caller a token identifies (leads first, then writers, collectors, exporters, reporters),
    or None for an unknown token."""
    for role, credentials in (
        (Role.LEAD, settings.lead_credentials),
        (Role.WRITER, settings.writer_credentials),
        (Role.COLLECTOR, settings.collector_credentials),
        (Role.EXPORTER, settings.exporter_credentials),
        (Role.REPORTER, settings.reporter_credentials),
    ):
        name = _match(presented, ((c.name, c.token) for c in credentials))
        if name is not None:
            return Caller(role, name)
    return None


def caller_of(settings: Settings, authorization: str | None) -> Caller:
    """The caller a bearer header identifies; raises :class:`Unauthorized` for a missing or unknown one."""
    if not authorization or not authorization.startswith("Bearer "):
        raise Unauthorized("send Authorization: Bearer <token>", field="Authorization")
    caller = caller_of_token(settings, authorization.removeprefix("Bearer ").strip())
    if caller is None:
        raise Unauthorized("unknown token", field="Authorization")
    return caller


def session_caller() -> Caller | None:
    """The lead whose dashboard session the request's cookie names, if it holds; resolved once per
    request (the rate limiter and the page both ask), its id then on ``g.session_id``."""
    if "dynaval_session_caller" not in g:
        g.dynaval_session_caller = _resolve_session()
    found: Caller | None = g.dynaval_session_caller
    return found


def _resolve_session() -> Caller | None:
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if not session_id:
        return None
    found = dashboard_sessions.resolve(current_app.extensions["dynaval"], session_id)
    if found is None:
        return None
    g.session_id = session_id
    return Caller(Role.LEAD, found.lead)


def role_of(settings: Settings, authorization: str | None) -> Role:
    """The role a bearer token grants; raises :class:`Unauthorized` for a missing or unknown one."""
    return caller_of(settings, authorization).role


def _either(roles: tuple[Role, ...]) -> str:
    """``lead``, ``exporter or lead``, ``writer, collector or lead``."""
    names = [r.value for r in roles]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def requires(*roles: Role) -> Callable[[F], F]:
    """Let the request through only for a token of one of ``roles``; the role lands on ``g.role``
    and the caller (with their name) on ``g.caller``.

    This is the one place where the API checks roles; ``required_roles`` on the view tells the
    OpenAPI document and the access tests which roles may call it.
    """

    def wrap(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            caller = caller_of(
                current_app.extensions["dynaval"].settings, request.headers.get("Authorization")
            )
            if caller.role not in roles:
                raise Forbidden(f"this needs the {_either(roles)} role", field="Authorization")
            g.role = caller.role
            g.caller = caller
            return view(*args, **kwargs)

        guarded.required_roles = tuple(r.value for r in roles)  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return wrap
