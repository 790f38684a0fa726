"""gunicorn settings for the dynaval service: `gunicorn -c service/gunicorn.conf.py`.

Threads matter: the model's micro-batcher serves several waiting writers per forward pass, which
needs concurrent requests inside one worker. Environment overrides: DYNAVAL_BIND, DYNAVAL_WORKERS,
DYNAVAL_THREADS.
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
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("DYNAVAL_LOG_LEVEL", "info")
