"""The jobs' storage: one row per job (the ``job`` table).

A repository of the SQL unit of work (:mod:`dynaval.adapters.db.unit_of_work`). A locked read reads
the row again (``populate_existing``): a job's row is written by its worker, its heartbeat and a
lead's cancel, and a lock is only worth what the read under it sees.
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from dynaval.adapters.db.identity_map import IdentityMap, utc
from dynaval.adapters.db.orm import JobRow, as_utc
from dynaval.domain.errors import NotFound, StorageConflict
from dynaval.domain.jobs.job import ACTIVE_STATES, Job, JobKind, JobProgress, JobState


def _job(row: JobRow) -> Job:
    return Job(
        id=row.id,
        kind=JobKind(row.kind),
        key=row.key,
        state=JobState(row.state),
        params=dict(row.params),
        attempts=row.attempts,
        progress=JobProgress.from_dict(row.progress),
        result=None if row.result is None else dict(row.result),
        error=row.error,
        cancel_requested=row.cancel_requested,
        log=tuple(row.log),
        created_by=row.created_by,
        created_at=as_utc(row.created_at),
        started_at=utc(row.started_at),
        heartbeat_at=utc(row.heartbeat_at),
        finished_at=utc(row.finished_at),
    )


class SqlJobRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._rows: IdentityMap[JobRow, Job] = IdentityMap(session, JobRow, _job, key=lambda r: r.id)

    def add(self, job: Job) -> Job:
        row = JobRow(kind=str(job.kind), key=job.key, state=str(job.state), params=job.params, log=[],
                     created_by=job.created_by, created_at=job.created_at)  # fmt: skip
        self._write(row, job)
        self._session.add(row)
        try:
            self._session.flush()
        except IntegrityError:  # another writer's active job took the key meanwhile
            raise StorageConflict(f"an active job with key {job.key!r} was stored meanwhile") from None
        self._rows.remember(row)
        return _job(row)

    def get(self, job_id: int, *, for_update: bool = False) -> Job:
        statement = select(JobRow).where(JobRow.id == job_id)
        if for_update:
            statement = statement.execution_options(populate_existing=True)
        job = self._rows.first(statement, for_update=for_update)
        if job is None:
            raise NotFound(f"no job {job_id}", field="job_id")
        return job

    def save(self, job: Job) -> None:
        self._write(self._rows.row(job.id), job)

    def latest(self, limit: int) -> list[Job]:
        rows = self._session.exec(select(JobRow).order_by(col(JobRow.id).desc()).limit(limit)).all()
        return self._rows.keep(rows)

    def active(self) -> list[Job]:
        states = [str(s) for s in ACTIVE_STATES]
        rows = self._session.exec(
            select(JobRow).where(col(JobRow.state).in_(states)).order_by(col(JobRow.id))
        ).all()
        return self._rows.keep(rows)

    def active_with_key(self, key: str) -> Job | None:
        states = [str(s) for s in ACTIVE_STATES]
        return self._rows.first(select(JobRow).where(JobRow.key == key, col(JobRow.state).in_(states)))

    def latest_with_key(self, key: str, limit: int) -> list[Job]:
        rows = self._session.exec(
            select(JobRow).where(JobRow.key == key).order_by(col(JobRow.id).desc()).limit(limit)
        ).all()
        return self._rows.keep(rows)

    @staticmethod
    def _write(row: JobRow, job: Job) -> None:
        row.state = str(job.state)
        row.attempts = job.attempts
        row.progress = None if job.progress is None else job.progress.stored()
        row.result = job.result
        row.error = job.error
        row.cancel_requested = job.cancel_requested
        row.log = list(job.log)
        row.started_at = job.started_at
        row.heartbeat_at = job.heartbeat_at
        row.finished_at = job.finished_at
