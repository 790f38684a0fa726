"""A candidate is imported into Label Studio exactly once, whatever failed on the way.

The real use cases run against the session's real Label Studio and a real database (SQLite and
PostgreSQL). The services are built with ``bootstrap`` only, never ``create_app``, so no background
worker pushes behind the test's back.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dynaval.adapters.db.orm import CandidateRow, RoundRow, as_utc, utcnow
from dynaval.adapters.label_studio import LabelStudioUnavailable
from dynaval.bootstrap import bootstrap
from dynaval.domain.errors import Unavailable
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import candidates, pushing, rounds
from dynaval.service_layer.validation.pushing import push_pending
from tests.fixtures.service import free_port, make_settings
from tests.support.label_studio_server import LabelStudioServer

pytestmark = pytest.mark.labelstudio


class Harness:
    """Services wired to the real Label Studio, and helpers to look at both sides."""

    def __init__(self, services: Services, server: LabelStudioServer, settings_args: dict[str, Any]) -> None:
        self.services = services
        self.server = server
        self.settings_args = settings_args
        self.round_id = 0
        self.project_id = 0

    def new_round(self) -> None:
        row = rounds.create_round(
            self.services, name="push idempotency", task="sentiment", model="default", policy=None
        )
        assert row.id is not None and row.label_studio_project_id is not None
        self.round_id, self.project_id = row.id, row.label_studio_project_id

    def submit(self, n: int) -> list[str]:
        ids = []
        for i in range(n):
            row = candidates.submit_candidate(
                self.services,
                round_id=self.round_id,
                candidate=candidates.NewCandidate(
                    inputs=candidates.GivenInputs({"text": f"push test text {i}"}), writer_label="positive"
                ),
                submitter=candidates.Submitter("writer-ana"),
            )
            assert row.status == "queued"  # the tiny model says neutral: fooled
            ids.append(row.id)
        return ids

    def rows(self) -> dict[str, CandidateRow]:
        """The round's candidates as stored: id -> row."""
        with self.services.database.unit_of_work() as session:
            found = session.exec(select(CandidateRow).where(CandidateRow.round_id == self.round_id)).all()
            return {c.id: c for c in found}

    def mark_attempted(self, candidate_id: str) -> None:
        """What push_pending commits before it calls Label Studio's import."""
        with self.services.database.unit_of_work() as session:
            row = session.get(CandidateRow, candidate_id)
            assert row is not None
            row.push_attempted_at = utcnow()
            session.add(row)
            session.commit()

    def project_tasks(self) -> dict[int, dict[str, Any]]:
        """Every task of the round's project: task id -> data."""
        return {
            int(t.id): dict(t.data)
            for t in self.server.client.tasks.list(project=self.project_id, page_size=1000)
            if t.id is not None
        }

    def tasks_per_candidate(self) -> Counter[str]:
        return Counter(str(data.get("candidate_id")) for data in self.project_tasks().values())


@pytest.fixture
def harness(
    database_url: str, tmp_path: Path, label_studio_server: LabelStudioServer, tiny_model_dir: Path
) -> Iterator[Harness]:
    args: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": tmp_path / "data",
        "label_studio_url": label_studio_server.url,
        "label_studio_api_key": label_studio_server.api_key,
        "public_url": f"http://127.0.0.1:{free_port()}",  # nobody listens: webhooks are lost
        "model_dir": tiny_model_dir,
    }
    services = bootstrap(make_settings(**args))
    harness = Harness(services, label_studio_server, args)
    harness.new_round()
    try:
        yield harness
    finally:
        services.close()


def test_a_lost_import_answer_is_adopted_not_imported_again(harness: Harness) -> None:
    lost, crashed, fresh = harness.submit(3)

    # `lost`: the import reached Label Studio but its answer never came back.
    response = harness.server.client.projects.import_tasks(
        id=harness.project_id,
        request=[{"candidate_id": lost, "text": harness.rows()[lost].inputs["text"]}],
        return_task_ids=True,
    )
    assert response.task_ids is not None and len(response.task_ids) == 1
    existing_task = int(response.task_ids[0])
    harness.mark_attempted(lost)
    # `crashed`: marked, but the process died before the import was sent.
    harness.mark_attempted(crashed)

    assert push_pending(harness.services, harness.round_id) == 3

    rows = harness.rows()
    assert rows[lost].status == "in_validation"
    assert rows[lost].label_studio_task_id == existing_task  # adopted
    assert rows[lost].wanted_votes == 2 and rows[lost].label_studio_overlap == 2
    for candidate_id in (crashed, fresh):
        assert rows[candidate_id].status == "in_validation"
        assert rows[candidate_id].label_studio_task_id not in (None, existing_task)
    tasks = harness.project_tasks()
    assert harness.tasks_per_candidate() == Counter({lost: 1, crashed: 1, fresh: 1})
    assert {r.label_studio_task_id for r in rows.values()} == set(tasks)
    for row in rows.values():
        assert row.label_studio_task_id is not None
        assert tasks[row.label_studio_task_id] == {"candidate_id": row.id, **row.inputs}

    # Nothing is left to push, and pushing again imports nothing.
    assert push_pending(harness.services, harness.round_id) == 0
    assert harness.tasks_per_candidate() == Counter({lost: 1, crashed: 1, fresh: 1})


def test_label_studio_unreachable_keeps_candidates_queued_then_imports_once(harness: Harness) -> None:
    ids = harness.submit(4)
    before = harness.rows()

    down_args = {**harness.settings_args, "label_studio_url": f"http://127.0.0.1:{free_port()}"}
    down = bootstrap(make_settings(**down_args, label_studio_timeout_s=5, push_retry_base_s=30))
    try:
        with pytest.raises(Unavailable) as raised:
            push_pending(down, harness.round_id)
        assert isinstance(raised.value, LabelStudioUnavailable)
        failures, wait_s = push_backoff_state(harness)
        assert failures == 1 and 0.8 * 30 - 1 <= wait_s <= 30
        # The round waits before trying again: a push before then does nothing.
        assert push_pending(down, harness.round_id) == 0
        # A lead's sync tries at once (now a lookup of the attempted ones); it fails the same way,
        # and the wait doubles.
        with pytest.raises(LabelStudioUnavailable):
            push_pending(down, harness.round_id, force=True)
        failures, wait_s = push_backoff_state(harness)
        assert failures == 2 and 0.8 * 60 - 1 <= wait_s <= 60
    finally:
        down.close()

    after_failure = harness.rows()
    assert set(after_failure) == set(ids)  # nothing lost
    for candidate_id in ids:
        row = after_failure[candidate_id]
        assert row.status == "queued"
        assert row.label_studio_task_id is None and row.pushed_at is None
        assert row.push_attempted_at is not None  # so the next push asks Label Studio first
        assert row.inputs == before[candidate_id].inputs
    assert harness.project_tasks() == {}
    with harness.services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, harness.round_id)
        assert round_row is not None and round_row.push_lease_until is None  # the lease was released

    # Label Studio answers again: every candidate is imported, once, and the backoff is over.
    assert push_pending(harness.services, harness.round_id, force=True) == 4
    assert push_backoff_state(harness) == (0, None)
    rows = harness.rows()
    assert all(rows[c].status == "in_validation" for c in ids)
    assert harness.tasks_per_candidate() == Counter(dict.fromkeys(ids, 1))
    assert {r.label_studio_task_id for r in rows.values()} == set(harness.project_tasks())
    assert push_pending(harness.services, harness.round_id) == 0
    assert len(harness.project_tasks()) == 4


def push_backoff_state(harness: Harness) -> tuple[int, float | None]:
    """The round's failed pushes in a row, and how many seconds from now it waits before the next."""
    with harness.services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, harness.round_id)
        assert round_row is not None
        retry_at = round_row.push_retry_at
        wait = (as_utc(retry_at) - datetime.now(UTC)).total_seconds() if retry_at is not None else None
        return round_row.push_failures, wait


def set_lease(harness: Harness, until: datetime | None) -> None:
    with harness.services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, harness.round_id)
        assert round_row is not None
        round_row.push_lease_until = until
        session.add(round_row)
        session.commit()


def test_a_push_lease_held_elsewhere_blocks_the_push_until_it_expires(harness: Harness) -> None:
    ids = harness.submit(2)
    set_lease(harness, utcnow() + timedelta(minutes=1))  # another process is pushing this round
    assert push_pending(harness.services, harness.round_id) == 0
    assert harness.project_tasks() == {}
    assert all(r.status == "queued" and r.push_attempted_at is None for r in harness.rows().values())

    set_lease(harness, utcnow() - timedelta(seconds=1))  # that process died; its lease ran out
    assert push_pending(harness.services, harness.round_id) == 2
    assert harness.tasks_per_candidate() == Counter(dict.fromkeys(ids, 1))


def test_concurrent_pushes_import_each_candidate_once(harness: Harness) -> None:
    ids = harness.submit(6)
    start = threading.Barrier(3)

    def push() -> int:
        start.wait()
        return push_pending(harness.services, harness.round_id)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = [f.result() for f in [pool.submit(push) for _ in range(3)]]

    assert sum(results) == 6
    assert harness.tasks_per_candidate() == Counter(dict.fromkeys(ids, 1))
    assert all(r.status == "in_validation" for r in harness.rows().values())


def test_a_lease_taken_over_stops_the_slow_holder_and_its_release_spares_the_new_one(
    harness: Harness,
) -> None:
    services, rid = harness.services, harness.round_id
    slow = pushing._take_push_lease(services, rid, force=False)
    assert slow is not None
    assert pushing._take_push_lease(services, rid, force=False) is None  # held
    set_lease(harness, utcnow() - timedelta(seconds=1))  # the slow holder let it run out
    fresh = pushing._take_push_lease(services, rid, force=False)
    assert fresh is not None and fresh != slow
    with pytest.raises(pushing.PushLeaseLost):
        pushing._renew_push_lease(services, rid, slow)
    pushing._release_push_lease(services, rid, slow)  # the slow holder's finally: a no-op now
    with services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, rid)
        assert round_row is not None and round_row.push_lease_until is not None
        assert as_utc(round_row.push_lease_until) == fresh
    pushing._release_push_lease(services, rid, fresh)
    with services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, rid)
        assert round_row is not None and round_row.push_lease_until is None
