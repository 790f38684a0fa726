"""The task queue adapter: huey, with SQLite storage on one machine and Redis across several.

``DYNAVAL_QUEUE_URL`` picks the storage: empty (the default) is a SQLite file in the data folder,
shared by every process on the machine; ``redis://host:port/db`` is Redis, shared by every machine.
The tasks themselves are registered by :mod:`dynaval.entrypoints.worker`; this module only builds
the queue and runs a consumer inside a service process.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from huey import Huey, RedisHuey, SqliteHuey
from huey.consumer import Consumer

log = logging.getLogger(__name__)


def make_huey(queue_url: str, data_dir: Path, name: str = "dynaval") -> Huey:
    """The queue for ``queue_url`` (see the module docstring). Task results are not kept."""
    if not queue_url:
        data_dir.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(name=name, filename=str(data_dir / "queue.sqlite3"), results=False)
    if queue_url.startswith(("redis://", "rediss://", "unix://")):
        return RedisHuey(name=name, url=queue_url, results=False)
    raise ValueError(f"DYNAVAL_QUEUE_URL must be empty (SQLite) or a redis:// URL, not {queue_url!r}")


def describe(huey: Huey) -> str:
    """The queue's storage as the logs and ``/health`` name it (no credentials)."""
    return "redis" if isinstance(huey, RedisHuey) else "sqlite"


class EmbeddedConsumer(Consumer):  # type: ignore[misc]
    """A huey consumer running in threads inside a service process (gunicorn worker, dev server).

    Unlike ``huey_consumer`` it leaves the process's signal handlers alone: they belong to the
    server that hosts it. ``stop()`` lets running tasks finish (up to the shutdown timeout).
    """

    def _set_signal_handlers(self) -> None:
        pass


def start_embedded_consumer(
    huey: Huey, *, workers: int, periodic: bool = True, **options: Any
) -> EmbeddedConsumer:
    """A consumer in ``workers`` threads of this process; ``periodic`` runs the minute's sweep too
    (huey runs it at once when the consumer starts, then every minute)."""
    consumer = EmbeddedConsumer(
        huey,
        workers=workers,
        worker_type="thread",
        periodic=periodic,
        initial_delay=0.05,
        backoff=1.5,
        max_delay=0.5,  # an idle SQLite queue is polled at most twice a second per worker
        check_worker_health=False,
        shutdown_timeout=10.0,
        **options,
    )
    consumer.start()
    log.info("task queue consumer started (%s storage, %d threads)", describe(huey), workers)
    return consumer
