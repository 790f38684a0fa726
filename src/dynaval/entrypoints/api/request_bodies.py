"""The one source of a route's request body and of the app's services: every blueprint reads its
body through :func:`checked_body`, so a body is parsed, limited and refused (naming the field) the
same way on every route."""

from __future__ import annotations

from typing import TypeVar

from flask import current_app, request

from dynaval.entrypoints.api import form_bodies
from dynaval.entrypoints.api.fields import RequestModel
from dynaval.entrypoints.api.limited_models import request_models
from dynaval.entrypoints.guards import parse_json, read_body
from dynaval.service_layer.services import Services

M = TypeVar("M", bound=RequestModel)


def app_services() -> Services:
    """The services the composition root gave this app."""
    services: Services = current_app.extensions["dynaval"]
    return services


def json_payload(*, strict: bool = True) -> object:
    """The request's JSON body, or None when it is not JSON (see :func:`guards.parse_json`)."""
    if not request.is_json:
        return None
    return parse_json(read_body(), strict=strict)


def checked_body(declared: type[M], *, form: bool = False) -> M:
    """The request's JSON body, checked by the app's model of ``declared`` (with the configured
    limits); a refusal names the field (see :mod:`dynaval.entrypoints.api.schemas`). ``form``: a
    ``multipart/form-data`` body is taken too, read into the same shape
    (:mod:`dynaval.entrypoints.api.form_bodies`)."""
    payload = form_bodies.form_payload() if form and form_bodies.is_form() else json_payload()
    return request_models(app_services().settings).validate(declared, payload)
