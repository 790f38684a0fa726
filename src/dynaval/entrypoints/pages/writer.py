"""The writers' page: ``GET /write``, where a writer (or a lead) writes examples that fool a round's model.

The page is a static shell: the template holds no data, and needs no cookie, session or CSRF token.
Its script (``static/writer.js``) keeps the writer's token in the tab's ``sessionStorage`` only and
sends it as ``Authorization: Bearer`` to the JSON API, which checks it as it checks every call:
``GET /api/me`` (who the token is; a collector's or exporter's token is refused there),
``GET /api/rounds``, ``POST /api/rounds/<id>/predict``, ``POST /api/rounds/<id>/candidates`` and
``GET /api/rounds/<id>/my-candidates``. No credential reaches the page itself, so there is nothing
on it to protect and nothing a cross-site request could use. The page's Content-Security-Policy is
the dashboard's plus ``connect-src 'self'`` (see :mod:`dynaval.entrypoints.headers`).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, render_template

writer = Blueprint("writer", __name__, template_folder="templates")


def init_app(app: Flask) -> None:
    app.register_blueprint(writer)


@writer.get("/write")
def write() -> Any:
    return render_template("write.html")
