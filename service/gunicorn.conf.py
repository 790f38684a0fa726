"""gunicorn settings for the dynaval service: `gunicorn -c service/gunicorn.conf.py`.

Threads matter: the model's micro-batcher serves several waiting writers per forward pass, which
needs concurrent requests inside one worker. Environment overrides: DYNAVAL_BIND, DYNAVAL_WORKERS,
DYNAVAL_THREADS, DYNAVAL_ACCESS_LOG, DYNAVAL_CONTROL_SOCKET, DYNAVAL_WORKER_PROCESS; the worker
takes DYNAVAL_RECEIVE_TIMEOUT_S and DYNAVAL_MAX_BODY_BYTES from the app's settings.
"""

import os
from typing import Any

from dynaval.entrypoints.serving import MAX_HEAD_BYTES
from dynaval.entrypoints.worker_process import (
    start_worker_process,
    stop_worker_process,
)

chdir = os.path.dirname(os.path.abspath(__file__))
# The task queue's consumer (it reads webhooks' tasks back from Label Studio, pushes, sweeps, runs
# jobs) runs as one `dynaval worker` process that the master starts beside the HTTP workers, so
# that the answering never waits on the reading back (dynaval.entrypoints.worker_process). The HTTP
# workers then run none. DYNAVAL_WORKER_PROCESS=false: threads inside each HTTP worker instead;
# DYNAVAL_EMBEDDED_WORKER=false: no consumer here at all (`dynaval worker` runs elsewhere).
wsgi_app = "wsgi:application()"
when_ready = start_worker_process
on_reload = start_worker_process
on_exit = stop_worker_process
bind = os.environ.get("DYNAVAL_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("DYNAVAL_WORKERS", "1"))
# gthread, receiving each request whole before a thread sees it, so that a slow client holds no
# thread (gunicorn's own gthread lets one hold a thread for as long as it trickles bytes).
worker_class = "dynaval.entrypoints.serving.BufferingThreadWorker"
threads = int(os.environ.get("DYNAVAL_THREADS", "16"))
timeout = 120
graceful_timeout = 20
# An idle keep-alive connection stays open this long (gunicorn's default: 2 s). A pooled client that
# reuses a connection just as the server closes it gets "connection reset", and the request is lost;
# so the server must outlast the idle timeout of the pools and proxies in front of it (httpx 5 s,
# aiohttp 15 s, nginx upstream and AWS ALB 60 s, Go 90 s), which then always close first. Clients
# without one (requests/urllib3) should retry what is safe to repeat. The cost: a socket per idle
# connection.
keepalive = 120
# The request head is bounded as a whole by the worker (64 KiB, 431): one header field may use it
# all (gunicorn's own default, 8,190 bytes, refused a single 9 KB header). gunicorn still bounds the
# request line (8,190 bytes, 414) and the number of header fields (100, 431).
limit_request_field_size = MAX_HEAD_BYTES
# gunicorn's access log: off by default, since formatting its line costs about a quarter of a
# webhook's CPU time; DYNAVAL_ACCESS_LOG=- writes one line per request to stdout (or give a file).
# Errors and the service's own warnings are logged either way.
accesslog = os.environ.get("DYNAVAL_ACCESS_LOG") or None
errorlog = "-"
# gunicorn's control socket (for `gunicornc`): off unless DYNAVAL_CONTROL_SOCKET names its path.
# gunicorn's default is one path per user ($HOME/.gunicorn/gunicorn.ctl), which a second service
# started by the same user would take over, so `gunicornc` would reach the wrong one.
control_socket_disable = not os.environ.get("DYNAVAL_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["DYNAVAL_CONTROL_SOCKET"]
loglevel = os.environ.get("DYNAVAL_LOG_LEVEL", "info")


def post_worker_init(worker: Any) -> None:
    """Once the app is loaded: the worker's receiving limits come from the app's settings; what the
    app loaded leaves the garbage collector's sight, and so does each model it loads later (a full
    collection walking them paused every request in flight)."""
    from dynaval.entrypoints.app import prepare_long_running_process

    settings = worker.wsgi.extensions["dynaval"].settings
    configure = getattr(worker, "configure", None)
    if configure is not None:  # not under `--worker-class gthread` (benchmarks/serving_worker.py)
        configure(receive_timeout_s=settings.receive_timeout_s, max_body_bytes=settings.max_body_bytes)
    prepare_long_running_process(worker.wsgi)
