"""The task queue's consumer as a process of its own beside gunicorn's workers, started by its master.

A webhook is answered at once and its task read back from Label Studio later, by the queue's
consumer. Run as threads inside the answering process, the read-back (Label Studio's reply parsed,
the votes applied, the candidates decided) took the same interpreter lock as the answers, and the
tail of the answering grew with it (docs/benchmarks.md, "Webhook ingest"). So under gunicorn the
consumer runs as one ``dynaval worker`` process that the master starts when it is ready, starts
again if it exits (after a pause that grows while it keeps failing), and stops when the master
stops (SIGTERM: the running tasks finish, as ``dynaval worker`` does). gunicorn's HTTP workers then
run no consumer (``service/wsgi.py`` asks the same question). The worker also ends if the
master is killed without stopping it (the kernel sends it SIGTERM).

Nothing is lost while it is down: webhooks are still answered, their tasks wait in the database
(and their queue entries in the queue), and the worker reads them when it is back; the minute's
sweep and the scheduled reconcile run in it too.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

WORKER_COMMAND = (sys.executable, "-m", "dynaval.entrypoints.cli", "worker")
RESTART_PAUSE_S = (1.0, 60.0)
"""The pause before starting the worker again: the first, doubled at each quick exit, at most."""
RAN_WELL_S = 60.0
"""A worker that ran this long before it exited is started again after the shortest pause."""
_PR_SET_PDEATHSIG = 1


def worker_process_wanted(environ: Mapping[str, str]) -> bool:
    """Whether gunicorn's master runs the consumer as a process of its own: unless the service runs
    no consumer (``DYNAVAL_EMBEDDED_WORKER=false``: ``dynaval worker`` runs elsewhere) or asks for
    threads inside each HTTP worker (``DYNAVAL_WORKER_PROCESS=false``)."""
    return _true(environ.get("DYNAVAL_EMBEDDED_WORKER", "true")) and _true(
        environ.get("DYNAVAL_WORKER_PROCESS", "true")
    )


def _true(value: str) -> bool:
    """As the settings read a boolean (pydantic): these words are false; empty is the default."""
    return value.strip().lower() not in {"0", "off", "f", "false", "n", "no"}


def _kill_with_parent() -> Callable[[], None] | None:
    """Linux: a function for the child, between fork and exec, that makes the kernel send it SIGTERM
    when the process that started it dies. Looked up here, before any fork: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return set_death_signal


def start_worker_process(server: Any) -> None:
    """gunicorn's ``when_ready`` and ``on_reload`` hooks (in the master): start the worker, once,
    where one is wanted; a reload starts a new one (its code and settings may have changed)."""
    stop_worker_process(server)
    if worker_process_wanted(os.environ):
        worker = WorkerProcess(stop_timeout_s=float(server.cfg.graceful_timeout), logger=server.log)
        server.dynaval_worker_process = worker
        worker.start()


def stop_worker_process(server: Any) -> None:
    """gunicorn's ``on_exit`` hook: stop the worker the master started, if any."""
    worker = getattr(server, "dynaval_worker_process", None)
    if worker is not None:
        server.dynaval_worker_process = None
        worker.stop()


class WorkerProcess:
    """One ``dynaval worker`` child, kept running by a thread of the process that starts it."""

    def __init__(
        self,
        command: Sequence[str] = WORKER_COMMAND,
        *,
        stop_timeout_s: float = 30.0,
        pauses_s: tuple[float, float] = RESTART_PAUSE_S,
        logger: Any = log,
    ) -> None:
        """``logger``: where its lines go (gunicorn's error log, in the master)."""
        self._log = logger
        self._command = list(command)
        self._stop_timeout_s = stop_timeout_s
        self._pauses_s = pauses_s
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._on_start = _kill_with_parent()

    @property
    def pid(self) -> int | None:
        with self._lock:
            process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._keep_running, name="dynaval-worker-process", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """SIGTERM the worker and wait for it (its running tasks finish), then SIGKILL."""
        self._stopping.set()
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._log.warning(
                    "dynaval worker (pid %s) did not stop in %.0f s: killed",
                    process.pid,
                    self._stop_timeout_s,
                )
                process.kill()
                process.wait()
        if self._thread is not None:
            self._thread.join(timeout=self._stop_timeout_s)

    def _keep_running(self) -> None:
        pause = self._pauses_s[0]
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                with self._lock:
                    if self._stopping.is_set():
                        return
                    # A process group of its own: a Ctrl-C meant for gunicorn's master reaches it only
                    # through the master (on_exit), not while the master still drains its workers.
                    self._process = subprocess.Popen(
                        self._command, stdin=subprocess.DEVNULL, preexec_fn=self._on_start, process_group=0
                    )
                    process = self._process
                self._log.info("dynaval worker started (pid %s): the task queue's consumer", process.pid)
                status = process.wait()
            except Exception as error:  # the supervision goes on, whatever failed
                self._log.error("dynaval worker could not start or be waited for: %r", error)
                status = None
            if self._stopping.is_set():
                return
            # gunicorn's master reaps any child it finds exited, so the status may be lost (0).
            pause = self._pauses_s[0] if time.monotonic() - began >= RAN_WELL_S else pause
            self._log.warning("dynaval worker exited (status %s); starting it again in %.0f s", status, pause)
            if self._stopping.wait(pause):
                return
            pause = min(pause * 2, self._pauses_s[1])
