"""What a job's work is given and gives back: the jobs room's ports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from dynaval.domain.jobs.job import Job
from dynaval.service_layer.progress import Progress


class JobCancelled(Exception):
    """Raised by a :class:`JobReporter` call when a lead asked the job to stop; the work's own
    cleanup (``finally``) runs on the way out."""


class JobReporter(Progress, Protocol):
    """What a job's work tells the world: its steps, how far each has come (a :class:`Progress`),
    and lines of its log. Each call may raise :class:`JobCancelled`."""

    def say(self, line: str) -> None:
        """A line of the job's log."""


JobWork = Callable[[Job, JobReporter], dict[str, Any]]
"""What a job of one kind does: given the job (its params) and its reporter, its result."""
