"""A job: long work (training a model, for a start) that runs on the task queue, not inside a web
request, and that a lead can watch and stop.

Its lifecycle::

    queued ──start──▶ running ──finish──▶ done
      │                 │ └──fail──▶ failed
      │                 └──cancel asked, then stopped──▶ cancelled
      └──cancel──▶ cancelled

A running job whose worker stopped (no heartbeat for a while) goes back to ``queued`` while it has
attempts left, else it fails saying so: it is never lost, and never runs twice at once (only a
queued job can start, and starting is one row's update under its lock). Two active jobs never share
a ``key``: two trainings of one model name never run side by side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dynaval.domain.errors import Conflict, InvalidInput


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING)
FINISHED_STATES = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class JobKind(StrEnum):
    TRAIN = "train"
    """Fine-tune a model on releases' train splits and register it (``POST /api/models/train``)."""
    RELEASE = "release"
    """Build a release of frozen rounds (``POST /api/releases``)."""
    EVALUATE = "evaluate"
    """Run a model over the regression suite and record its results (``POST /api/models/evaluate``)."""
    GATE = "gate"
    """Evaluate what is missing and gate a candidate model against a baseline (``POST /api/gate``)."""
    RETRAIN = "retrain"
    """A task type's retraining policy ran: train, evaluate, gate, ship (``retrain:<task type>``)."""


MAX_ATTEMPTS = 2
"""A job whose worker stopped under it is run again once; the second time it fails."""
MAX_ERROR_CHARS = 2000
KEY_PATTERN = re.compile(r"[a-z]+:[a-z0-9][a-z0-9_.-]{0,99}")


@dataclass(frozen=True)
class JobProgress:
    """Where a running job stands: its step (``loading``, ``training``, ``evaluating``...), how much
    of the step is done out of how much (None: not counted), and when the step began."""

    step: str
    done: int = 0
    total: int | None = None
    step_started_at: datetime | None = None
    updated_at: datetime | None = None

    def rate_per_s(self) -> float | None:
        """Units of the step done per second so far (None before the first is done)."""
        if self.step_started_at is None or self.updated_at is None or self.done <= 0:
            return None
        seconds = (self.updated_at - self.step_started_at).total_seconds()
        return self.done / seconds if seconds > 0 else None

    def remaining_s(self) -> float | None:
        """The step's estimated seconds left at its rate so far (None when it cannot be told)."""
        rate = self.rate_per_s()
        if rate is None or self.total is None:
            return None
        return max(0, self.total - self.done) / rate

    def to_dict(self) -> dict[str, Any]:
        rate = self.rate_per_s()
        remaining = self.remaining_s()
        return {
            "step": self.step,
            "done": self.done,
            "total": self.total,
            "rate_per_s": None if rate is None else round(rate, 3),
            "remaining_s": None if remaining is None else round(remaining, 1),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> JobProgress | None:
        if not data:
            return None
        return cls(
            step=str(data["step"]),
            done=int(data.get("done") or 0),
            total=None if data.get("total") is None else int(data["total"]),
            step_started_at=_parse_time(data.get("step_started_at")),
            updated_at=_parse_time(data.get("updated_at")),
        )

    def stored(self) -> dict[str, Any]:
        """What storage keeps (the times as ISO strings)."""
        return {
            "step": self.step,
            "done": self.done,
            "total": self.total,
            "step_started_at": None if self.step_started_at is None else self.step_started_at.isoformat(),
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
        }


def _parse_time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class Job:
    """One job and its whole state (see the module for its lifecycle)."""

    kind: JobKind
    key: str
    """What no two active jobs share (``train:<model name>``)."""
    params: dict[str, Any]
    created_by: str
    created_at: datetime
    id: int | None = None
    state: JobState = JobState.QUEUED
    attempts: int = 0
    progress: JobProgress | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    cancel_requested: bool = False
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    finished_at: datetime | None = None
    log: tuple[str, ...] = field(default=())
    """The job's own lines (what a command would print), newest last, at most :data:`MAX_LOG_LINES`."""

    def __post_init__(self) -> None:
        if not KEY_PATTERN.fullmatch(self.key):
            raise InvalidInput(f"a job's key is <kind>:<name>, not {self.key!r}", field="key")

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def subject(self) -> str:
        """What the job works on, as a person names it: a release's name and version, a new
        model's name, the folder name of the model evaluated or gated.

        >>> Job(JobKind.GATE, "gate:ab", {"candidate": "/srv/b/"}, "lead", datetime(2026, 1, 1)).subject
        'b'
        """
        params = self.params
        if self.kind is JobKind.RELEASE:
            return f"{params.get('name', '')} {params.get('version', '')}".strip()
        for name in ("name", "model", "candidate"):
            value = params.get(name)
            if isinstance(value, str) and value.strip("/"):
                return value.rstrip("/").rsplit("/", 1)[-1]
        return self.key.partition(":")[2]

    def start(self, at: datetime) -> Job:
        """A worker takes the queued job (a second worker finds it running and leaves it)."""
        if self.state is not JobState.QUEUED:
            raise Conflict(f"job {self.id} is {self.state}, not queued: it cannot start", field="job_id")
        return replace(
            self,
            state=JobState.RUNNING,
            attempts=self.attempts + 1,
            started_at=at,
            heartbeat_at=at,
            progress=JobProgress("starting", step_started_at=at, updated_at=at),
        )

    def report(self, progress: JobProgress, at: datetime) -> Job:
        """The running job's progress (which also says its worker is alive)."""
        self._check_running("report progress")
        return replace(self, progress=progress, heartbeat_at=at)

    def beat(self, at: datetime) -> Job:
        """Its worker is alive."""
        self._check_running("beat")
        return replace(self, heartbeat_at=at)

    def say(self, line: str) -> Job:
        """A line of the job's log (kept to the last :data:`MAX_LOG_LINES`)."""
        return replace(self, log=(*self.log, line[:MAX_LINE_CHARS])[-MAX_LOG_LINES:])

    def finish(self, result: dict[str, Any], at: datetime) -> Job:
        self._check_running("finish")
        return replace(self, state=JobState.DONE, result=result, finished_at=at, heartbeat_at=at)

    def fail(self, error: str, at: datetime) -> Job:
        if not self.active:
            raise Conflict(f"job {self.id} is {self.state} already", field="job_id")
        message = error.strip() or "the job failed"
        return replace(
            self, state=JobState.FAILED, error=message[:MAX_ERROR_CHARS], finished_at=at, heartbeat_at=at
        )

    def cancel(self, at: datetime) -> Job:
        """Asked to stop: a queued job is cancelled at once, a running one when its work next
        reports progress (its partial output is removed)."""
        if not self.active:
            raise Conflict(f"job {self.id} is {self.state}: there is nothing to cancel", field="job_id")
        if self.state is JobState.QUEUED:
            return replace(self, state=JobState.CANCELLED, cancel_requested=True, finished_at=at)
        return replace(self, cancel_requested=True)

    def stopped(self, at: datetime) -> Job:
        """The running job's work stopped as it was asked to."""
        self._check_running("stop")
        return replace(self, state=JobState.CANCELLED, finished_at=at, heartbeat_at=at)

    def worker_lost(self, at: datetime, *, stale_after: timedelta) -> Job | None:
        """What a running job becomes when its worker has said nothing for ``stale_after``: queued
        again while it has attempts left, failed after :data:`MAX_ATTEMPTS` (or when it was being
        cancelled: cancelled). None: its worker is alive, or it is not running."""
        if self.state is not JobState.RUNNING or self.heartbeat_at is None:
            return None
        if at - self.heartbeat_at < stale_after:
            return None
        if self.cancel_requested:
            return replace(self, state=JobState.CANCELLED, finished_at=at)
        if self.attempts >= MAX_ATTEMPTS:
            return replace(
                self,
                state=JobState.FAILED,
                finished_at=at,
                error=f"its worker stopped {self.attempts} times while running it "
                f"(no heartbeat for {int(stale_after.total_seconds())} s); submit it again",
            )
        return replace(self, state=JobState.QUEUED, progress=None, heartbeat_at=None).say(
            f"its worker stopped (attempt {self.attempts}); queued again"
        )

    def _check_running(self, what: str) -> None:
        if self.state is not JobState.RUNNING:
            raise Conflict(f"job {self.id} is {self.state}, not running: it cannot {what}", field="job_id")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": str(self.kind),
            "key": self.key,
            "subject": self.subject,
            "state": str(self.state),
            "params": self.params,
            "progress": None if self.progress is None else self.progress.to_dict(),
            "result": self.result,
            "error": self.error,
            "cancel_requested": self.cancel_requested,
            "attempts": self.attempts,
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat(),
            "started_at": None if self.started_at is None else self.started_at.isoformat(),
            "finished_at": None if self.finished_at is None else self.finished_at.isoformat(),
            "log": list(self.log),
        }


MAX_LOG_LINES = 50
MAX_LINE_CHARS = 500
