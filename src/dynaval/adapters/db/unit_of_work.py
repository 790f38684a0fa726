"""The SQL unit of work: one session and transaction, its repositories, rolled back unless committed.

``SqlUnitOfWork(database)`` is a write transaction (on SQLite it starts with ``BEGIN IMMEDIATE``
behind the process's writer lock, see :mod:`dynaval.adapters.db.database`); ``read_only=True`` is a
plain read (on SQLite a snapshot that takes no write lock, so a long read never holds up a webhook;
nothing it writes is kept).

Before a write transaction commits, the unit of work writes the round-dataset records its changes
made stale (``keep_records``, from the composition root; see
:mod:`dynaval.service_layer.dataset_records.keeping`), in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from dynaval.adapters.db.annotators import SqlAnnotatorRepository
from dynaval.adapters.db.audit import SqlAuditRepository
from dynaval.adapters.db.candidates import SqlCandidateRepository
from dynaval.adapters.db.capture_repository import SqlCaptureRepository
from dynaval.adapters.db.dashboard_sessions import SqlDashboardSessions
from dynaval.adapters.db.database import NO_WAIT_OPTION, READ_ONLY_OPTION, Database
from dynaval.adapters.db.dataset_query import statements_for
from dynaval.adapters.db.dataset_records import SqlRecordStore, dialect_of
from dynaval.adapters.db.gold import SqlGoldRepository
from dynaval.adapters.db.jobs import SqlJobRepository
from dynaval.adapters.db.queries import SqlDashboardQueries, SqlRoundQueries
from dynaval.adapters.db.retraining_policies import SqlRetrainingPolicyRepository
from dynaval.adapters.db.rounds import SqlRoundRepository
from dynaval.adapters.db.task_checks import SqlTaskChecks
from dynaval.adapters.db.vote_store import SqlVoteStore
from dynaval.adapters.health.near_duplicate_index import SqlNearDuplicateIndex
from dynaval.adapters.regression.repository import SqlRegressionRepository
from dynaval.adapters.regression.revalidation_repository import SqlRevalidationRepository
from dynaval.adapters.releases.repository import SqlReleaseRepository
from dynaval.domain.errors import StorageConflict
from dynaval.service_layer.dataset_records.dataset_port import RecordStore
from dynaval.service_layer.services import UnitOfWorkFactory
from dynaval.service_layer.unit_of_work import UnitOfWork


class SqlUnitOfWork:
    session: Session
    rounds: SqlRoundRepository
    candidates: SqlCandidateRepository
    gold: SqlGoldRepository
    annotators: SqlAnnotatorRepository
    audit: SqlAuditRepository
    votes: SqlVoteStore
    task_checks: SqlTaskChecks
    round_queries: SqlRoundQueries
    dashboard: SqlDashboardQueries
    dashboard_sessions: SqlDashboardSessions
    releases: SqlReleaseRepository
    captures: SqlCaptureRepository
    regression: SqlRegressionRepository
    revalidations: SqlRevalidationRepository
    near_duplicates: SqlNearDuplicateIndex
    jobs: SqlJobRepository
    retraining: SqlRetrainingPolicyRepository

    def __init__(
        self,
        database: Database,
        *,
        read_only: bool = False,
        wait_for_writers: bool = True,
        keep_records: Callable[[RecordStore], object] | None = None,
    ) -> None:
        self._database = database
        self._read_only = read_only
        self._wait_for_writers = wait_for_writers
        self._keep_records = keep_records

    def __enter__(self) -> Self:
        self.session = Session(self._database.engine, expire_on_commit=False)
        try:
            if self._read_only:
                self.session.connection(execution_options={READ_ONLY_OPTION: True})
            elif not self._wait_for_writers:
                self.session.connection(execution_options={NO_WAIT_OPTION: True})
        except BaseException:  # WritersBusy: the block never runs, so __exit__ would not close it
            self.session.close()
            raise
        self.rounds = SqlRoundRepository(self.session)
        self.candidates = SqlCandidateRepository(self.session)
        self.gold = SqlGoldRepository(self.session)
        self.annotators = SqlAnnotatorRepository(self.session)
        self.audit = SqlAuditRepository(self.session)
        self.votes = SqlVoteStore(self.session)
        self.task_checks = SqlTaskChecks(self.session)
        self.round_queries = SqlRoundQueries(self.session)
        self.dashboard = SqlDashboardQueries(self.session)
        self.dashboard_sessions = SqlDashboardSessions(self.session)
        self.releases = SqlReleaseRepository(self.session)
        self.captures = SqlCaptureRepository(self.session)
        self.regression = SqlRegressionRepository(self.session)
        self.revalidations = SqlRevalidationRepository(self.session)
        self.near_duplicates = SqlNearDuplicateIndex(self.session)
        self.jobs = SqlJobRepository(self.session)
        self.retraining = SqlRetrainingPolicyRepository(self.session)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        # close() rolls back whatever was not committed; unlike rollback() it leaves the objects
        # the session loaded readable.
        self.session.close()

    def commit(self) -> None:
        with _storage_conflicts():
            if self._keep_records is not None and not self._read_only:
                self.session.flush()
                # A unit of work that never touched the database began no transaction: it wrote
                # nothing, and needs no write lock now.
                if self.session.in_transaction():
                    connection = self.session.connection()
                    self._keep_records(SqlRecordStore(connection, statements_for(dialect_of(connection))))
            self.session.commit()

    def flush(self) -> None:
        """Send the pending writes inside the transaction (later reads of it see them)."""
        with _storage_conflicts():
            self.session.flush()


@contextmanager
def _storage_conflicts() -> Iterator[None]:
    """A unique key another writer took meanwhile, as the domain's :class:`StorageConflict`."""
    try:
        yield
    except IntegrityError as error:
        raise StorageConflict(
            "what was written conflicts with what was stored meanwhile; try again"
        ) from error


def sql_units_of_work(
    database: Database, *, keep_records: Callable[[RecordStore], object] | None = None
) -> UnitOfWorkFactory:
    """The factory the use cases open units of work with (``services.uow()``); ``keep_records``
    writes the round-dataset records a transaction made stale, before it commits."""

    def open_unit(*, read_only: bool = False, wait_for_writers: bool = True) -> UnitOfWork:
        return SqlUnitOfWork(
            database, read_only=read_only, wait_for_writers=wait_for_writers, keep_records=keep_records
        )

    return open_unit
