"""What a job's work is given and gives back: the jobs room's ports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from dynaval.domain.jobs.job import Job


class JobCancelled(Exception):
    """Raised by a :class:`JobReporter` call when a lead asked the job to stop; the work's own
    cleanup (``finally``) runs on the way out."""


class JobReporter(Protocol):
    """What a job's work tells the world: its steps, how far each has come, and lines of its log.
    Each call may raise :class:`JobCancelled`."""

    def step(self, name: str, total: int | None = None) -> None:
        """A new step begins (``total``: how many units it counts, when known)."""

    def advance(self, done: int, total: int | None = None) -> None:
        """``done`` units of the current step are done (out of ``total``, when it changed)."""

    def say(self, line: str) -> None:
        """A line of the job's log."""


JobWork = Callable[[Job, JobReporter], dict[str, Any]]
"""What a job of one kind does: given the job (its params) and its reporter, its result."""
