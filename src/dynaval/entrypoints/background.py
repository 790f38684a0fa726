"""The in-process background worker: score leftovers, push queued candidates, escalate, reconcile.

Several processes may run one each: the push lease and row locks in the database keep them from
doing the same work twice.
"""

from __future__ import annotations

import logging
import threading
import time

from dynaval.domain.errors import DomainError
from dynaval.service_layer.pushing import background_pass
from dynaval.service_layer.services import Services
from dynaval.service_layer.votes import reconcile_live_rounds

log = logging.getLogger(__name__)


class BackgroundWorker:
    def __init__(self, services: Services) -> None:
        self._services = services
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dynaval-background", daemon=True)
        self._last_reconcile = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        settings = self._services.settings
        while not self._stop.wait(settings.background_interval_s):
            try:
                background_pass(self._services)
                due = settings.reconcile_interval_s > 0 and (
                    time.monotonic() - self._last_reconcile >= settings.reconcile_interval_s
                )
                if due:
                    reconcile_live_rounds(self._services)
                    self._last_reconcile = time.monotonic()
            except DomainError as exc:
                log.warning("background pass postponed: %s", exc.message)
            except Exception:  # the worker must outlive any one failure
                log.exception("background pass failed")
