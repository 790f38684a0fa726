"""The Flask application factory. Nothing is built at import: gunicorn calls ``create_app()``."""

from __future__ import annotations

import functools
import gc
from typing import Any

from flask import Flask, jsonify
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from dynaval.adapters.task_queue import EmbeddedConsumer, start_embedded_consumer
from dynaval.domain.errors import DomainError
from dynaval.entrypoints.api.openapi import build_openapi
from dynaval.entrypoints.errors import render_error
from dynaval.entrypoints.webhook import WEBHOOK_PATH, LabelStudioWebhookEndpoint
from dynaval.service_layer.services import Services
from dynaval.settings import Settings


def freeze_long_lived_objects() -> None:
    """Take every object alive now out of the garbage collector's sight, garbage collected first."""
    gc.collect()
    gc.freeze()


def prepare_long_running_process(app: Flask) -> None:
    """For a process that serves ``app`` for long (each gunicorn worker, once the app is loaded).

    What it loaded (Flask, SQLAlchemy, the Label Studio client; with a model, torch and
    transformers: some 560,000 objects in all) lives as long as the process, and a full garbage
    collection walking them paused every request in flight for up to 200 ms. They are frozen now,
    and again after each model the process loads.
    """
    services: Services = app.extensions["dynaval"]
    services.models.after_load = freeze_long_lived_objects
    freeze_long_lived_objects()


def create_app(
    services: Services | None = None,
    *,
    settings: Settings | None = None,
    start_background: bool | None = None,
) -> Flask:
    """Build the app around ``services`` (built from settings by the composition root when absent).

    A task-queue consumer (pushes to Label Studio, escalations, the sweep, scheduled reconcile; see
    :mod:`dynaval.adapters.task_queue`) starts in the process when ``start_background`` is true, or
    by default when ``DYNAVAL_EMBEDDED_WORKER`` says so.
    """
    if services is None:
        from dynaval.bootstrap import bootstrap

        services = bootstrap(settings)
    app = Flask("dynaval", static_folder=None)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["dynaval"] = services

    from dynaval.entrypoints import guards, headers
    from dynaval.entrypoints.api.image_routes import images
    from dynaval.entrypoints.api.job_routes import jobs
    from dynaval.entrypoints.api.retraining_routes import retraining
    from dynaval.entrypoints.api.routes import api
    from dynaval.entrypoints.pages import dashboard as pages
    from dynaval.entrypoints.pages import writer as writer_page

    # Every <int:...> in a path (the API's and the dashboard's) reads ASCII digits only; set before
    # any route is registered, since a rule takes its converter when it is added.
    app.url_map.converters["int"] = guards.AsciiIntegerConverter
    app.register_blueprint(api)
    app.register_blueprint(images)
    app.register_blueprint(jobs)
    app.register_blueprint(retraining)
    pages.init_app(app)
    writer_page.init_app(app)
    guards.init_app(app)
    headers.init_app(app)

    @app.get("/openapi.json")
    def openapi() -> Any:
        return jsonify(build_openapi(app))

    max_body_bytes = services.settings.max_body_bytes
    says = guards.body_limit_says(max_body_bytes, services.settings.max_image_bytes)

    def render(error: Exception) -> Any:
        status, body, headers = render_error(error, max_body_bytes=max_body_bytes, body_limit_says=says)
        return jsonify(body), status, headers

    for kind in (DomainError, OperationalError, HTTPException, Exception):
        app.register_error_handler(kind, render)
    # Label Studio's webhook is an endpoint of its own in front of Flask (dynaval.entrypoints.webhook).
    app.wsgi_app = LabelStudioWebhookEndpoint(  # type: ignore[method-assign]
        app.wsgi_app,
        services,
        functools.partial(render_error, max_body_bytes=max_body_bytes, body_limit_says=says),
    )
    if services.settings.trusted_proxies:
        # The client's address as the trusted proxies forwarded it (Werkzeug's ProxyFix reads that
        # many hops of X-Forwarded-For from the right); nothing else of their headers is believed.
        hops = services.settings.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=0, x_host=0, x_port=0, x_prefix=0)  # type: ignore[method-assign]

    run_background = start_background if start_background is not None else services.settings.embedded_worker
    if run_background:
        app.extensions["dynaval_worker"] = start_embedded_consumer(
            services.task_queue, workers=services.settings.queue_workers
        )
        if services.settings.job_workers > 0:
            app.extensions["dynaval_job_worker"] = start_embedded_consumer(
                services.job_queue, workers=services.settings.job_workers, periodic=False
            )
    return app


def served_routes(app: Flask) -> list[tuple[str, str]]:
    """Every (method, rule) the app answers: Flask's routes and the webhook endpoint in front of them."""
    routes = [
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
    ]
    return [*routes, ("POST", WEBHOOK_PATH)]


def shutdown(app: Flask) -> None:
    """Stop the task-queue consumer (running tasks finish) and release the app's services."""
    for name in ("dynaval_worker", "dynaval_job_worker"):
        consumer: EmbeddedConsumer | None = app.extensions.get(name)
        if consumer is not None:
            consumer.stop(graceful=True)
    services: Services = app.extensions["dynaval"]
    services.close()
