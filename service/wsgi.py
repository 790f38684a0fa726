"""WSGI entry for gunicorn. No logic here: gunicorn calls ``application()`` once per worker."""

from flask import Flask

from dynaval.entrypoints.app import create_app


def application() -> Flask:
    return create_app()
