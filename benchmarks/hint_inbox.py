"""How fast a worker records webhooks' hints queued on the task queue: one queue task and one
transaction per hint (the anchor: the design before the hint inbox, run here by the task
``dynaval.take_hints`` that still records what an older version queued, through today's use case)
against the hint inbox (``dynaval.take_queued_hints``, up to 2,000 hints a transaction), in the
same run, on the same database and queue.

A webhook that finds SQLite's write lock taken queues its hint and answers; a worker records it.
At a DynaSent-sized round (600,000 votes) the worker fell 435,442 hints behind with one queue task
and one write transaction per hint (docs/benchmarks.md). This script:

1. builds the service (the composition root, SQLite and the queue's SQLite file in a temporary
   folder, no Label Studio) with one round and a candidate for each task; half of them were read
   back from Label Studio halfway through the hints (a hint older than that read asks for no
   second read);
2. for each design, queues ``--hints`` hints as webhooks would (one task each, ``--votes`` hints per
   task, shuffled), timing the webhook's side; then runs the queue's tasks as a worker does, one
   after the other, until no hint is left, timing that. The read-back each recording asks for
   (``dynaval.verify_round``) is left in the queue and not run: it is the same for both;
3. checks that both designs left the same tasks waiting, each at its latest hint's time (unless
   that is older than the task's read);
4. prints each design's figures (median of ``--repeats``) and the ratio.

    .venv/bin/python benchmarks/hint_inbox.py --hints 50000
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import REPO_ROOT  # noqa: F401 (puts the repository on the path, for tests.support)
from sqlalchemy import delete, select
from tests.support.rows import candidate_row, round_row

from dynaval.adapters.db.orm import TaskCheckRow, as_utc
from dynaval.adapters.task_queue import QueuedWork
from dynaval.bootstrap import bootstrap
from dynaval.service_layer.services import Services
from dynaval.settings import Settings

LEGACY_TASK = "dynaval.adapters.task_queue.dynaval.take_hints"
"""The name a version before the hint inbox stored with each hint's queue task."""
T0 = datetime(2026, 12, 7, tzinfo=UTC)


def add_round(services: Services) -> int:
    with services.database.unit_of_work() as session:
        row = round_row(name="hints")
        session.add(row)
        session.commit()
        assert row.id is not None
        return row.id


def add_candidates(services: Services, round_id: int, tasks: int, read_at: datetime) -> dict[int, datetime]:
    """A candidate in validation for each task; every other one read back at ``read_at``. Returns
    the reads by task."""
    read = {task: read_at for task in range(2, tasks + 1, 2)}
    with services.database.unit_of_work() as session:
        for task in range(1, tasks + 1):
            session.add(
                candidate_row(
                    round_id=round_id,
                    status="in_validation",
                    label_studio_task_id=task,
                    label_studio_read_at=read.get(task),
                )
            )
        session.commit()
    return read


def hints_for(count: int, votes: int, seed: int) -> list[tuple[int, datetime]]:
    """``count`` hints, ``votes`` per task, in a shuffled order, each at its own time."""
    tasks = [1 + n // votes for n in range(count)]
    random.Random(seed).shuffle(tasks)
    return [(task, T0 + timedelta(milliseconds=n)) for n, task in enumerate(tasks)]


def one_transaction_per_hint(services: Services, round_id: int, hints: list[tuple[int, datetime]]) -> None:
    old_task: Any = services.task_queue._registry.string_to_task(LEGACY_TASK)
    for task_id, at in hints:
        services.task_queue.enqueue(old_task(args=(round_id, [task_id], at.isoformat())))


def hint_inbox(services: Services, round_id: int, hints: list[tuple[int, datetime]]) -> None:
    for task_id, at in hints:
        if not services.work.hint_soon(round_id, [task_id], at):
            raise SystemExit("the queue did not take a hint")


def run_worker(services: Services) -> int:
    """Run the queue's tasks one after the other until none records hints; returns how many ran."""
    queue = services.task_queue
    ran = 0
    while (task := queue.dequeue()) is not None:
        if task.name == "dynaval.verify_round":
            continue  # the read-back: the same for both designs, not measured here
        queue.execute(task)
        ran += 1
    return ran


def waiting(services: Services) -> dict[int, datetime]:
    with services.database.unit_of_work() as session:
        rows = session.execute(select(TaskCheckRow.task_id, TaskCheckRow.requested_at)).all()
    return {int(task): as_utc(at) for task, at in rows}


def forget(services: Services) -> None:
    with services.database.unit_of_work() as session:
        session.execute(delete(TaskCheckRow))
        session.commit()


def measure(
    services: Services,
    round_id: int,
    queue_them: Callable[[Services, int, list[tuple[int, datetime]]], None],
    hints: list[tuple[int, datetime]],
) -> tuple[float, float, int, dict[int, datetime]]:
    forget(services)
    began = time.perf_counter()
    queue_them(services, round_id, hints)
    queued_s = time.perf_counter() - began
    began = time.perf_counter()
    tasks_run = run_worker(services)
    recorded_s = time.perf_counter() - began
    return queued_s, recorded_s, tasks_run, waiting(services)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hints", type=int, default=50_000, help="hints queued per design and repeat")
    parser.add_argument("--votes", type=int, default=5, help="hints per task (a task's votes)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dynaval-hints-") as folder:
        services = bootstrap(Settings(data_dir=Path(folder), development=True))
        if not isinstance(services.work, QueuedWork):
            raise SystemExit("the composition root did not build the task queue")
        round_id = add_round(services)
        hints = hints_for(args.hints, args.votes, seed=7)
        tasks = max(task for task, _at in hints)
        read = add_candidates(services, round_id, tasks, hints[len(hints) // 2][1])
        latest: dict[int, datetime] = {}
        for task_id, at in hints:
            latest[task_id] = max(at, latest.get(task_id, at))
        expected = {task: at for task, at in latest.items() if task not in read or read[task] < at}
        designs = {
            "one transaction per hint (anchor)": one_transaction_per_hint,
            "the hint inbox": hint_inbox,
        }
        figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in designs}
        for repeat in range(args.repeats):
            for name, queue_them in designs.items():
                queued_s, recorded_s, tasks_run, left = measure(services, round_id, queue_them, hints)
                if left != expected:
                    raise SystemExit(f"{name}: the tasks left waiting differ from the hints' latest times")
                figures[name].append((queued_s, recorded_s, tasks_run))
                print(
                    f"  repeat {repeat + 1}, {name}: queued in {queued_s:.1f} s, "
                    f"recorded in {recorded_s:.1f} s by {tasks_run} queue tasks",
                    flush=True,
                )
        print(
            f"\n{args.hints:,} hints for {tasks:,} tasks ({len(expected):,} left waiting), SQLite, "
            f"median of {args.repeats}:"
        )
        print(f"{'design':<36} {'queueing, per hint':>19} {'recording':>11} {'hints/s':>10} {'tasks':>7}")
        medians: dict[str, float] = {}
        for name, runs in figures.items():
            queued = statistics.median(run[0] for run in runs)
            recorded = statistics.median(run[1] for run in runs)
            medians[name] = recorded
            print(
                f"{name:<36} {queued / args.hints * 1e6:>16.0f} us {recorded:>9.1f} s "
                f"{args.hints / recorded:>10,.0f} {runs[-1][2]:>7,}"
            )
        anchor, inbox = medians.values()
        ratio = inbox / anchor
        print(f"\nrecording with the hint inbox: {ratio:.3f}x the anchor's time ({1 / ratio:.0f}x faster)")


if __name__ == "__main__":
    main()
