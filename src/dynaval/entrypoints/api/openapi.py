"""OpenAPI 3.1 document generated from the registered routes and the request models that check their
bodies, built with the app's configured limits (:func:`dynaval.entrypoints.api.schemas.request_models`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask
from pydantic import BaseModel
from werkzeug.routing import IntegerConverter

from dynaval import __version__
from dynaval.adapters.db.database import MAX_SERIAL_ID
from dynaval.entrypoints.api.fields import RequestModel
from dynaval.entrypoints.api.limited_models import request_models
from dynaval.entrypoints.auth import Role
from dynaval.entrypoints.guards import LIMITER, RATE_EXEMPT_ENDPOINTS, SCORING_BUDGET
from dynaval.service_layer.services import Services

F = TypeVar("F", bound=Callable[..., Any])

EVERY_ROLE = {role.value for role in Role}

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": ["string", "null"]},
            },
        }
    },
}


def documented(
    *,
    summary: str,
    roles: tuple[str, ...] = (),
    body: type[RequestModel] | None = None,
    responses: dict[int, str] | None = None,
    query: dict[str, dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    scores: bool = False,
    form: bool = False,
) -> Callable[[F], F]:
    """Attach the facts the OpenAPI document needs to a view function. ``body``: the request model the
    route validates its body with (documented with the app's limits, as it checks them). ``scores``:
    the route runs the model, charged to the caller's scoring budget (``guards.charge_scoring``).
    ``form``: the body may also come as ``multipart/form-data`` (an image as a file part)."""

    def mark(view: F) -> F:
        view.openapi = {  # type: ignore[attr-defined]
            "summary": summary,
            "roles": roles,
            "body": body,
            "responses": responses or {200: "OK"},
            "query": query or {},
            "headers": headers or {},
            "scores": scores,
            "form": form,
        }
        return view

    return mark


def build_openapi(app: Flask) -> dict[str, Any]:
    from dynaval.entrypoints.webhook import WEBHOOK_OPERATION, WEBHOOK_PATH

    services: Services = app.extensions["dynaval"]
    models = request_models(services.settings)
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, Any] = {
        "schemas": {"Error": ERROR_SCHEMA},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    }
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        view = app.view_functions.get(rule.endpoint)
        spec = getattr(view, "openapi", None)
        if spec is None:
            continue
        path = rule.rule
        parameters: list[dict[str, Any]] = []
        for arg in rule.arguments:
            schema = (
                {"type": "integer", "minimum": 1, "maximum": MAX_SERIAL_ID}
                if isinstance(rule._converters[arg], IntegerConverter)
                else {"type": "string"}
            )
            parameters.append({"name": arg, "in": "path", "required": True, "schema": schema})
            path = path.replace(f"<int:{arg}>", f"{{{arg}}}").replace(f"<{arg}>", f"{{{arg}}}")
        for name, schema in spec["query"].items():
            parameters.append({"name": name, "in": "query", "required": False, "schema": schema})
        parameters += _header_parameters(spec["headers"])
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            operation: dict[str, Any] = {
                "operationId": f"{rule.endpoint}_{method.lower()}",
                "summary": spec["summary"],
                "parameters": parameters,
                "responses": {},
            }
            roles = spec["roles"] or getattr(view, "required_roles", ())
            if roles:
                operation["security"] = [{"bearer": []}]
                operation["description"] = "Roles: " + ", ".join(roles)
            body = models.model(spec["body"]) if spec["body"] is not None else None
            if body is not None:
                operation["requestBody"] = _request_body(body, components)
                if spec.get("form"):
                    operation["requestBody"]["content"]["multipart/form-data"] = FORM_BODY
            responses = dict(spec["responses"])
            # What every route answers by construction: auth errors from @requires, 404 for unknown ids.
            if roles:
                responses.setdefault(401, "Missing or unknown token")
                if set(roles) != EVERY_ROLE:
                    responses.setdefault(403, "The token's role may not do this")
            if rule.arguments:
                responses.setdefault(404, "Not found")
            # What the guards answer before any route runs (see guards.py).
            if body is not None or spec["query"]:
                responses.setdefault(422, "Invalid field")
            if body is not None:
                responses.setdefault(413, "Body larger than DYNAVAL_MAX_BODY_BYTES")
            if spec["scores"] and SCORING_BUDGET in app.extensions:
                responses.setdefault(
                    429, "Too many requests, or the scoring budget is spent; Retry-After says when to retry"
                )
            if LIMITER in app.extensions and rule.endpoint not in RATE_EXEMPT_ENDPOINTS:
                responses.setdefault(429, "Too many requests for this caller; Retry-After says when to retry")
            operation["responses"] = _responses(responses)
            paths.setdefault(path, {})[method.lower()] = operation
    paths[WEBHOOK_PATH] = {"post": _webhook_operation(WEBHOOK_OPERATION, components)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "dynaval", "version": __version__},
        "paths": paths,
        "components": components,
    }


def _webhook_operation(spec: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """Label Studio's webhook: an endpoint in front of Flask (no url_map rule), published alike."""
    return {
        "operationId": "label_studio_webhook_post",
        "summary": spec["summary"],
        "parameters": _header_parameters(spec["headers"]),
        "requestBody": _request_body(spec["body"], components),
        "responses": _responses(spec["responses"]),
    }


def _header_parameters(headers: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "header", "required": True, "description": text, "schema": {"type": "string"}}
        for name, text in headers.items()
    ]


FORM_BODY: dict[str, Any] = {
    "schema": {
        "type": "object",
        "description": "The JSON body's fields as parts: an input's file part named by the input "
        "(`image` or `inputs.image`), an input's text part named `inputs.<field>`, and `writer_label`, "
        "`writer_id`, `rationale` as text parts.",
        "properties": {"image": {"type": "string", "format": "binary"}},
        "additionalProperties": {"type": "string"},
    }
}


def _request_body(body: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """The body's schema, its models added to ``components``."""
    name = body.__name__
    schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
    components["schemas"].update(schema.pop("$defs", {}))
    components["schemas"][name] = schema
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def _responses(responses: dict[int, str]) -> dict[str, Any]:
    """Each status's description; an error's body is the Error schema."""
    return {
        str(status): {
            "description": description,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/Error"} if status >= 400 else {"type": "object"}
                }
            },
        }
        for status, description in sorted(responses.items())
    }
