"""A job's lifecycle (:mod:`dynaval.domain.jobs.job`): what each state may become, the progress's
rate and estimate, and what a stopped worker's job becomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.jobs.job import MAX_ATTEMPTS, MAX_LOG_LINES, Job, JobKind, JobProgress, JobState

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
STALE = timedelta(seconds=120)


def queued() -> Job:
    return Job(
        kind=JobKind.TRAIN, key="train:model-b", params={"epochs": 3}, created_by="lead", created_at=T0, id=7
    )


def test_a_queued_job_starts_runs_and_finishes_once() -> None:
    job = queued().start(T0)
    assert (job.state, job.attempts, job.started_at, job.heartbeat_at) == (JobState.RUNNING, 1, T0, T0)
    with pytest.raises(Conflict, match="running, not queued"):
        job.start(T0)  # a second worker finds it running and leaves it
    done = job.finish({"model": "m"}, T0 + timedelta(seconds=5))
    assert (done.state, done.result, done.finished_at, done.active) == (
        JobState.DONE, {"model": "m"}, T0 + timedelta(seconds=5), False,
    )  # fmt: skip
    for change in (lambda j: j.fail("x", T0), lambda j: j.cancel(T0), lambda j: j.finish({}, T0)):
        with pytest.raises(Conflict):
            change(done)


def test_cancel_stops_a_queued_job_at_once_and_a_running_one_when_its_work_stops() -> None:
    cancelled = queued().cancel(T0)
    assert (cancelled.state, cancelled.cancel_requested, cancelled.finished_at) == (
        JobState.CANCELLED,
        True,
        T0,
    )
    with pytest.raises(Conflict, match="nothing to cancel"):
        cancelled.cancel(T0)
    running = queued().start(T0).cancel(T0)
    assert (running.state, running.cancel_requested) == (JobState.RUNNING, True)
    assert running.stopped(T0).state is JobState.CANCELLED


def test_failing_keeps_a_bounded_message() -> None:
    failed = queued().start(T0).fail("  " + "x" * 5000, T0)
    assert failed.state is JobState.FAILED and failed.error == "x" * 2000
    assert queued().fail("   ", T0).error == "the job failed"


def test_progress_tells_its_rate_and_what_remains() -> None:
    progress = JobProgress("training", 30, 120, step_started_at=T0, updated_at=T0 + timedelta(seconds=10))
    assert progress.rate_per_s() == 3.0 and progress.remaining_s() == 30.0
    assert progress.to_dict() == {
        "step": "training",
        "done": 30,
        "total": 120,
        "rate_per_s": 3.0,
        "remaining_s": 30.0,
    }
    assert JobProgress("loading").to_dict()["rate_per_s"] is None
    assert (
        JobProgress("x", 5, None, step_started_at=T0, updated_at=T0 + timedelta(seconds=1)).remaining_s()
        is None
    )
    assert JobProgress.from_dict(progress.stored()) == progress
    job = queued().start(T0).report(progress, T0 + timedelta(seconds=10))
    assert job.heartbeat_at == T0 + timedelta(seconds=10) and job.progress == progress


def test_a_job_whose_worker_stopped_runs_again_once_then_fails() -> None:
    first = queued().start(T0)
    assert first.worker_lost(T0 + STALE - timedelta(seconds=1), stale_after=STALE) is None  # alive
    requeued = first.worker_lost(T0 + STALE, stale_after=STALE)
    assert requeued is not None and requeued.state is JobState.QUEUED and requeued.progress is None
    assert "queued again" in requeued.log[-1]
    second = requeued.start(T0 + STALE)
    assert second.attempts == MAX_ATTEMPTS
    failed = second.worker_lost(T0 + 3 * STALE, stale_after=STALE)
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.error is not None and "stopped 2 times" in failed.error
    asked_to_stop = queued().start(T0).cancel(T0).worker_lost(T0 + STALE, stale_after=STALE)
    assert asked_to_stop is not None and asked_to_stop.state is JobState.CANCELLED
    assert queued().worker_lost(T0 + 10 * STALE, stale_after=STALE) is None  # only a running job


def test_the_log_keeps_its_last_lines_and_a_key_names_kind_and_name() -> None:
    job = queued()
    for n in range(MAX_LOG_LINES + 5):
        job = job.say(f"line {n}")
    assert len(job.log) == MAX_LOG_LINES and job.log[-1] == f"line {MAX_LOG_LINES + 4}"
    for key in ("train", "train:", "train:Model", "train:a b", "train:x\n"):
        with pytest.raises(InvalidInput, match="key"):
            Job(kind=JobKind.TRAIN, key=key, params={}, created_by="lead", created_at=T0)


def test_a_job_names_what_it_works_on() -> None:
    def subject(kind: JobKind, key: str, params: dict[str, object]) -> str:
        return Job(kind=kind, key=key, params=params, created_by="lead", created_at=T0).subject

    assert subject(JobKind.RELEASE, "release:dynaval-nli", {"name": "dynaval-nli", "version": "1.1.0"}) == (
        "dynaval-nli 1.1.0"
    )
    assert subject(JobKind.TRAIN, "train:model-b", {"name": "model-b", "base_folder": "/m/a"}) == "model-b"
    assert subject(JobKind.EVALUATE, "evaluate:0a1b", {"model": "/srv/models/b"}) == "b"
    assert subject(JobKind.GATE, "gate:0a1b", {"candidate": "/srv/models/c/"}) == "c"
    assert subject(JobKind.GATE, "gate:0a1b", {}) == "0a1b"
