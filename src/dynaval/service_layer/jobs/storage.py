"""The jobs room's storage port."""

from __future__ import annotations

from typing import Protocol

from dynaval.domain.jobs.job import Job


class JobRepository(Protocol):
    def add(self, job: Job) -> Job:
        """Store a new job; the stored one, with its id. Another active job with its key is a
        :class:`~dynaval.domain.errors.StorageConflict` when the unit commits."""
        ...

    def get(self, job_id: int, *, for_update: bool = False) -> Job:
        """The job; :class:`~dynaval.domain.errors.NotFound` naming ``job_id``. ``for_update``:
        its row stays locked until the unit of work ends."""
        ...

    def save(self, job: Job) -> None: ...

    def latest(self, limit: int) -> list[Job]:
        """The newest ``limit`` jobs, newest first."""
        ...

    def active(self) -> list[Job]:
        """The queued and running jobs, oldest first."""
        ...

    def active_with_key(self, key: str) -> Job | None: ...

    def latest_with_key(self, key: str, limit: int) -> list[Job]:
        """The newest ``limit`` jobs with ``key``, active or finished, newest first."""
        ...
