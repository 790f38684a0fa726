"""Jobs' use cases: submit one, read them, cancel one, run one on a worker, and find the ones a
stopped worker left (see :mod:`dynaval.domain.jobs.job` for the lifecycle).

What a job of each kind does is its room's affair: the composition root hands each kind's work in
(``services.job_work``), a function of the job and a :class:`JobReporter`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, DomainError, NotFound, StorageConflict
from dynaval.domain.jobs.job import Job, JobKind, JobProgress, JobState
from dynaval.service_layer.jobs.ports import JobCancelled
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

log = logging.getLogger(__name__)

MAX_LISTED = 200
PROGRESS_EVERY_S = 1.0
"""A running job's progress is written at most once a second (and at every new step)."""


class DatabaseReporter:
    """The :class:`JobReporter` of a job run here: its progress and log go to the job's row (at
    most once a second), and a cancel noticed there raises :class:`JobCancelled` in the work."""

    def __init__(self, services: Services, job: Job, cancelled: threading.Event) -> None:
        self._services = services
        self.job = job
        self._cancelled = cancelled
        self._progress = JobProgress("starting")
        self._written_at = 0.0

    def step(self, name: str, total: int | None = None) -> None:
        """A new step begins (``total``: how many units it counts, when known)."""
        now = utcnow()
        self._progress = JobProgress(name, 0, total, step_started_at=now, updated_at=now)
        self._write(force=True)

    def advance(self, done: int, total: int | None = None) -> None:
        """``done`` units of the current step are done (out of ``total``, when it changed)."""
        self._progress = JobProgress(
            self._progress.step,
            done,
            self._progress.total if total is None else total,
            step_started_at=self._progress.step_started_at,
            updated_at=utcnow(),
        )
        self._write(force=False)

    def say(self, line: str) -> None:
        log.info("job %s: %s", self.job.id, line)
        self._check_cancelled()
        with self._services.uow() as uow:
            uow.jobs.save(uow.jobs.get(self._id, for_update=True).say(line))
            uow.commit()

    @property
    def _id(self) -> int:
        assert self.job.id is not None
        return self.job.id

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise JobCancelled()

    def _write(self, *, force: bool) -> None:
        self._check_cancelled()
        now = time.monotonic()
        if not force and now - self._written_at < PROGRESS_EVERY_S:
            return
        self._written_at = now
        with self._services.uow() as uow:
            job = uow.jobs.get(self._id, for_update=True)
            # Asked to stop, or no longer this worker's (the sweep took it for stopped): stop.
            if job.cancel_requested or job.state is not JobState.RUNNING:
                self._cancelled.set()
            else:
                uow.jobs.save(job.report(self._progress, utcnow()))
                uow.commit()
        self._check_cancelled()


def submit_job(
    services: Services, *, kind: JobKind, key: str, params: dict[str, Any], by: str, field: str = "name"
) -> Job:
    """Store a queued job and ask a worker for it; 409 naming ``field`` (what the key is made of)
    while another active job has its key."""
    with services.uow() as uow:
        job = add_job(uow, kind=kind, key=key, params=params, by=by, field=field)
        try:
            uow.commit()
        except StorageConflict:  # another request took the key meanwhile
            raise _just_submitted(kind, key, field) from None
    return queued(services, job)


def add_job(
    uow: UnitOfWork, *, kind: JobKind, key: str, params: dict[str, Any], by: str, field: str = "name"
) -> Job:
    """A queued job stored in a unit of work the caller commits (with what else it changes), then
    hands to :func:`queued`; 409 naming ``field`` while another active job has its key."""
    busy = uow.jobs.active_with_key(key)
    if busy is not None:
        raise _busy(busy, field)
    try:
        return uow.jobs.add(Job(kind=kind, key=key, params=params, created_by=by, created_at=utcnow()))
    except StorageConflict:  # another request took the key meanwhile
        raise _just_submitted(kind, key, field) from None


def queued(services: Services, job: Job) -> Job:
    """Ask a worker for a job stored and committed by :func:`add_job`."""
    assert job.id is not None
    log.info("job %s (%s, %s) submitted by %s", job.id, job.kind, job.key, job.created_by)
    services.work.run_job_soon(job.id)
    return job


def _just_submitted(kind: JobKind, key: str, field: str) -> Conflict:
    return Conflict(f"another {kind} job for {key.partition(':')[2]!r} was just submitted", field=field)


def _busy(job: Job, field: str) -> Conflict:
    return Conflict(
        f"job {job.id} ({job.kind} {job.key.partition(':')[2]!r}) is {job.state}: wait for it or cancel it",
        field=field,
    )


def get_job(services: Services, job_id: int) -> Job:
    with services.uow(read_only=True) as uow:
        return uow.jobs.get(job_id)


def list_jobs(services: Services, limit: int = 50) -> list[Job]:
    with services.uow(read_only=True) as uow:
        return uow.jobs.latest(max(1, min(limit, MAX_LISTED)))


def cancel_job(services: Services, job_id: int, *, by: str) -> Job:
    """A queued job is cancelled at once; a running one stops at its next report (409: finished)."""
    with services.uow() as uow:
        job = uow.jobs.get(job_id, for_update=True).cancel(utcnow())
        uow.jobs.save(job)
        uow.commit()
    log.warning("job %s (%s) cancelled by %s (%s)", job.id, job.key, by, job.state)
    return job


def run_job(services: Services, job_id: int) -> Job | None:
    """Run the queued job on this worker: None when it is not queued (another worker has it, or
    it was cancelled). Its work's errors fail it with their message; an unexpected error fails it
    without its details, which go to the log."""
    job = _claim(services, job_id)
    if job is None:
        return None
    work = services.job_work.get(job.kind)
    cancelled = threading.Event()
    beating = _Heartbeat(services, job_id, cancelled)
    beating.start()
    try:
        if work is None:
            raise DomainError(f"this service cannot run {job.kind} jobs")
        result = work(job, DatabaseReporter(services, job, cancelled))
        return _end(services, job_id, lambda j: j.finish(result, utcnow()))
    except JobCancelled:
        return _end(services, job_id, lambda j: j.stopped(utcnow()))
    except DomainError as exc:
        message = f"{exc.message} ({exc.field})" if exc.field else exc.message
        return _end(services, job_id, lambda j: j.fail(message, utcnow()))
    except Exception:
        log.exception("job %s (%s) failed", job_id, job.kind)
        return _end(
            services,
            job_id,
            lambda j: j.fail("an unexpected error stopped it; the service log has the details", utcnow()),
        )
    finally:
        beating.stop()


def _claim(services: Services, job_id: int) -> Job | None:
    with services.uow() as uow:
        try:
            job = uow.jobs.get(job_id, for_update=True)
        except NotFound:
            log.warning("job %s: no such job, nothing to run", job_id)
            return None
        if job.state is not JobState.QUEUED:
            return None
        job = job.start(utcnow())
        uow.jobs.save(job)
        uow.commit()
    log.info("job %s (%s) started, attempt %s", job_id, job.key, job.attempts)
    return job


def _end(services: Services, job_id: int, change: Callable[[Job], Job]) -> Job | None:
    with services.uow() as uow:
        job = uow.jobs.get(job_id, for_update=True)
        if job.state is not JobState.RUNNING:  # found stale and queued again meanwhile: its result is dropped
            log.warning(
                "job %s ended on this worker but is %s now; its outcome here is dropped", job_id, job.state
            )
            return None
        ended = change(job)
        uow.jobs.save(ended)
        uow.commit()
    log.info("job %s (%s) %s", job_id, ended.key, ended.state)
    return ended


class _Heartbeat:
    """Says every ``job_heartbeat_s`` that the job's worker is alive, and notices a cancel."""

    def __init__(self, services: Services, job_id: int, cancelled: threading.Event) -> None:
        self._services = services
        self._job_id = job_id
        self._cancelled = cancelled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"job-{job_id}-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        every = self._services.settings.job_heartbeat_s
        while not self._stop.wait(every):
            try:
                with self._services.uow() as uow:
                    job = uow.jobs.get(self._job_id, for_update=True)
                    if job.state is not JobState.RUNNING:  # no longer this worker's: its work stops
                        self._cancelled.set()
                        return
                    if job.cancel_requested:
                        self._cancelled.set()
                    uow.jobs.save(job.beat(utcnow()))
                    uow.commit()
            except Exception:  # the next beat tries again; a worker that cannot write is found stale
                log.warning("job %s: heartbeat not written", self._job_id, exc_info=True)


def recover_jobs(services: Services) -> list[int]:
    """The sweep's part: a running job whose worker stopped is queued again (or failed, or
    cancelled), and every queued job is asked for again (a worker takes it once). The ids asked for."""
    stale_after = timedelta(seconds=services.settings.job_stale_after_s)
    with services.uow() as uow:
        for job in uow.jobs.active():
            if job.id is None:
                continue
            changed = uow.jobs.get(job.id, for_update=True).worker_lost(utcnow(), stale_after=stale_after)
            if changed is not None:
                log.warning("job %s: its worker stopped; now %s", job.id, changed.state)
                uow.jobs.save(changed)
        uow.commit()
    with services.uow(read_only=True) as uow:
        queued = [job.id for job in uow.jobs.active() if job.state is JobState.QUEUED and job.id is not None]
    for job_id in queued:
        services.work.run_job_soon(job_id)
    return queued
