"""The hint inbox: webhooks' hints wait on the task queue's storage (huey's SQLite file, or Redis)
and a worker records many of them in one transaction. The real huey storages, the real database
(SQLite, whose write lock is what sends a webhook's hint here)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from huey import Huey, RedisHuey
from sqlalchemy import event
from sqlmodel import select

import dynaval.adapters.task_queue as task_queue
from dynaval.adapters.db.orm import TaskCheckRow, as_utc
from dynaval.adapters.hint_inbox import HintInbox, QueuedHint
from dynaval.adapters.task_queue import BackgroundJobs, QueuedWork, hint_lane, make_huey
from dynaval.service_layer.services import Services
from dynaval.settings import Settings
from tests.integration.conftest import PROJECT
from tests.integration.test_queued_hints import writer_elsewhere
from tests.integration.test_verified_votes import (
    CREATED,
    add_candidate,
    add_round,
    ingest_webhook,
    waiting_tasks,
)
from tests.support.label_studio_copy import LabelStudioCopy, annotation_json, webhook

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
REDIS_URL = "redis://127.0.0.1:6379/0"
T0 = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "redis"])
def lane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Huey]:
    """A hint lane on huey's SQLite file in the test's folder, or on the shared Redis under a name
    of the test's own (its keys deleted afterwards)."""
    if request.param == "sqlite":
        yield hint_lane(make_huey("", tmp_path, "inbox-test"), "", tmp_path)
        return
    name = f"inboxtest{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis does not answer at {REDIS_URL}: {exc}", pytrace=False)
    main = make_huey(REDIS_URL, tmp_path, name)
    made = hint_lane(main, REDIS_URL, tmp_path)
    assert isinstance(made, RedisHuey)
    try:
        yield made
    finally:
        keys = list(client.scan_iter(match=f"*{name}*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_hints_are_taken_oldest_first_in_batches_and_can_be_put_back(lane: Huey) -> None:
    inbox = HintInbox(lane)
    assert inbox.name.endswith("-hints") and inbox.size() == 0 and inbox.take(10) == []
    for n in range(7):
        inbox.put(1, {30 + n, 20 + n}, T0 + timedelta(seconds=n))
    assert inbox.size() == 7
    first = inbox.take(3)
    assert first == [QueuedHint(1, (20 + n, 30 + n), T0 + timedelta(seconds=n)) for n in range(3)]
    assert inbox.size() == 4
    inbox.put_back(first)
    rest = inbox.take(100)
    assert [hint.at for hint in rest] == [T0 + timedelta(seconds=n) for n in (3, 4, 5, 6, 0, 1, 2)]
    assert inbox.size() == 0 and inbox.take(5) == []


def test_two_workers_taking_at_once_never_take_the_same_hint(lane: Huey) -> None:
    inbox = HintInbox(lane)
    for n in range(600):
        inbox.put(2, [n], T0)
    taken: list[list[QueuedHint]] = [[], []]
    start = threading.Barrier(2)

    def take(into: list[QueuedHint]) -> None:
        start.wait()
        while batch := inbox.take(7):
            into.extend(batch)

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    ids = sorted(hint.task_ids[0] for into in taken for hint in into)
    assert ids == list(range(600))  # each once, none lost


def test_a_hints_time_keeps_its_offset_as_utc(lane: Huey) -> None:
    inbox = HintInbox(lane)
    inbox.put(3, [1], datetime(2026, 12, 7, 8, 0, tzinfo=UTC).astimezone(UTC) + timedelta(microseconds=7))
    [hint] = inbox.take(1)
    assert hint.at == datetime(2026, 12, 7, 8, 0, 0, 7, tzinfo=UTC) and hint.at.tzinfo is not None


@pytest.fixture
def queued(services: Services) -> LabelStudioCopy:
    """The composition root's real task queue and hint inbox (huey on SQLite in the test's folder),
    no consumer: what is queued stays there until the test runs it."""
    copy = LabelStudioCopy(project_id=PROJECT)
    services.label_studio = copy  # type: ignore[assignment]
    assert isinstance(services.work, QueuedWork)
    return copy


def commits_during(services: Services) -> list[int]:
    """A list that grows by one at each commit of the service's database."""
    seen: list[int] = []
    event.listen(services.database.engine, "commit", lambda _connection: seen.append(1))
    return seen


@SQLITE
def test_many_webhooks_answered_under_another_writer_are_recorded_in_one_transaction(
    services: Services, queued: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    for task_id in range(100, 160):
        add_candidate(services, round_id, task_id=task_id)
    with writer_elsewhere(services):
        for task_id in range(100, 160):
            annotation = queued.put(annotation_json(task_id, task_id, 1000 + task_id, "negative"))
            assert ingest_webhook(services, webhook(CREATED, PROJECT, annotation)).tasks_to_verify == 1
    assert isinstance(services.work, QueuedWork)
    queue = services.task_queue
    # Sixty webhooks, one task that takes their hints: the rest found it asked for.
    assert [task.name for task in queue.pending()] == ["dynaval.take_queued_hints"]
    assert services.work.hints.size() == 60 and waiting_tasks(services) == []
    commits = commits_during(services)
    queue.execute(queue.dequeue())
    assert len(commits) == 1
    assert waiting_tasks(services) == list(range(100, 160))
    assert services.work.hints.size() == 0
    assert [task.name for task in queue.pending()] == ["dynaval.verify_round"]


@SQLITE
def test_a_task_named_by_several_queued_hints_keeps_the_latest_time(
    services: Services, queued: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=41)
    add_candidate(services, round_id, task_id=42)
    assert isinstance(services.work, QueuedWork)
    services.work.hints.put(round_id, [41], T0 + timedelta(seconds=9))
    services.work.hints.put(round_id, [41, 42], T0)
    services.work.hints.put(round_id, [42], T0 + timedelta(seconds=4))
    assert services.work.take_queued_hints() == 3
    with services.database.unit_of_work() as session:
        rows = session.exec(select(TaskCheckRow.task_id, TaskCheckRow.requested_at)).all()
    assert {task: as_utc(at) for task, at in rows} == {
        41: T0 + timedelta(seconds=9),
        42: T0 + timedelta(seconds=4),
    }


@SQLITE
def test_a_hint_recorded_after_a_read_that_covers_it_asks_for_no_second_read(
    services: Services, queued: LabelStudioCopy
) -> None:
    """Behind a backlog a hint is recorded after the worker already read its task: a read that
    started at or after the webhook's time saw what it announced (as a read settles the requests
    made before it), so the task is not read again."""
    round_id = add_round(services)
    read_at = T0 + timedelta(seconds=5)
    for task_id in (44, 45, 46):
        add_candidate(services, round_id, task_id=task_id, label_studio_read_at=read_at)
    add_candidate(services, round_id, task_id=47)  # never read
    assert isinstance(services.work, QueuedWork)
    services.work.hints.put(round_id, [44], T0 + timedelta(seconds=3))  # before the read began
    services.work.hints.put(round_id, [45], read_at)  # as it began
    services.work.hints.put(round_id, [46], T0 + timedelta(seconds=6))  # during or after it
    services.work.hints.put(round_id, [47], T0)
    assert services.work.take_queued_hints() == 4
    assert waiting_tasks(services) == [46, 47]


@SQLITE
def test_a_task_left_by_a_version_before_the_inbox_is_still_recorded(
    services: Services, queued: LabelStudioCopy
) -> None:
    """Such a version queued ``dynaval.take_hints`` with the round, the tasks and the time."""
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=43)
    queue = services.task_queue
    # The name such a version stored with each message: the module's and the task's.
    old_task = queue._registry.string_to_task("dynaval.adapters.task_queue.dynaval.take_hints")
    queue.enqueue(old_task(args=(round_id, [43], T0.isoformat())))
    queue.execute(queue.dequeue())
    assert waiting_tasks(services) == [43]
    assert [task.name for task in queue.pending()] == ["dynaval.verify_round"]


class FailingOnce:
    """The use cases, whose hint recording fails the first time (the database busy past its limit)."""

    def __init__(self) -> None:
        self.recorded: list[list[QueuedHint]] = []
        self.failed = False

    def take_hints(self, hints: list[QueuedHint]) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("database is locked")
        self.recorded.append(hints)

    def background(self) -> BackgroundJobs:
        def nothing(*_args: object) -> None:
            return None

        return BackgroundJobs(
            push=nothing,
            push_retry_at=lambda _round_id: None,
            escalate=nothing,
            verify=nothing,
            take_hints=self.take_hints,
            sweep=nothing,
            reconcile=lambda: [],
            run_job=nothing,
        )


def queued_work(tmp_path: Path, jobs: BackgroundJobs) -> QueuedWork:
    main = make_huey("", tmp_path, "hints-test")
    lanes = make_huey("", tmp_path, "hints-test-jobs")
    return QueuedWork(
        main,
        Settings(development=True, data_dir=tmp_path),
        jobs,
        job_lane=lanes,
        hints=HintInbox(hint_lane(main, "", tmp_path)),
    )


def test_hints_whose_transaction_failed_go_back_to_the_inbox_and_are_taken_again(tmp_path: Path) -> None:
    use_cases = FailingOnce()
    work = queued_work(tmp_path, use_cases.background())
    for n in range(5):
        assert work.hint_soon(7, [n], T0)
    huey = work._huey
    assert [task.name for task in huey.pending()] == ["dynaval.take_queued_hints"]
    huey.execute(huey.dequeue())  # fails: the hints go back, and the task is asked for again later
    assert use_cases.recorded == [] and work.hints.size() == 5
    [again] = huey.pending()
    assert again.name == "dynaval.take_queued_hints" and again.eta is not None  # a little later
    assert work.take_queued_hints() == 5  # the scheduled task, or the sweep, takes them again
    assert sorted(hint.task_ids[0] for hint in use_cases.recorded[0]) == [0, 1, 2, 3, 4]


def test_a_task_records_a_bounded_number_of_batches_then_asks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_queue, "HINT_BATCH", 3)
    monkeypatch.setattr(task_queue, "HINT_BATCHES_PER_TASK", 2)
    use_cases = FailingOnce()
    use_cases.failed = True  # nothing fails here
    work = queued_work(tmp_path, use_cases.background())
    for n in range(10):
        work.hints.put(8, [n], T0)
    assert work.take_queued_hints() == 6
    assert [len(batch) for batch in use_cases.recorded] == [3, 3]
    huey = work._huey
    assert [task.name for task in huey.pending()] == ["dynaval.take_queued_hints"]  # the rest
    huey.execute(huey.dequeue())
    assert [len(batch) for batch in use_cases.recorded] == [3, 3, 3, 1] and work.hints.size() == 0


def test_the_minutes_sweep_records_hints_whose_task_was_lost(tmp_path: Path) -> None:
    """A worker killed after taking the task, before the hints: no task is left to take them."""
    use_cases = FailingOnce()
    use_cases.failed = True
    work = queued_work(tmp_path, use_cases.background())
    work.hints.put(9, [1, 2], T0)
    assert work._huey.pending_count() == 0
    work.sweep.call_local()
    assert use_cases.recorded == [[QueuedHint(9, (1, 2), T0)]] and work.hints.size() == 0
