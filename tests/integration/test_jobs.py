"""Jobs' use cases on both databases, each run by the worker's own entry (:func:`run_job`), with
work functions of our own port (what a training job does is tested in tests/e2e/test_training_jobs.py).

A job is never lost (a stopped worker's job runs again, once), never runs twice at once, stops when
a lead cancels it, and ends failed with a message a lead can read when its work fails.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput, NotFound
from dynaval.domain.jobs.job import Job, JobKind, JobState
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.jobs.ports import JobReporter
from dynaval.service_layer.services import Services

KIND = JobKind.TRAIN


def submit(services: Services, name: str = "model-b", **params: Any) -> int:
    job = jobs.submit_job(services, kind=KIND, key=f"train:{name}", params=params, by="lead")
    assert job.id is not None and job.state is JobState.QUEUED
    return job.id


def test_a_job_runs_once_reports_its_progress_and_keeps_its_result(services: Services) -> None:
    seen: list[dict[str, Any]] = []

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        reporter.say(f"training {job.params['epochs']} epochs")
        reporter.step("training", total=4)
        for done in range(1, 5):
            reporter.advance(done)
            time.sleep(0.45)  # the row is written at most once a second: the last one is
        seen.append(dict(jobs.get_job(services, job.id or 0).to_dict()))
        return {"model": {"hash": "sha256:" + "a" * 64, "name": "model-b"}}

    services.job_work[KIND] = work
    job_id = submit(services, epochs=2)
    finished = jobs.run_job(services, job_id)
    assert finished is not None and finished.state is JobState.DONE
    stored = jobs.get_job(services, job_id)
    assert stored.result == {"model": {"hash": "sha256:" + "a" * 64, "name": "model-b"}}
    assert stored.log == ("training 2 epochs",) and stored.attempts == 1
    # While it ran, its progress was on its row: the step, units done of the total, and a rate.
    running = seen[0]
    assert running["state"] == "running" and running["progress"]["step"] == "training"
    assert running["progress"]["total"] == 4 and 1 <= running["progress"]["done"] <= 4
    assert running["progress"]["rate_per_s"] is not None
    # Asked for again (a second enqueue, a second worker): it does not run again.
    assert jobs.run_job(services, job_id) is None
    assert [j.id for j in jobs.list_jobs(services)] == [job_id]


def test_two_workers_asked_for_one_job_run_it_once(services: Services) -> None:
    runs: list[int] = []

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        runs.append(job.attempts)
        time.sleep(0.5)
        return {}

    services.job_work[KIND] = work
    job_id = submit(services)
    outcomes: list[Job | None] = []
    workers = [
        threading.Thread(target=lambda: outcomes.append(jobs.run_job(services, job_id))) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert runs == [1] and sorted(o is None for o in outcomes) == [False, True]


def test_one_active_job_per_key(services: Services) -> None:
    first = submit(services, "model-b")
    with pytest.raises(Conflict, match=f"job {first} .* is queued") as refused:
        submit(services, "model-b")
    assert refused.value.field == "name"
    other = submit(services, "model-c")  # another name is another key
    jobs.cancel_job(services, first, by="lead")
    again = submit(services, "model-b")  # a finished job frees its key
    assert len({first, other, again}) == 3


def test_cancel_a_queued_job_and_a_running_one(services: Services) -> None:
    started = threading.Event()
    cleaned: list[bool] = []

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        reporter.step("training", total=10_000)
        started.set()
        try:
            for done in range(10_000):
                reporter.advance(done)
                time.sleep(0.05)
        finally:
            cleaned.append(True)  # the work's own cleanup runs on the way out
        return {"should": "not be reached"}

    services.job_work[KIND] = work
    queued = submit(services, "queued-one")
    assert jobs.cancel_job(services, queued, by="lead").state is JobState.CANCELLED
    assert jobs.run_job(services, queued) is None  # a worker that takes it later leaves it

    running = submit(services, "running-one")
    outcome: list[Job | None] = []
    worker = threading.Thread(target=lambda: outcome.append(jobs.run_job(services, running)))
    worker.start()
    assert started.wait(10)
    asked = jobs.cancel_job(services, running, by="lead")
    assert (asked.state, asked.cancel_requested) == (JobState.RUNNING, True)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert outcome[0] is not None and outcome[0].state is JobState.CANCELLED and cleaned == [True]
    stored = jobs.get_job(services, running)
    assert stored.state is JobState.CANCELLED and stored.result is None
    with pytest.raises(Conflict, match="nothing to cancel"):
        jobs.cancel_job(services, running, by="lead")
    with pytest.raises(NotFound) as missing:
        jobs.cancel_job(services, 999_999, by="lead")
    assert missing.value.field == "job_id"


def test_a_failing_job_says_why_and_hides_what_a_lead_cannot_use(services: Services) -> None:
    def refused(job: Job, reporter: JobReporter) -> dict[str, Any]:
        raise InvalidInput("split dev_r1 is not a train split", field="splits")

    def broken(job: Job, reporter: JobReporter) -> dict[str, Any]:
        raise RuntimeError("/srv/secret/path exploded")

    services.job_work[KIND] = refused
    failed = jobs.run_job(services, submit(services, "refused"))
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.error == "split dev_r1 is not a train split (splits)"
    services.job_work[KIND] = broken
    crashed = jobs.run_job(services, submit(services, "broken"))
    assert crashed is not None and crashed.state is JobState.FAILED
    assert crashed.error is not None and "service log" in crashed.error and "/srv" not in crashed.error


def test_a_job_whose_worker_stopped_is_run_again_once_then_failed(services: Services) -> None:
    services.settings.job_stale_after_s = 60.0
    job_id = submit(services)
    # A worker took it, then its process died: no heartbeat since.
    with services.uow() as uow:
        started = uow.jobs.get(job_id, for_update=True).start(utcnow() - timedelta(seconds=61))
        uow.jobs.save(started)
        uow.commit()
    assert jobs.recover_jobs(services) == [job_id]
    again = jobs.get_job(services, job_id)
    assert again.state is JobState.QUEUED and again.attempts == 1 and "queued again" in again.log[-1]
    with services.uow() as uow:
        uow.jobs.save(uow.jobs.get(job_id, for_update=True).start(utcnow() - timedelta(seconds=61)))
        uow.commit()
    assert jobs.recover_jobs(services) == []
    failed = jobs.get_job(services, job_id)
    assert failed.state is JobState.FAILED and failed.error is not None and "stopped 2 times" in failed.error
    # A live worker's job is left alone: its heartbeat is fresh.
    alive = submit(services, "alive")
    with services.uow() as uow:
        uow.jobs.save(uow.jobs.get(alive, for_update=True).start(utcnow()))
        uow.commit()
    assert jobs.recover_jobs(services) == [] and jobs.get_job(services, alive).state is JobState.RUNNING


def test_the_heartbeat_keeps_a_long_job_alive(services: Services) -> None:
    services.settings.job_heartbeat_s = 0.2
    services.settings.job_stale_after_s = 1.0

    def quiet(job: Job, reporter: JobReporter) -> dict[str, Any]:
        time.sleep(2.5)  # no report for longer than the stale limit
        return {"quiet": True}

    services.job_work[KIND] = quiet
    job_id = submit(services)
    outcome: list[Job | None] = []
    worker = threading.Thread(target=lambda: outcome.append(jobs.run_job(services, job_id)))
    worker.start()
    for _ in range(4):
        time.sleep(0.5)
        jobs.recover_jobs(services)  # the sweep, meanwhile: it must not take the job away
        assert jobs.get_job(services, job_id).state is JobState.RUNNING
    worker.join(timeout=10)
    assert outcome[0] is not None and outcome[0].state is JobState.DONE and outcome[0].attempts == 1


def test_a_worker_whose_job_was_taken_from_it_stops_and_the_next_one_runs_it(services: Services) -> None:
    """Never twice at once: if the sweep took a job for stopped (its worker stalled past the limit),
    the stalled worker's work stops at its next report and its outcome is dropped."""
    started = threading.Event()

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        reporter.step("training", total=1_000)
        started.set()
        for done in range(1_000 if job.attempts == 1 else 3):
            reporter.advance(done)
            time.sleep(0.05)
        return {"attempt": job.attempts}

    services.job_work[KIND] = work
    job_id = submit(services)
    outcome: list[Job | None] = []
    first = threading.Thread(target=lambda: outcome.append(jobs.run_job(services, job_id)))
    first.start()
    assert started.wait(10)
    with services.uow() as uow:  # what the sweep does to a job whose heartbeat is too old
        taken = uow.jobs.get(job_id, for_update=True).worker_lost(utcnow(), stale_after=timedelta(0))
        assert taken is not None and taken.state is JobState.QUEUED
        uow.jobs.save(taken)
        uow.commit()
    first.join(timeout=30)
    assert not first.is_alive() and outcome == [None]
    assert jobs.get_job(services, job_id).state is JobState.QUEUED  # left for the next worker
    second = jobs.run_job(services, job_id)
    assert second is not None and second.state is JobState.DONE and second.result == {"attempt": 2}
