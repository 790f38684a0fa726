"""WSGI entry for gunicorn. No logic here: gunicorn calls ``application()`` once per worker."""

import os

from flask import Flask

from dynaval.entrypoints.app import create_app
from dynaval.entrypoints.worker_process import worker_process_wanted


def application() -> Flask:
    """No task-queue consumer in the HTTP worker where gunicorn's master runs one of its own beside
    the workers (gunicorn.conf.py). Decided here, in the worker, once gunicorn has applied its
    ``raw_env`` to the environment, as the master's ``when_ready`` decides."""
    return create_app(start_background=False if worker_process_wanted(os.environ) else None)
