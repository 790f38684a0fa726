"""The objects the use cases need, built once by :func:`dynaval.bootstrap.bootstrap`."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from dynaval import __version__
from dynaval.domain.health.band_keys import BandKeyIndex
from dynaval.domain.health.near_duplicates import NearDuplicateRule
from dynaval.domain.jobs.job import JobKind
from dynaval.domain.task_type import TaskType
from dynaval.service_layer.dataset_records.dataset_port import DatasetReads
from dynaval.service_layer.files import OfflineServices, ReleaseFiles
from dynaval.service_layer.health.ports import CorpusFiles, Encoder, ReleaseIndex, SemanticIndex
from dynaval.service_layer.images.ports import ImageCodec, ImageServices
from dynaval.service_layer.jobs.ports import JobWork
from dynaval.service_layer.predictions import Models
from dynaval.service_layer.unit_of_work import UnitOfWork
from dynaval.service_layer.validation.label_studio_port import LabelStudioGateway
from dynaval.service_layer.validation.writer_links import WriterAnnotatorLinks
from dynaval.settings import Settings


class WorkQueue(Protocol):
    """Background work the use cases ask for; the task queue (huey) runs it in a worker."""

    def push_soon(self, round_id: int) -> None:
        """Import the round's queued candidates into Label Studio."""

    def escalate_soon(self, round_id: int) -> None:
        """Raise the Label Studio overlap of the round's tasks whose decision wants more votes."""

    def verify_soon(self, round_id: int) -> None:
        """Read back from Label Studio the round's tasks that webhooks named."""

    def hint_soon(self, round_id: int, task_ids: Collection[int], at: datetime) -> bool:
        """Have a worker record that webhooks named these tasks at ``at`` (and then read them back):
        for a webhook that must not wait for the database. False when the queue cannot take it (the
        caller then records them itself)."""

    def run_job_soon(self, job_id: int) -> None:
        """Run the queued job (a worker takes it once, however often it is asked for)."""


class NoWorkQueue:
    """Asks for nothing: for commands that do their Label Studio work themselves (``dynaval sync``)."""

    def push_soon(self, round_id: int) -> None:
        pass

    def escalate_soon(self, round_id: int) -> None:
        pass

    def verify_soon(self, round_id: int) -> None:
        pass

    def hint_soon(self, round_id: int, task_ids: Collection[int], at: datetime) -> bool:
        return False  # no worker to take them: the caller records them

    def run_job_soon(self, job_id: int) -> None:
        pass  # a job stays queued until a service's worker (or ``dynaval worker``) sweeps


class TaskTypeCatalog(Protocol):
    """The task types, each read from its labelling config (``label_config/<task>.xml``)."""

    def names(self) -> list[str]: ...

    def get(self, name: str) -> TaskType:
        """The task type named ``name``; ``InvalidInput`` naming ``task`` for an unknown one."""


class Storage(Protocol):
    """The database as a whole, apart from its units of work: whether it answers, and closing it."""

    def ping(self) -> str:
        """``"ok"`` when the database answers (raises when it does not)."""

    def dispose(self) -> None: ...


class UnitOfWorkFactory(Protocol):
    def __call__(self, *, read_only: bool = False, wait_for_writers: bool = True) -> UnitOfWork:
        """A new unit of work: a write transaction, or a read-only one (a snapshot on SQLite that
        holds no write lock). ``wait_for_writers=False``: a write transaction that raises
        :class:`~dynaval.domain.errors.WritersBusy` at its start where it would wait for another
        writer (SQLite's one write lock) instead of waiting."""


@dataclass
class Services:
    settings: Settings
    catalog: TaskTypeCatalog
    label_studio: LabelStudioGateway
    models: Models
    uow: UnitOfWorkFactory
    """Storage, reached only through units of work (repositories inside)."""
    database: Storage | None = None
    """The database behind ``uow``, for what is not a use case: health checks, closing."""
    dataset_reads: DatasetReads | None = None
    """The round dataset's reads (the composition root sets them on the database)."""
    work: WorkQueue = field(default_factory=NoWorkQueue)
    task_queue: Any = None
    """The huey instance behind ``work`` (the composition root sets both), or None."""
    job_queue: Any = None
    """The queue of ``work``'s jobs, beside ``task_queue`` (the job lane), or None."""
    writer_links: WriterAnnotatorLinks | None = None
    """Writers' Label Studio users (the composition root sets it): their own votes never count."""
    band_keys: BandKeyIndex = field(default_factory=BandKeyIndex)
    """The lexical near-duplicate check's band keys held in memory (topped up from the database
    before each check)."""
    vectors: SemanticIndex | None = None
    """The semantic near-duplicate check's encoder and in-memory vectors (the composition root sets
    it when ``DYNAVAL_NEAR_DUPLICATE_SEMANTIC`` is on); ``None``: the lexical check alone."""
    offline: OfflineServices | None = None
    """Release files, corpora, the encoder and a release's index (the composition root sets them)."""
    image_services: ImageServices | None = None
    """The image codec, the image store and the near-copy fingerprints (the composition root sets
    them): what image task types need."""
    after_freeze: list[Callable[[int], None]] = field(default_factory=list)
    """What runs once a round is frozen, given its id (the composition root wires the regression
    room's: a revalidation round's decisions settle its cases). A hook, since the regression room
    makes rounds and so calls the validation room: the validation room must not call it back."""
    job_work: dict[JobKind, JobWork] = field(default_factory=dict)
    """What a job of each kind does (the composition root binds each kind's room's work)."""
    webhook_rounds: dict[int, int] = field(default_factory=dict)
    """Round ids by Label Studio project id, as the webhook path reads them (they never change)."""

    def _offline(self) -> OfflineServices:
        if self.offline is None:
            raise RuntimeError("these services have no files: build them with dynaval.bootstrap")
        return self.offline

    @property
    def images(self) -> ImageServices:
        if self.image_services is None:
            raise RuntimeError("these services have no image store: build them with dynaval.bootstrap")
        return self.image_services

    @property
    def release_files(self) -> ReleaseFiles:
        return self._offline().release_files

    @property
    def encoder(self) -> Callable[[], Encoder]:
        return self._offline().encoder

    @property
    def release_index(self) -> Callable[[NearDuplicateRule], ReleaseIndex]:
        return self._offline().release_index

    @property
    def corpus(self) -> CorpusFiles:
        return self._offline().corpus

    @property
    def image_codec(self) -> ImageCodec:
        return self._offline().image_codec

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
