"""Label Studio's webhook, served in front of Flask.

Label Studio posts one webhook per annotation, inside the annotator's own request, and it is the
one route that sees a steady stream. Flask's per-request work (request context, URL matching, the
limiter, session and error-handler lookups) costs about as much as applying the vote, so an
ordinary webhook is answered here, before Flask: the same secret check, the same request model
(:func:`dynaval.entrypoints.schemas.read_webhook`), the same use case
(:func:`dynaval.service_layer.webhooks.ingest_webhook`), the same error bodies.

Anything out of the ordinary (another method, a query string, no ``Content-Length``, a body over
the limit, a body that is not declared JSON) goes on to the Flask route, which handles every odd
case, so both paths answer the same request the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.sansio.utils import get_content_length
from werkzeug.wsgi import LimitedStream

from dynaval.adapters.label_studio import WEBHOOK_SECRET_HEADER
from dynaval.entrypoints.guards import parse_json
from dynaval.entrypoints.schemas import read_webhook
from dynaval.service_layer import webhooks
from dynaval.service_layer.services import Services

WEBHOOK_PATH = "/webhooks/label-studio"
_SECRET_ENVIRON_KEY = "HTTP_" + WEBHOOK_SECRET_HEADER.upper().replace("-", "_")

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
ErrorRenderer = Callable[[Exception], tuple[int, dict[str, Any], dict[str, str]]]


class WebhookFastPath:
    """WSGI middleware: ``POST /webhooks/label-studio`` with a declared JSON body of known length is
    answered here; every other request goes to ``app`` unchanged."""

    def __init__(self, app: WSGIApp, services: Services, render_error: ErrorRenderer) -> None:
        self._app = app
        self._services = services
        self._render_error = render_error
        self._max_body_bytes = services.settings.max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = self._ordinary_length(environ)
        if length is None:
            return self._app(environ, start_response)
        headers: dict[str, str] = {}
        try:
            status, body = 200, self._handle(environ, length)
        except Exception as error:  # rendered exactly as the Flask error handlers render it
            status, body, headers = self._render_error(error)
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        start_response(
            f"{status} {HTTP_STATUS_CODES.get(status, 'Unknown').upper()}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *headers.items()],
        )
        return [data]

    def _ordinary_length(self, environ: dict[str, Any]) -> int | None:
        """The body's length when this request is an ordinary webhook, else None (Flask serves it)."""
        if environ.get("PATH_INFO") != WEBHOOK_PATH or environ.get("REQUEST_METHOD") != "POST":
            return None
        if environ.get("QUERY_STRING"):
            return None
        mimetype = str(environ.get("CONTENT_TYPE", "")).split(";", 1)[0].strip().lower()
        if mimetype != "application/json":
            return None
        # Werkzeug's reading of the length, as Flask's: None for a chunked body or a malformed one.
        length = get_content_length(environ.get("CONTENT_LENGTH"), environ.get("HTTP_TRANSFER_ENCODING"))
        return length if length is not None and length <= self._max_body_bytes else None

    def _handle(self, environ: dict[str, Any], length: int) -> dict[str, Any]:
        webhooks.check_webhook_secret(self._services, environ.get(_SECRET_ENVIRON_KEY))
        # As Flask reads it: a body shorter than its Content-Length (the client went away) raises
        # Werkzeug's ClientDisconnected, a 400.
        data = LimitedStream(environ["wsgi.input"], length).read() if length else b""
        hint = read_webhook(parse_json(data, strict=False))
        return webhooks.ingest_webhook(self._services, hint).to_dict()
