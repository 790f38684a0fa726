"""Label Studio's webhook: one endpoint, answered in front of Flask, owning every request to its path.

Label Studio posts one webhook per annotation, inside the annotator's own request, and it is the
one route that sees a steady stream. Flask's per-request work (request context, URL matching, the
limiter, session and error-handler lookups) cost more than the webhook itself (about 0.8 of 2.2 ms
of CPU, measured), so this endpoint is a small WSGI handler of its own rather than a Flask route.
It owns every request to :data:`WEBHOOK_PATH`, odd ones included (another method, a chunked body, a
body over the limit, a body that is not JSON), so there is one implementation and nothing to keep
in step. Flask's ``before_request`` and ``after_request`` hooks do not run for it, by design: what
they would do is done here, in this order: the method, the body's size (refused before the secret
is looked at), the secret, the body (its request model,
:func:`dynaval.entrypoints.api.webhook_payload.read_webhook`), the use case
(:func:`dynaval.service_layer.validation.webhooks.ingest_webhook`). Every answer carries the API's security
headers and its errors are rendered by :func:`dynaval.entrypoints.errors.render_error`. The
webhook is never rate-limited: Label Studio sends it inside an annotator's request, and a refused
one is a vote read back only at the next reconcile.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.exceptions import MethodNotAllowed, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.sansio.utils import get_content_length
from werkzeug.wsgi import LimitedStream

from dynaval.adapters.label_studio import WEBHOOK_SECRET_HEADER
from dynaval.entrypoints.api.webhook_payload import LabelStudioWebhook, read_webhook
from dynaval.entrypoints.guards import parse_json
from dynaval.entrypoints.headers import DATA_HEADERS
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import webhooks

WEBHOOK_PATH = "/webhooks/label-studio"
WEBHOOK_OPERATION: dict[str, Any] = {
    "summary": "Label Studio webhook: a hint that an annotation was created, updated or deleted",
    "body": LabelStudioWebhook,
    "headers": {WEBHOOK_SECRET_HEADER: "The round webhook's shared secret"},
    "responses": {
        200: "Its tasks wait to be read back from Label Studio (tasks_to_verify), or ignored",
        401: "Wrong or missing secret",
        404: "Unknown project or task",
        405: "Not a POST",
        413: "Body larger than DYNAVAL_MAX_BODY_BYTES, or more than 5,000 deleted annotations",
        422: "Not a JSON object, or a field of the wrong type (the error names it)",
    },
}
"""What the OpenAPI document publishes of the endpoint (it is no Flask route)."""

_SECRET_ENVIRON_KEY = "HTTP_" + WEBHOOK_SECRET_HEADER.upper().replace("-", "_")

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
ErrorRenderer = Callable[[Exception], tuple[int, dict[str, Any], dict[str, str]]]


class LabelStudioWebhookEndpoint:
    """WSGI middleware: every request to :data:`WEBHOOK_PATH` is answered here; any other request
    goes to ``app`` unchanged."""

    def __init__(self, app: WSGIApp, services: Services, render_error: ErrorRenderer) -> None:
        self._app = app
        self._services = services
        self._render_error = render_error
        self._max_body_bytes = services.settings.max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != WEBHOOK_PATH:
            return self._app(environ, start_response)
        headers: dict[str, str] = {}
        try:
            status, body = 200, self._handle(environ)
        except Exception as error:  # rendered exactly as the Flask app renders its errors
            status, body, headers = self._render_error(error)
            if isinstance(error, MethodNotAllowed):
                headers["Allow"] = "POST"
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        start_response(
            f"{status} {HTTP_STATUS_CODES.get(status, 'Unknown').upper()}",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
                *DATA_HEADERS,
                *headers.items(),
            ],
        )
        return [data]

    def _handle(self, environ: dict[str, Any]) -> dict[str, Any]:
        if environ.get("REQUEST_METHOD") != "POST":
            raise MethodNotAllowed(valid_methods=["POST"])
        # Werkzeug's reading of the length, as Flask's: None for a chunked body or a malformed one.
        length = get_content_length(environ.get("CONTENT_LENGTH"), environ.get("HTTP_TRANSFER_ENCODING"))
        if length is not None and length > self._max_body_bytes:
            raise RequestEntityTooLarge()
        webhooks.check_webhook_secret(self._services, environ.get(_SECRET_ENVIRON_KEY))
        mimetype = str(environ.get("CONTENT_TYPE", "")).split(";", 1)[0].strip().lower()
        if mimetype != "application/json":
            read_webhook(None)  # refused (422 naming the body): not a JSON object
        # Lenient: whatever Label Studio's encoder writes (NaN included) is read; only ids are used.
        hint = read_webhook(parse_json(self._body(environ, length), strict=False))
        return webhooks.ingest_webhook(self._services, hint).to_dict()

    def _body(self, environ: dict[str, Any], length: int | None) -> bytes:
        if length is not None:
            # A body shorter than its Content-Length (the client went away) raises Werkzeug's
            # ClientDisconnected, a 400, as in Flask.
            return LimitedStream(environ["wsgi.input"], length).read() if length else b""
        # A chunked body. Only a server that ends the stream itself (``wsgi.input_terminated``, as
        # gunicorn) can be read past; read until it ends or passes the limit. Otherwise the body
        # is empty, as in Flask.
        if "wsgi.input_terminated" not in environ:
            return b""
        stream, parts, size = environ["wsgi.input"], [], 0
        while size <= self._max_body_bytes:
            part = stream.read(self._max_body_bytes + 1 - size)
            if not part:
                break
            parts.append(part)
            size += len(part)
        if size > self._max_body_bytes:
            raise RequestEntityTooLarge()
        return b"".join(parts)
