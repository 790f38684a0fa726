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
    """Run a task-queue consumer in the foreground until Ctrl-C or SIGTERM (then tasks finish), with
    the job lane's consumer beside it in threads (``--job-workers``; 0: no job here)."""
    from dynaval.adapters.task_queue import consumer_options, start_embedded_consumer

    if args.workers is not None and args.workers < 1:
        raise CommandError("--workers must be at least 1")
    if args.job_workers is not None and args.job_workers < 0:
        raise CommandError("--job-workers must be 0 (this worker runs no job) or more")
    services = open_services()
    settings = services.settings
    args.workers = settings.queue_workers if args.workers is None else args.workers
    args.job_workers = settings.job_workers if args.job_workers is None else args.job_workers
    job_consumer = None
    try:
        if args.job_workers > 0:
            job_consumer = start_embedded_consumer(
                services.job_queue, workers=args.job_workers, periodic=False
            )
        consumer = services.task_queue.create_consumer(
            **consumer_options(workers=args.workers, periodic=not args.no_periodic)
        )
        consumer.run()
    finally:
        if job_consumer is not None:
            job_consumer.stop(graceful=True)
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
        help="run a task-queue consumer (pushes, escalations, sweep, reconcile, jobs) apart from the service",
    )
    worker.add_argument(
        "--workers", type=int, default=None, help="threads running tasks (default DYNAVAL_QUEUE_WORKERS, 2)"
    )
    worker.add_argument(
        "--job-workers",
        type=int,
        default=None,
        help="threads running jobs (training, releases, evaluation, the gate) apart from the tasks "
        "(default DYNAVAL_JOB_WORKERS, 1; 0: leave jobs to other workers)",
    )
    worker.add_argument(
        "--no-periodic", action="store_true", help="leave the minute's sweep to other consumers"
    )
    worker.set_defaults(run=cmd_worker)

    migrate = commands.add_parser("migrate", help="bring the database to the newest schema")
    migrate.set_defaults(run=cmd_migrate)
