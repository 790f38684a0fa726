"""WSGI entry for gunicorn. No logic here: gunicorn calls ``application()`` once per worker."""

from flask import Flask

from dynaval.entrypoints.app import create_app


def application(start_background: bool | None = None) -> Flask:
    """``start_background=False``: no task-queue consumer in this process (gunicorn's master runs
    one of its own beside the workers, see gunicorn.conf.py)."""
    return create_app(start_background=start_background)
