"""gunicorn settings for the dynaval service: `gunicorn -c service/gunicorn.conf.py`.

Threads matter: the model's micro-batcher serves several waiting writers per forward pass, which
needs concurrent requests inside one worker. Environment overrides: DYNAVAL_BIND, DYNAVAL_WORKERS,
DYNAVAL_THREADS, DYNAVAL_ACCESS_LOG.
"""

import os

chdir = os.path.dirname(os.path.abspath(__file__))
wsgi_app = "wsgi:application()"
bind = os.environ.get("DYNAVAL_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("DYNAVAL_WORKERS", "1"))
worker_class = "gthread"
threads = int(os.environ.get("DYNAVAL_THREADS", "16"))
timeout = 120
graceful_timeout = 20
# gunicorn's access log: off by default, since formatting its line costs about a quarter of a
# webhook's CPU time; DYNAVAL_ACCESS_LOG=- writes one line per request to stdout (or give a file).
# Errors and the service's own warnings are logged either way.
accesslog = os.environ.get("DYNAVAL_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("DYNAVAL_LOG_LEVEL", "info")


def post_worker_init(worker: object) -> None:
    """Once the app is loaded: move every object so far (some 220,000: Flask, SQLAlchemy, the Label
    Studio client's classes) out of the garbage collector's sight. They live as long as the worker;
    a full collection would otherwise walk them all, a pause of up to 200 ms for every request in
    flight. (Loading a model does the same for torch and transformers: adapters/predictor.py.)"""
    import gc

    gc.collect()  # nothing that is already garbage is kept for good
    gc.freeze()
