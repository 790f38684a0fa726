"""Security headers on every answer the Flask app gives.

The dashboard's pages get a Content-Security-Policy that lets them load scripts, styles and images
from the service alone: no inline script, no inline style (the templates use classes; the
heatmap's colours are classes too), no ``eval``. The charts' data sit in
``<script type="application/json">`` blocks, which the browser never executes, so the policy does
not apply to them. No page may be framed (clickjacking of the override and exclusion forms), none
is stored by a cache or the browser (they show data, and forms with CSRF tokens), and no link
sends the page's address to another origin (Label Studio gets no candidate ids or searches).

The writers' page (``/write``) gets the same policy with ``connect-src 'self'`` added: its script
calls the JSON API of this origin with the writer's token.

Anything else (the JSON API, downloads) gets a policy that allows nothing at all, the same framing,
sniffing and referrer rules, and ``no-store`` too. The dashboard's static files (scripts, styles,
the icon) hold no data and keep Flask's own caching.
"""

from __future__ import annotations

from flask import Flask, Response, request

PAGE_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
WRITER_PAGE_POLICY = PAGE_POLICY + "; connect-src 'self'"
"""The writers' page: the dashboard pages' policy, and its script may call this origin's JSON API
(``fetch``) and nowhere else."""
FETCHING_PAGES = frozenset({"writer.write"})
DATA_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
STATIC_ENDPOINTS = frozenset({"dashboard.static"})
IMAGE_ENDPOINTS = frozenset({"images.signed_image"})

COMMON = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on the
    # dashboard's own form posts.
    "Referrer-Policy": "same-origin",
}
DATA_HEADERS: tuple[tuple[str, str], ...] = (
    *COMMON.items(),
    ("Content-Security-Policy", DATA_POLICY),
    ("Cache-Control", "no-store"),
)
"""The security headers of a JSON answer given outside Flask: Label Studio's webhook, and the
answers the serving worker gives itself (408, 431, and gunicorn's own 400, 414...)."""


def init_app(app: Flask) -> None:
    app.after_request(add_security_headers)


def add_security_headers(response: Response) -> Response:
    for name, value in COMMON.items():
        response.headers[name] = value
    if response.mimetype != "text/html":
        policy = DATA_POLICY
    elif request.endpoint in FETCHING_PAGES:
        policy = WRITER_PAGE_POLICY
    else:
        policy = PAGE_POLICY
    response.headers["Content-Security-Policy"] = policy
    if request.endpoint in IMAGE_ENDPOINTS and response.status_code == 200:
        # An image never changes under its hash; its link may expire, so no shared cache keeps it.
        response.headers["Cache-Control"] = "private, max-age=3600, immutable"
    elif request.endpoint not in STATIC_ENDPOINTS:
        response.headers["Cache-Control"] = "no-store"
    return response
