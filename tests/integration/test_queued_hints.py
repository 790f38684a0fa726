"""A webhook never waits for another writer: while SQLite's write lock is taken (a worker applying a
read-back, in a process of its own), the tasks it names wait in the task queue, and a worker records
them there; nothing is lost when no worker runs, and a queue out of reach makes the webhook wait."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy.engine import make_url
from sqlmodel import select

from dynaval.adapters.db.orm import TaskCheckRow, as_utc
from dynaval.domain.clock import utcnow
from dynaval.service_layer.services import Services
from tests.integration.conftest import PROJECT, RecordedWork
from tests.integration.test_verified_votes import (
    CREATED,
    add_candidate,
    add_round,
    candidate_state,
    ingest_webhook,
    waiting_tasks,
)
from tests.support.label_studio_copy import LabelStudioCopy, annotation_json, webhook

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@contextmanager
def writer_elsewhere(services: Services, *, for_s: float | None = None) -> Iterator[None]:
    """SQLite's write lock, held by a connection of its own (as another process's would be) until
    the block ends, or for ``for_s`` seconds from its start."""
    path = str(make_url(services.database.url).database)
    other = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    releaser = None
    if for_s is not None:
        releaser = threading.Timer(for_s, other.commit)
        releaser.start()
    try:
        yield
    finally:
        if releaser is not None:
            releaser.join()
        else:
            other.commit()
        other.close()


@SQLITE
def test_a_webhook_answered_while_another_process_writes_leaves_its_task_in_the_queue_for_a_worker(
    services: Services, queued: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=21)
    annotation = queued.put(annotation_json(1, 21, 101, "negative"))
    with writer_elsewhere(services):
        began = time.monotonic()
        result = ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
        answered_in = time.monotonic() - began
    assert result.to_dict() == {"action": CREATED, "handled": True, "tasks_to_verify": 1}
    assert answered_in < 5.0  # it did not wait out SQLite's 30 s for the lock
    # Nothing in the database yet: the hint waits in the queue (no worker runs here).
    assert waiting_tasks(services) == []
    queue = services.task_queue
    assert [task.name for task in queue.pending()] == ["dynaval.take_queued_hints"]
    assert services.work.hints.size() == 1
    # A worker takes it: the task waits to be read back and its read is asked for; the read
    # stores the vote.
    queue.execute(queue.dequeue())
    assert waiting_tasks(services) == [21]
    assert [task.name for task in queue.pending()] == ["dynaval.verify_round"]
    queue.execute(queue.dequeue())
    assert queued.reads == [[21]]
    assert candidate_state(services, candidate_id)[2] == [(1, "101", "negative")]
    assert waiting_tasks(services) == []
    assert queue.pending_count() == 0


@SQLITE
def test_a_hint_from_the_queue_keeps_the_webhooks_time(services: Services, queued: LabelStudioCopy) -> None:
    """Recorded by the worker later, the request still carries the time the webhook came: a read
    that started before it does not settle it (what it announced may be missing from that read)."""
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=22)
    annotation = queued.put(annotation_json(2, 22, 102, "positive"))
    before = utcnow()
    with writer_elsewhere(services):
        ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    after = utcnow()
    time.sleep(0.2)
    queue = services.task_queue
    task = queue.dequeue()
    assert task is not None and task.name == "dynaval.take_queued_hints"
    queue.execute(task)
    with services.database.unit_of_work() as session:
        [requested_at] = session.exec(select(TaskCheckRow.requested_at)).all()
    assert before <= as_utc(requested_at) <= after


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_on_postgresql_the_webhook_records_its_task_beside_another_writer(
    services: Services, queued: LabelStudioCopy
) -> None:
    """PostgreSQL locks rows, not the database: a transaction holding the candidate's row does not
    hold the webhook up, which records its task at once (nothing goes to the queue)."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=24)
    annotation = queued.put(annotation_json(4, 24, 104, "negative"))
    with services.uow() as other:
        assert other.candidates.get(candidate_id, for_update=True) is not None
        result = ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    assert result.tasks_to_verify == 1
    assert waiting_tasks(services) == [24]
    assert [task.name for task in services.task_queue.pending()] == ["dynaval.verify_round"]


@SQLITE
def test_with_no_queue_to_take_it_the_webhook_waits_for_the_writer_and_records_its_task(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    assert isinstance(services.work, RecordedWork)  # its hint_soon takes nothing
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=23)
    annotation = label_studio.put(annotation_json(3, 23, 103, "neutral"))
    with writer_elsewhere(services, for_s=0.3):
        result = ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    assert result.tasks_to_verify == 1
    assert services.work.hints == [(round_id, [23])]  # offered to the queue, which took nothing
    assert waiting_tasks(services) == [23]
    assert services.work.verifications == [round_id]


@SQLITE
def test_a_late_hint_never_moves_a_newer_request_back(services: Services, queued: LabelStudioCopy) -> None:
    """A webhook queued its hint at T0; a later one recorded the task itself at T1. The worker that
    records the first hint afterwards leaves T1: a read that started between the two (and so may
    miss the second change) does not settle the task."""
    from dynaval.service_layer.validation import webhooks

    round_id = add_round(services)
    add_candidate(services, round_id, task_id=25)
    t0 = utcnow()
    t1 = t0 + timedelta(seconds=5)
    with services.uow() as uow:
        uow.task_checks.request(round_id, [25], t1)
        uow.commit()
    webhooks.take_hints(services, [(round_id, [25], t0)])
    with services.database.unit_of_work() as session:
        [requested_at] = session.exec(select(TaskCheckRow.requested_at)).all()
    assert as_utc(requested_at) == t1
    with services.uow() as uow:  # a read that started between the two settles nothing
        assert uow.task_checks.settle(round_id, [25], t0 + timedelta(seconds=1)) == 0
        uow.commit()
    assert waiting_tasks(services) == [25]
