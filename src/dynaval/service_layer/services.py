"""The objects the use cases need, built once by :func:`dynaval.bootstrap.bootstrap`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dynaval import __version__
from dynaval.adapters.band_key_index import BandKeyIndex
from dynaval.adapters.database import Database
from dynaval.adapters.label_config import LabelConfigCatalog
from dynaval.adapters.label_studio import LabelStudioGateway
from dynaval.adapters.predictor import MicroBatcher, Predictor
from dynaval.adapters.semantic_index import SemanticVectors
from dynaval.service_layer.unit_of_work import UnitOfWork
from dynaval.service_layer.writer_links import WriterAnnotatorLinks
from dynaval.settings import Settings

PredictorFactory = Callable[[Path], Predictor]


class WorkQueue(Protocol):
    """Background work the use cases ask for; the task queue (huey) runs it in a worker."""

    def push_soon(self, round_id: int) -> None:
        """Import the round's queued candidates into Label Studio."""

    def escalate_soon(self, round_id: int) -> None:
        """Raise the Label Studio overlap of the round's tasks whose decision wants more votes."""

    def verify_soon(self, round_id: int) -> None:
        """Read back from Label Studio the round's tasks that webhooks named."""


class NoWorkQueue:
    """Asks for nothing: for commands that do their Label Studio work themselves (``dynaval sync``)."""

    def push_soon(self, round_id: int) -> None:
        pass

    def escalate_soon(self, round_id: int) -> None:
        pass

    def verify_soon(self, round_id: int) -> None:
        pass


@dataclass
class ModelRegistry:
    """Loaded models by folder and content hash, each behind its own micro-batcher."""

    factory: PredictorFactory
    max_batch: int = 32
    max_wait_s: float = 0.005
    after_load: Callable[[], None] | None = None
    """Called once a new model is loaded (the service freezes long-lived objects there)."""
    _batchers: dict[Path, MicroBatcher] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, folder: Path) -> MicroBatcher:
        key = folder.resolve()
        with self._lock:
            batcher = self._batchers.get(key)
            if batcher is None:
                batcher = MicroBatcher(
                    self.factory(key), max_batch=self.max_batch, max_wait_s=self.max_wait_s
                )
                self._batchers[key] = batcher
                if self.after_load is not None:
                    self.after_load()
            return batcher

    def get_path(self, folder: str | Path) -> MicroBatcher:
        return self.get(Path(folder))

    def close(self) -> None:
        with self._lock:
            for batcher in self._batchers.values():
                batcher.close()
            self._batchers.clear()


class UnitOfWorkFactory(Protocol):
    def __call__(self, *, read_only: bool = False) -> UnitOfWork:
        """A new unit of work: a write transaction, or a read-only one (a snapshot on SQLite that
        holds no write lock)."""


@dataclass
class Services:
    settings: Settings
    catalog: LabelConfigCatalog
    label_studio: LabelStudioGateway
    models: ModelRegistry
    uow: UnitOfWorkFactory
    """Storage, reached only through units of work (repositories inside)."""
    database: Database | None = None
    """The database behind ``uow``, for what is not a use case: health checks, migrations, closing."""
    work: WorkQueue = field(default_factory=NoWorkQueue)
    task_queue: Any = None
    """The huey instance behind ``work`` (the composition root sets both), or None."""
    writer_links: WriterAnnotatorLinks | None = None
    """Writers' Label Studio users (the composition root sets it): their own votes never count."""
    band_keys: BandKeyIndex = field(default_factory=BandKeyIndex)
    """The lexical near-duplicate check's band keys held in memory (topped up from the database
    before each check)."""
    vectors: SemanticVectors | None = None
    """The semantic near-duplicate check's encoder and in-memory vectors (the composition root sets
    it when ``DYNAVAL_NEAR_DUPLICATE_SEMANTIC`` is on); ``None``: the lexical check alone."""
    webhook_rounds: dict[int, int] = field(default_factory=dict)
    """Round ids by Label Studio project id, as the webhook path reads them (they never change)."""

    def writer_annotators(self) -> dict[str, str]:
        """Writers' Label Studio user ids by writer name, as known now."""
        return self.writer_links.current() if self.writer_links is not None else {}

    def health(self) -> dict[str, object]:
        """What ``GET /health`` reports: the service answers and its database does."""
        database = self.database.ping() if self.database is not None else "not configured"
        return {"status": "ok", "database": database, "version": __version__}

    def close(self) -> None:
        self.models.close()
        if self.vectors is not None:
            self.vectors.close()
        if self.database is not None:
            self.database.dispose()
