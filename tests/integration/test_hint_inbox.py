"""The hint inbox: webhooks' hints wait on the task queue's storage (huey's SQLite file, or Redis)
and a worker records many of them in one transaction. The real huey storages, the real database
(SQLite, whose write lock is what sends a webhook's hint here)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from huey import Huey, RedisHuey
from sqlalchemy import event
from sqlmodel import select

import dynaval.adapters.task_queue as task_queue
from dynaval.adapters.db.orm import TaskCheckRow, as_utc
from dynaval.adapters.hint_inbox import HintInbox, QueuedHint
from dynaval.adapters.task_queue import HINTS_FLAG, BackgroundJobs, QueuedWork, hint_lane, make_huey
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
from tests.support.redis_queues import REDIS_URL, redis_queue_name

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
T0 = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


@dataclass(frozen=True)
class QueueStorage:
    url: str
    """The task queue's storage: empty for huey's SQLite file in ``folder``, or the shared Redis."""
    name: str
    """The queues' name, the test's own (Redis keeps only its letters and digits)."""
    folder: Path


@pytest.fixture(params=["sqlite", "redis"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueStorage]:
    """huey's SQLite file in the test's folder, or the shared Redis under queue names of the test's
    own, their keys deleted afterwards."""
    if request.param == "sqlite":
        yield QueueStorage("", f"inboxtest{uuid.uuid4().hex[:10]}", tmp_path)
        return
    with redis_queue_name("inboxtest") as name:
        yield QueueStorage(REDIS_URL, name, tmp_path)


def open_lane(storage: QueueStorage) -> Huey:
    """A hint lane on the storage, as each process opens its own."""
    lane = hint_lane(make_huey(storage.url, storage.folder, storage.name), storage.url, storage.folder)
    assert isinstance(lane, RedisHuey) == bool(storage.url)
    return lane


def test_hints_are_taken_in_the_order_they_came_in_batches_and_can_be_put_back(storage: QueueStorage) -> None:
    inbox = HintInbox(open_lane(storage))
    assert inbox.name.endswith("-hints") and inbox.size() == 0 and inbox.take(10) == []
    for n in range(7):
        inbox.put(1, {30 + n, 20 + n}, T0 + timedelta(seconds=n))
    assert inbox.size() == 7
    first = inbox.take(3)
    assert first == [QueuedHint(1, (20 + n, 30 + n), T0 + timedelta(seconds=n)) for n in range(3)]
    assert inbox.size() == 4
    inbox.put_back(first)
    inbox.put_back([])
    rest = inbox.take(100)
    assert [hint.at for hint in rest] == [T0 + timedelta(seconds=n) for n in (3, 4, 5, 6, 0, 1, 2)]
    assert inbox.size() == 0 and inbox.take(5) == []


def test_two_workers_taking_at_once_never_take_the_same_hint(storage: QueueStorage) -> None:
    HintInbox(open_lane(storage)).put_back([QueuedHint(2, (n,), T0) for n in range(600)])
    taken: list[list[QueuedHint]] = [[], []]
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def take(into: list[QueuedHint]) -> None:
        inbox = HintInbox(open_lane(storage))  # each worker its own connection
        try:
            start.wait()
            while batch := inbox.take(7):
                into.extend(batch)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads) and failures == []
    ids = sorted(hint.task_ids[0] for into in taken for hint in into)
    assert ids == list(range(600))  # each once, none lost


def test_a_hints_time_comes_back_as_the_same_instant_in_utc(storage: QueueStorage) -> None:
    inbox = HintInbox(open_lane(storage))
    at = datetime(2026, 12, 7, 9, 30, 0, 7, tzinfo=timezone(timedelta(hours=2)))
    inbox.put(3, [1], at)
    [hint] = inbox.take(1)
    assert hint.at == at and hint.at.utcoffset() == timedelta(0)
    assert hint.at == datetime(2026, 12, 7, 7, 30, 0, 7, tzinfo=UTC)


def test_a_message_that_is_not_a_hint_is_dropped_and_the_rest_are_taken(
    storage: QueueStorage, caplog: pytest.LogCaptureFixture
) -> None:
    lane = open_lane(storage)
    inbox = HintInbox(lane)
    inbox.put(4, [1], T0)
    lane.storage.enqueue(b"not json")
    lane.storage.enqueue(b'{"round": 4}')
    inbox.put(4, [2], T0)
    assert inbox.take(10) == [QueuedHint(4, (1,), T0), QueuedHint(4, (2,), T0)]
    assert caplog.text.count("a message that is not a hint dropped") == 2 and inbox.size() == 0


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


class UseCases:
    """The use cases the queue's tasks run: hint recording fails ``failures`` times first (the
    database busy past its limit); the sweep's own part is counted."""

    def __init__(self, failures: int = 0) -> None:
        self.recorded: list[list[QueuedHint]] = []
        self.failures = failures
        self.sweeps = 0

    def take_hints(self, hints: list[QueuedHint]) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("database is locked")
        self.recorded.append(hints)

    def sweep(self) -> None:
        self.sweeps += 1

    def background(self) -> BackgroundJobs:
        def nothing(*_args: object) -> None:
            return None

        return BackgroundJobs(
            push=nothing,
            push_retry_at=lambda _round_id: None,
            escalate=nothing,
            verify=nothing,
            take_hints=self.take_hints,
            sweep=self.sweep,
            reconcile=lambda: [],
            run_job=nothing,
        )


def queued_work(storage: QueueStorage, jobs: BackgroundJobs) -> QueuedWork:
    main = make_huey(storage.url, storage.folder, storage.name)
    return QueuedWork(
        main,
        Settings(development=True, data_dir=storage.folder, queue_url=storage.url),
        jobs,
        job_lane=make_huey(storage.url, storage.folder, f"{storage.name}-jobs"),
        hints=HintInbox(open_lane(storage)),
    )


def test_hints_whose_transaction_failed_go_back_to_the_inbox_and_are_taken_again(
    storage: QueueStorage,
) -> None:
    use_cases = UseCases(failures=1)
    work = queued_work(storage, use_cases.background())
    for n in range(5):
        assert work.hint_soon(7, [n], T0)
    huey = work._huey
    # Five hints, one task that takes them: the other four found it asked for.
    assert [task.name for task in huey.pending()] == ["dynaval.take_queued_hints"]
    huey.execute(huey.dequeue())  # fails: the hints go back, and the task is asked for again later
    assert use_cases.recorded == [] and work.hints.size() == 5
    [again] = huey.pending()
    assert again.name == "dynaval.take_queued_hints" and again.eta is not None  # a little later
    huey.execute(huey.dequeue(), timestamp=again.eta)  # when it is due
    assert sorted(hint.task_ids[0] for hint in use_cases.recorded[0]) == [0, 1, 2, 3, 4]
    assert work.hints.size() == 0


def test_a_task_records_a_bounded_number_of_batches_then_asks_again(
    storage: QueueStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_queue, "HINT_BATCH", 3)
    monkeypatch.setattr(task_queue, "HINT_BATCHES_PER_TASK", 2)
    use_cases = UseCases()
    work = queued_work(storage, use_cases.background())
    for n in range(10):
        work.hints.put(8, [n], T0)
    assert work.take_queued_hints() == 6
    assert [len(batch) for batch in use_cases.recorded] == [3, 3]
    huey = work._huey
    assert [task.name for task in huey.pending()] == ["dynaval.take_queued_hints"]  # the rest
    huey.execute(huey.dequeue())
    assert [len(batch) for batch in use_cases.recorded] == [3, 3, 3, 1] and work.hints.size() == 0


def test_the_minutes_sweep_records_hints_whose_task_was_lost_and_clears_its_flag(
    storage: QueueStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed as it took the task (or a consumer of an older version that dropped it)
    leaves the flag set: webhooks ask for no task. The sweep clears it, records the hints and asks
    for the task again while more wait."""
    monkeypatch.setattr(task_queue, "HINT_BATCH", 2)
    monkeypatch.setattr(task_queue, "HINT_BATCHES_PER_TASK", 1)
    use_cases = UseCases()
    work = queued_work(storage, use_cases.background())
    huey = work._huey
    assert huey.put_if_empty(HINTS_FLAG, "1")  # the task it stood for is gone
    for n in range(3):
        assert work.hint_soon(9, [n], T0)
    assert huey.pending_count() == 0  # each webhook found the task asked for
    work.sweep.call_local()
    assert use_cases.recorded == [[QueuedHint(9, (0,), T0), QueuedHint(9, (1,), T0)]]
    assert use_cases.sweeps == 1
    assert [task.name for task in huey.pending()] == ["dynaval.take_queued_hints"]  # the rest
    huey.execute(huey.dequeue())
    assert len(use_cases.recorded) == 2 and work.hints.size() == 0


def test_an_inbox_out_of_reach_does_not_hold_up_the_rest_of_the_sweep(
    storage: QueueStorage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    use_cases = UseCases()
    work = queued_work(storage, use_cases.background())

    def out_of_reach(_limit: int) -> list[QueuedHint]:
        raise OSError("the queue's storage is out of reach")

    monkeypatch.setattr(work.hints, "take", out_of_reach)
    work.sweep.call_local()
    assert use_cases.sweeps == 1 and "could not take the hint inbox's hints" in caplog.text
