"""``dynaval serve``, ``dynaval worker`` and ``dynaval migrate``: running the service and its
task queue, and bringing the database to the newest schema."""

from __future__ import annotations

import argparse
from typing import Any

from dynaval.entrypoints.cli.common import CommandError, open_services


def cmd_serve(args: argparse.Namespace) -> int:
    from werkzeug.serving import run_simple

    from dynaval.entrypoints.app import create_app, shutdown

    app = create_app(open_services())
    try:
        run_simple(args.host, args.port, app, threaded=True, use_reloader=False)
    finally:
        shutdown(app)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a task-queue consumer in the foreground until Ctrl-C or SIGTERM (then tasks finish)."""
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    services = open_services()
    try:
        consumer = services.task_queue.create_consumer(
            workers=args.workers, worker_type="thread", periodic=not args.no_periodic
        )
        consumer.run()
    finally:
        services.close()
    return 0


def cmd_migrate(_args: argparse.Namespace) -> int:
    services = open_services()
    services.close()
    print("database is at the newest schema")
    return 0


def add_service_commands(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="run the HTTP service (development server; use gunicorn in production)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=cmd_serve)

    worker = commands.add_parser(
        "worker",
        help="run a task-queue consumer (pushes, escalations, sweep, reconcile) apart from the service",
    )
    worker.add_argument("--workers", type=int, default=2, help="threads running tasks (default 2)")
    worker.add_argument(
        "--no-periodic", action="store_true", help="leave the minute's sweep to other consumers"
    )
    worker.set_defaults(run=cmd_worker)

    migrate = commands.add_parser("migrate", help="bring the database to the newest schema")
    migrate.set_defaults(run=cmd_migrate)
