"""Jobs run on a lane of their own: a training that runs for minutes never holds the thread that
pushes and webhooks' reads wait for. The real huey consumers on the real SQLite queue file, with
use cases of our own (the port the composition root fills)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from dynaval.adapters.hint_inbox import HintInbox
from dynaval.adapters.task_queue import (
    BackgroundJobs,
    QueuedWork,
    hint_lane,
    job_lane,
    make_huey,
    start_embedded_consumer,
)
from dynaval.settings import Settings


class Recorder:
    def __init__(self) -> None:
        self.pushed: list[int] = []
        self.jobs_started: list[int] = []
        self.jobs_ended: list[int] = []
        self.release = threading.Event()

    def background(self) -> BackgroundJobs:
        def push(round_id: int) -> None:
            self.pushed.append(round_id)

        def never(_round_id: int) -> datetime | None:
            return None

        def run_job(job_id: int) -> None:  # a long training: it holds its thread until released
            self.jobs_started.append(job_id)
            self.release.wait(30)
            self.jobs_ended.append(job_id)

        return BackgroundJobs(
            push=push,
            push_retry_at=never,
            escalate=lambda _r: None,
            verify=lambda _r: None,
            take_hints=lambda *_hint: None,
            sweep=lambda: None,
            reconcile=lambda: [],
            run_job=run_job,
        )


def wait_for(what: str, condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    yield made
    made.release.set()


def test_a_long_job_leaves_the_queues_one_thread_to_pushes(tmp_path: Path, recorder: Recorder) -> None:
    settings = Settings(development=True, data_dir=tmp_path, queue_workers=1, job_workers=1)
    main = make_huey("", tmp_path, "lane-test")
    lane = job_lane(main, "", tmp_path)
    assert lane.name == "lane-test-jobs" and (tmp_path / "queue.sqlite3").is_file()
    work = QueuedWork(
        main, settings, recorder.background(), job_lane=lane, hints=HintInbox(hint_lane(main, "", tmp_path))
    )
    consumers = [
        start_embedded_consumer(main, workers=settings.queue_workers, periodic=False),
        start_embedded_consumer(lane, workers=settings.job_workers, periodic=False),
    ]
    try:
        work.run_job_soon(41)
        wait_for("the job to start", lambda: recorder.jobs_started == [41])
        for round_id in (1, 2, 3):  # while the job holds its thread, the one task thread pushes
            work.push_soon(round_id)
        wait_for("the pushes", lambda: sorted(recorder.pushed) == [1, 2, 3])
        assert recorder.jobs_ended == []
        work.run_job_soon(42)  # a second job waits for the lane's thread, not for the pushes'
        work.push_soon(4)
        wait_for("the push", lambda: 4 in recorder.pushed)
        assert recorder.jobs_started == [41]
        recorder.release.set()
        wait_for("both jobs", lambda: recorder.jobs_ended == [41, 42])
    finally:
        for consumer in consumers:
            consumer.stop(graceful=True)


def test_a_consumer_of_the_task_queue_alone_never_takes_a_job(tmp_path: Path, recorder: Recorder) -> None:
    """A process with no job lane (DYNAVAL_JOB_WORKERS=0, `dynaval worker --job-workers 0`) leaves
    the jobs in their queue for a process that has one."""
    settings = Settings(development=True, data_dir=tmp_path, queue_workers=1, job_workers=0)
    main = make_huey("", tmp_path, "lane-test")
    lane = job_lane(main, "", tmp_path)
    work = QueuedWork(
        main, settings, recorder.background(), job_lane=lane, hints=HintInbox(hint_lane(main, "", tmp_path))
    )
    consumer = start_embedded_consumer(main, workers=1, periodic=False)
    try:
        work.run_job_soon(7)
        work.push_soon(1)
        wait_for("the push", lambda: recorder.pushed == [1])
        time.sleep(0.5)
        assert recorder.jobs_started == [] and lane.pending_count() == 1
    finally:
        consumer.stop(graceful=True)
    recorder.release.set()
    later = start_embedded_consumer(lane, workers=1, periodic=False)
    try:
        wait_for("the job, on a lane's consumer", lambda: recorder.jobs_ended == [7])
    finally:
        later.stop(graceful=True)
