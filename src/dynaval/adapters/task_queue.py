"""The task queue adapter: huey, with SQLite storage on one machine and Redis across several.

``DYNAVAL_QUEUE_URL`` picks the storage: empty (the default) is a SQLite file in the data folder,
shared by every process on the machine; ``redis://host:port/db`` is Redis, shared by every machine.

Background work on it: pushes, verification of webhooks, escalations, jobs (training...), the
sweep and the scheduled reconcile. Work is asked for as it arises (:class:`QueuedWork`, the use
cases' ``WorkQueue`` port): a stored candidate asks for a push of its round, a webhook asks for its
task to be read back from Label Studio (verification) and, when the database's write lock was
taken as it came, for a worker to record that request (the hint waits in the hint inbox,
:mod:`dynaval.adapters.hint_inbox`, and ``dynaval.take_queued_hints`` records many in one
transaction), a submitted job asks for a run, a read whose decision wants more votes asks for an
escalation. A push Label Studio fails is tried again when the round's backoff runs out, a
verification Label Studio failed a little later. Once a minute a periodic sweep records hints left
in the inbox, scores candidates a crash left unscored, pushes, verifies and escalates every live
round (the safety net for lost work), and reconciles them every ``DYNAVAL_RECONCILE_INTERVAL_S``.
Every task is idempotent: the push lease, row locks and Label Studio lookups keep several
consumers, on one machine or several, from doing the same work twice. What each task runs is a use
case, handed in by the composition root (:class:`BackgroundJobs`).

Jobs (training, a release's build, an evaluation, the gate) run for minutes: they go to a lane of
their own, a second queue on the same storage (``<name>-jobs``) with its own threads
(``DYNAVAL_JOB_WORKERS``), so that a long job never holds a thread that pushes and webhooks' reads
wait for.

Consumers: one runs in threads inside each service process by default (``DYNAVAL_EMBEDDED_WORKER``),
with its job lane beside it; ``dynaval worker`` runs them on their own, for example on another
machine with ``DYNAVAL_QUEUE_URL`` pointing at a shared Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from huey import Huey, RedisHuey, SqliteHuey, crontab
from huey.consumer import Consumer

from dynaval.adapters.hint_inbox import HintInbox, QueuedHint
from dynaval.domain.errors import DomainError, Unavailable
from dynaval.settings import Settings

log = logging.getLogger(__name__)
CONSUMER_SHUTDOWN_S = 10.0
"""How long a stopping consumer lets its running tasks finish."""
HINT_RETRIES = 5
"""Tries of a hint an older version queued as a task of its own (``dynaval.take_hints``)."""
HINT_RETRY_DELAY_S = 2.0
HINT_BATCH = 2000
"""Hints a worker records in one transaction (a hint names one task, or a deletion's tasks)."""
HINT_BATCHES_PER_TASK = 10
"""Batches one ``take_queued_hints`` task records before it asks for another (and lets the queue's
other tasks in between)."""
HINTS_FLAG = "dynaval:hints-enqueued"
"""Set while a ``take_queued_hints`` task waits in the queue (cleared by the task as it starts, and
by the minute's sweep)."""
LAST_RECONCILE_KEY = "dynaval:last-reconcile"
RECONCILING_KEY = "dynaval:reconciling"
"""Set (to its start time) while a scheduled reconcile runs, on any consumer."""
RECONCILE_STALE_S = 3600.0
"""A reconcile marker older than this (and ten intervals) was left by a consumer that died."""


def make_huey(queue_url: str, data_dir: Path, name: str = "dynaval") -> Huey:
    """The queue for ``queue_url`` (see the module docstring). Task results are not kept."""
    if not queue_url:
        data_dir.mkdir(parents=True, exist_ok=True)
        return SqliteHuey(name=name, filename=str(data_dir / "queue.sqlite3"), results=False)
    if queue_url.startswith(("redis://", "rediss://", "unix://")):
        return RedisHuey(name=name, url=queue_url, results=False)
    raise ValueError(f"DYNAVAL_QUEUE_URL must be empty (SQLite) or a redis:// URL, not {queue_url!r}")


def job_lane(huey: Huey, queue_url: str, data_dir: Path) -> Huey:
    """The queue jobs go to: beside ``huey``, on the same storage, named ``<its name>-jobs``."""
    return make_huey(queue_url, data_dir, f"{huey.name}-jobs")


def hint_lane(huey: Huey, queue_url: str, data_dir: Path) -> Huey:
    """Where the hint inbox keeps its hints: beside ``huey``, on the same storage, named
    ``<its name>-hints``. No consumer reads it (the hints are messages, not tasks)."""
    return make_huey(queue_url, data_dir, f"{huey.name}-hints")


def describe(huey: Huey) -> str:
    """The queue's storage as the logs and ``/health`` name it (no credentials)."""
    return "redis" if isinstance(huey, RedisHuey) else "sqlite"


class EmbeddedConsumer(Consumer):  # type: ignore[misc]
    """A huey consumer running in threads inside a service process (gunicorn worker, dev server).

    Unlike ``huey_consumer`` it leaves the process's signal handlers alone: they belong to the
    server that hosts it. ``stop()`` lets running tasks finish (up to the shutdown timeout).
    """

    def _set_signal_handlers(self) -> None:
        pass


def consumer_options(*, workers: int, periodic: bool) -> dict[str, Any]:
    """How every consumer of the service runs, in its own process or inside another: threads; an
    idle queue polled at most twice a second per thread (huey's default backs off to 10 s, which a
    webhook's read-back would wait); running tasks finish on SIGTERM as on Ctrl-C, for up to 10 s."""
    return {
        "workers": workers,
        "worker_type": "thread",
        "periodic": periodic,
        "initial_delay": 0.05,
        "backoff": 1.5,
        "max_delay": 0.5,
        "check_worker_health": False,
        "shutdown_timeout": CONSUMER_SHUTDOWN_S,
        "graceful_signal": "TERM",
    }


def start_embedded_consumer(
    huey: Huey, *, workers: int, periodic: bool = True, **options: Any
) -> EmbeddedConsumer:
    """A consumer in ``workers`` threads of this process; ``periodic`` runs the minute's sweep too
    (huey runs it at once when the consumer starts, then every minute)."""
    consumer = EmbeddedConsumer(huey, **consumer_options(workers=workers, periodic=periodic), **options)
    consumer.start()
    log.info("task queue consumer started (%s storage, %d threads)", describe(huey), workers)
    return consumer


@dataclass(frozen=True)
class BackgroundJobs:
    """The use cases the queue's tasks run, each for one round (the composition root binds them)."""

    push: Callable[[int], object]
    """Import the round's queued candidates into Label Studio."""
    push_retry_at: Callable[[int], datetime | None]
    """When the round's next push is due after failures (None: not waiting)."""
    escalate: Callable[[int], object]
    """Raise the Label Studio overlap of the round's tasks whose decision wants more votes."""
    verify: Callable[[int], object]
    """Read back from Label Studio the round's tasks that webhooks named."""
    take_hints: Callable[[list[QueuedHint]], object]
    """Record, in one transaction, that webhooks named these tasks at these times (then ask for
    their rounds' reads)."""
    sweep: Callable[[], object]
    """The minute's safety net: score leftovers, push, verify and escalate every live round."""
    reconcile: Callable[[], Iterable[int]]
    """Reconcile every live round with Label Studio; returns the rounds reconciled."""
    run_job: Callable[[int], object]
    """Run a queued job (training...) on this consumer; a job another consumer took is left alone."""


class QueuedWork:
    """The :class:`~dynaval.service_layer.services.WorkQueue` port on huey.

    One request per round waits in the queue at a time: a flag in the queue's key-value store is set
    when a task is enqueued and cleared when it starts, so a burst of 1,000 candidates enqueues one
    push, not 1,000. Enqueueing never fails the caller: if the queue cannot be reached, the
    minute's sweep does the work.
    """

    def __init__(
        self, huey: Huey, settings: Settings, jobs: BackgroundJobs, *, job_lane: Huey, hints: HintInbox
    ) -> None:
        self._huey = huey
        self._settings = settings
        self._jobs = jobs
        self.hints = hints

        @huey.task(name="dynaval.push_round")
        def push_round(round_id: int, retry: bool = False) -> None:
            # From now on a new candidate (or a new failure) asks again.
            huey.get(_flag("push-retry" if retry else "push", round_id))
            try:
                jobs.push(round_id)
            except Unavailable as exc:
                log.warning("round %s: push failed, will retry: %s", round_id, exc.message)
            # Whoever pushed (this task or a concurrent one) failed: try again when the backoff ends.
            retry_at = jobs.push_retry_at(round_id)
            if retry_at is not None and huey.put_if_empty(_flag("push-retry", round_id), "1"):
                try:
                    push_round.schedule((round_id, True), eta=retry_at.astimezone(UTC).replace(tzinfo=None))
                except Exception:
                    huey.get(_flag("push-retry", round_id))  # the sweep retries instead
                    raise

        @huey.task(name="dynaval.escalate_round")
        def escalate_round(round_id: int) -> None:
            huey.get(_flag("escalate", round_id))
            try:
                jobs.escalate(round_id)
            except Unavailable as exc:
                log.warning("round %s: escalation postponed: %s", round_id, exc.message)
                escalate_round.schedule((round_id,), delay=max(1.0, self._settings.push_retry_base_s))

        @huey.task(name="dynaval.verify_round")
        def verify_round_task(round_id: int) -> None:
            # From now on a webhook asks again: its task may be missing from the read that follows.
            huey.get(_flag("verify", round_id))
            try:
                jobs.verify(round_id)
            except Unavailable as exc:
                log.warning("round %s: verification postponed: %s", round_id, exc.message)
                if huey.put_if_empty(_flag("verify", round_id), "1"):
                    verify_round_task.schedule((round_id,), delay=max(1.0, self._settings.push_retry_base_s))

        @huey.task(name="dynaval.take_queued_hints")
        def take_queued_hints() -> None:
            huey.get(HINTS_FLAG)  # from now on a new hint asks again
            self.take_queued_hints()

        # One hint per task, as versions before the hint inbox queued them: what such a version
        # left in the queue is still recorded. Tried again if it fails.
        @huey.task(name="dynaval.take_hints", retries=HINT_RETRIES, retry_delay=HINT_RETRY_DELAY_S)
        def take_hints(round_id: int, task_ids: list[int], at: str) -> None:
            jobs.take_hints([QueuedHint(round_id, tuple(task_ids), datetime.fromisoformat(at))])

        @job_lane.task(name="dynaval.run_job")
        def run_job(job_id: int) -> None:
            huey.get(_flag("job", job_id))  # the flags live in the main queue's store
            jobs.run_job(job_id)

        @huey.periodic_task(crontab(minute="*"), name="dynaval.sweep")
        def sweep() -> None:
            self._sweep_hints()
            try:
                jobs.sweep()
                self._reconcile_when_due(jobs)
            except DomainError as exc:
                log.warning("sweep postponed: %s", exc.message)

        self._push_round = push_round
        self._escalate_round = escalate_round
        self._verify_round = verify_round_task
        self._take_queued_hints = take_queued_hints
        self._run_job = run_job
        self.sweep = sweep

    def push_soon(self, round_id: int) -> None:
        self._enqueue("push", round_id, self._push_round)

    def escalate_soon(self, round_id: int) -> None:
        self._enqueue("escalate", round_id, self._escalate_round)

    def verify_soon(self, round_id: int) -> None:
        # The tasks of the webhooks that come meanwhile gather for one read: at Label Studio's own
        # pace a read of one task costs Label Studio about half an annotation's time, a read of ten
        # hardly more (docs/trust.md).
        delay = self._settings.verify_delay_s
        self._enqueue("verify", round_id, self._verify_round, delay_s=delay)

    def hint_soon(self, round_id: int, task_ids: Collection[int], at: datetime) -> bool:
        # What the webhook says waits in the inbox, not in the database, until a worker records it
        # with the hints beside it. One task takes them: a webhook that finds it asked for (a read,
        # no write) asks for nothing more.
        try:
            self.hints.put(round_id, task_ids, at)
        except Exception as exc:
            log.warning("could not queue the hint of round %s (recorded at once instead): %r", round_id, exc)
            return False
        try:
            asked = self._huey.get(HINTS_FLAG, peek=True) is not None
        except Exception:
            asked = False
        if not asked:
            self._enqueue_flagged(HINTS_FLAG, self._take_queued_hints, ())
        return True

    def _sweep_hints(self) -> None:
        """The sweep's part for the inbox: record what waits there, and clear the flag first. A flag
        that outlived its task (a worker killed as it took it, a consumer of an older version that
        dropped it) would otherwise leave the inbox to this sweep alone; the task is asked for
        again if more wait. A failing inbox never holds up the rest of the sweep."""
        try:
            self._huey.get(HINTS_FLAG)
            self.take_queued_hints()
        except Exception as exc:
            log.warning(
                "the sweep could not take the hint inbox's hints (the next sweep tries again): %r", exc
            )

    def take_queued_hints(self) -> int:
        """Record the inbox's hints, ``HINT_BATCH`` in a transaction, up to ``HINT_BATCHES_PER_TASK``
        batches (then the task is asked for again); returns how many were recorded. Hints whose
        transaction failed go back to the inbox, and their task is asked for again a little later."""
        recorded = 0
        for _batch in range(HINT_BATCHES_PER_TASK):
            hints = self.hints.take(HINT_BATCH)
            if not hints:
                return recorded
            try:
                self._jobs.take_hints(hints)
            except Exception as exc:
                self.hints.put_back(hints)
                log.warning(
                    "%d hints not recorded, taken again in %.0f s: %r", len(hints), HINT_RETRY_DELAY_S, exc
                )
                self._enqueue_flagged(HINTS_FLAG, self._take_queued_hints, (), delay_s=HINT_RETRY_DELAY_S)
                return recorded
            recorded += len(hints)
        self._enqueue_flagged(HINTS_FLAG, self._take_queued_hints, ())  # more may wait
        return recorded

    def run_job_soon(self, job_id: int) -> None:
        self._enqueue("job", job_id, self._run_job)

    def _enqueue(self, kind: str, round_id: int, task: Any, *, delay_s: float = 0.0) -> None:
        self._enqueue_flagged(
            _flag(kind, round_id), task, (round_id,), delay_s=delay_s, what=f"{kind} of round {round_id}"
        )

    def _enqueue_flagged(
        self,
        flag: str,
        task: Any,
        args: tuple[Any, ...],
        *,
        delay_s: float = 0.0,
        what: str = "the hints' recording",
    ) -> None:
        """Enqueue ``task(*args)`` unless its ``flag`` says it waits already (the task clears it)."""
        try:
            if self._huey.put_if_empty(flag, "1"):
                try:
                    if delay_s > 0:
                        task.schedule(args, delay=delay_s)
                    else:
                        task(*args)
                except Exception:
                    self._huey.get(flag)  # not enqueued: the next caller must try again
                    raise
        except Exception as exc:  # the work is not lost: the sweep finds it
            log.warning("could not enqueue %s (the sweep will do it): %r", what, exc)

    def _reconcile_when_due(self, jobs: BackgroundJobs) -> None:
        interval = self._settings.reconcile_interval_s
        if interval <= 0:
            return
        # Every consumer runs the sweep; one of them takes each interval's slot, atomically.
        current = int(time.time() // interval)
        if not self._huey.put_if_empty(f"{LAST_RECONCILE_KEY}:{current}", "1"):
            return
        self._huey.get(f"{LAST_RECONCILE_KEY}:{current - 1}")  # the previous slot's key is done with
        # One scheduled reconcile at a time. On a large round one outlasts the interval (a round of
        # 120,000 tasks: Label Studio exports it for minutes), and the next slot's would start
        # beside it: a second consumer thread waiting on a second export while the webhooks' reads
        # wait for a free thread. That slot is skipped instead.
        began = time.time()
        if not self._huey.put_if_empty(RECONCILING_KEY, began):
            running_since = self._huey.get(RECONCILING_KEY, peek=True)
            if running_since is not None and began - float(running_since) < max(
                RECONCILE_STALE_S, 10 * interval
            ):
                log.info("scheduled reconcile skipped: the previous one is still running")
                return
            self._huey.put(RECONCILING_KEY, began)  # left by a consumer that died mid-reconcile
        try:
            for round_id in jobs.reconcile():
                jobs.escalate(round_id)
        finally:
            self._huey.get(RECONCILING_KEY)


def _flag(kind: str, round_id: int) -> str:
    return f"dynaval:{kind}-enqueued:{round_id}"
