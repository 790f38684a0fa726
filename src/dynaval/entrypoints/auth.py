"""Bearer-token roles. One decorator, so no route repeats a permission block."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from enum import StrEnum
from functools import wraps
from typing import Any, TypeVar

from flask import current_app, g, request

from dynaval.domain.errors import DomainError
from dynaval.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


class Role(StrEnum):
    WRITER = "writer"
    LEAD = "lead"


class Unauthorized(DomainError):
    code = "unauthorized"


class Forbidden(DomainError):
    code = "forbidden"


def _matches(presented: str, tokens: Iterable[str]) -> bool:
    # Compare against every token so timing does not tell which one nearly matched.
    found = False
    for token in tokens:
        if token and hmac.compare_digest(presented.encode(), token.encode()):
            found = True
    return found


def role_of(settings: Settings, authorization: str | None) -> Role:
    """The role a bearer token grants; raises :class:`Unauthorized` for a missing or unknown one."""
    if not authorization or not authorization.startswith("Bearer "):
        raise Unauthorized("send Authorization: Bearer <token>", field="Authorization")
    presented = authorization.removeprefix("Bearer ").strip()
    if _matches(presented, settings.lead_tokens):
        return Role.LEAD
    if _matches(presented, settings.writer_tokens):
        return Role.WRITER
    raise Unauthorized("unknown token", field="Authorization")


def requires(*roles: Role) -> Callable[[F], F]:
    """Let the request through only for a token of one of ``roles``; the role lands on ``g.role``."""

    def wrap(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            role = role_of(current_app.extensions["dynaval"].settings, request.headers.get("Authorization"))
            if role not in roles:
                raise Forbidden(
                    f"this needs the {' or '.join(r.value for r in roles)} role", field="Authorization"
                )
            g.role = role
            return view(*args, **kwargs)

        guarded.required_roles = tuple(r.value for r in roles)  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return wrap
