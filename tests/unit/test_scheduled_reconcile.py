"""The scheduled reconcile: one at a time, whatever the interval and however many consumers."""

from __future__ import annotations

import time
from datetime import datetime

from huey import MemoryHuey

from dynaval.adapters.hint_inbox import HintInbox
from dynaval.adapters.task_queue import RECONCILING_KEY, BackgroundJobs, QueuedWork
from dynaval.settings import Settings


def queued_work(
    reconcile: list[int], huey: MemoryHuey, nested: list[QueuedWork]
) -> tuple[QueuedWork, BackgroundJobs]:
    def run_reconcile() -> list[int]:
        reconcile.append(1)
        if len(reconcile) == 1:
            time.sleep(0.02)  # the next interval's slot comes while this reconcile runs
            nested[0]._reconcile_when_due(jobs)
        return []

    def nothing(*_args: object) -> None:
        return None

    def never(_round_id: int) -> datetime | None:
        return None

    jobs = BackgroundJobs(
        push=nothing,
        push_retry_at=never,
        escalate=nothing,
        verify=nothing,
        take_hints=lambda *_hint: None,
        sweep=nothing,
        reconcile=run_reconcile,
        run_job=nothing,
    )
    settings = Settings(development=True, reconcile_interval_s=0.01)
    work = QueuedWork(
        huey,
        settings,
        jobs,
        job_lane=MemoryHuey(immediate=False),
        hints=HintInbox(MemoryHuey(immediate=False)),
    )
    nested.append(work)
    return work, jobs


def test_a_slot_that_comes_while_a_reconcile_runs_is_skipped() -> None:
    huey = MemoryHuey(immediate=False)
    runs: list[int] = []
    work, jobs = queued_work(runs, huey, [])
    work._reconcile_when_due(jobs)
    assert runs == [1]  # the nested slot found the first still running
    assert huey.get(RECONCILING_KEY, peek=True) is None
    time.sleep(0.02)
    work._reconcile_when_due(jobs)
    assert runs == [1, 1]  # once it ended, the next slot runs


def test_a_marker_left_by_a_dead_consumer_is_taken_over() -> None:
    huey = MemoryHuey(immediate=False)
    runs: list[int] = []
    huey.put(RECONCILING_KEY, time.time() - 2 * 3600)
    work, jobs = queued_work(runs, huey, [])
    runs.append(0)  # no nested slot in this test
    work._reconcile_when_due(jobs)
    assert runs == [0, 1]
    assert huey.get(RECONCILING_KEY, peek=True) is None
