"""Moving candidates into Label Studio: bulk imports that never import a candidate twice,
and escalation (asking Label Studio for one more annotation on a task)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Unavailable
from dynaval.domain.images.image import is_image_ref
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.gold import GoldItem, gold_to_mix
from dynaval.domain.validation.round import Round
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork
from dynaval.settings import Settings

log = logging.getLogger(__name__)


class PushLeaseLost(Exception):
    """Another process took the round's push over (this one was too slow to renew its lease)."""


def _take_push_lease(services: Services, round_id: int, *, force: bool) -> datetime | None:
    """Only one process pushes a round at a time: a conditional UPDATE is the lock.

    Returns the lease (its expiry time, which this process alone wrote, doubles as its ticket) or
    None when another process holds it. The lease runs out after ``push_lease_s`` (renewed before
    every batch, only by its holder), so a process killed mid-push holds up the next push that
    long at most. Unless ``force``, a round whose last push failed waits for its ``push_retry_at``.
    """
    lease = _new_lease_time(services)
    with services.uow() as uow:
        taken = uow.rounds.take_push_lease(round_id, lease, now=utcnow(), respect_backoff=not force)
        uow.commit()
    return lease if taken else None


def _new_lease_time(services: Services) -> datetime:
    # Random microseconds make each holder's expiry its own: renew and release match on it.
    return utcnow() + timedelta(
        seconds=services.settings.push_lease_s, microseconds=random.randrange(1_000_000)
    )


def _renew_push_lease(services: Services, round_id: int, lease: datetime) -> datetime:
    """Extend this process's lease; raises :class:`PushLeaseLost` when another process took over."""
    renewed = _new_lease_time(services)
    with services.uow() as uow:
        kept = uow.rounds.renew_push_lease(round_id, lease, renewed)
        uow.commit()
    if not kept:
        raise PushLeaseLost(f"round {round_id}: another process took the push over")
    return renewed


def push_backoff_s(settings: Settings, failures: int) -> float:
    """The wait before the next push after ``failures`` failed ones in a row (exponential, capped)."""
    if failures <= 0:
        return 0.0
    return float(min(settings.push_retry_max_s, settings.push_retry_base_s * 2 ** min(failures - 1, 30)))


def _record_push_outcome(services: Services, round_id: int, *, failed: bool) -> None:
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        if failed:
            round_.push_failures += 1
            wait = push_backoff_s(services.settings, round_.push_failures)
            round_.push_retry_at = utcnow() + timedelta(seconds=wait * random.uniform(0.8, 1.0))
        elif round_.push_failures or round_.push_retry_at is not None:
            round_.push_failures = 0
            round_.push_retry_at = None
        else:
            return
        uow.rounds.save(round_)
        uow.commit()


def _release_push_lease(services: Services, round_id: int, lease: datetime) -> None:
    """Give the lease back, unless it is no longer this process's."""
    with services.uow() as uow:
        uow.rounds.release_push_lease(round_id, lease)
        uow.commit()


def push_pending(
    services: Services,
    round_id: int,
    *,
    progress: Callable[[int], None] | None = None,
    force: bool = False,
) -> int:
    """Import the round's queued candidates into its Label Studio project. Returns how many.

    Each candidate is marked ``push_attempted_at`` (committed) before the import. A candidate
    already marked is looked up in Label Studio by its candidate id first, so a retry after a
    failure or a crash adopts the task that was created instead of importing it again. When Label
    Studio fails, the candidates stay queued and the round waits before the next try, twice as long
    after each failure in a row (``push_retry_base_s`` up to ``push_retry_max_s``); ``force`` (a
    lead's sync) tries at once.
    """
    pushed = 0
    while True:
        lease = _take_push_lease(services, round_id, force=force)
        if lease is None:
            return pushed
        holder = _LeaseHolder(lease)
        try:
            this_time = _push_under_lease(services, round_id, progress, holder)
        except Unavailable:
            _record_push_outcome(services, round_id, failed=True)
            raise
        except PushLeaseLost as exc:
            log.warning("%s; it carries on from here", exc)
            return pushed
        else:
            _record_push_outcome(services, round_id, failed=False)
        finally:
            _release_push_lease(services, round_id, holder.lease)
        pushed += this_time
        # A candidate queued after this push last looked, while it still held the lease, asked for
        # a push that found the lease taken and gave up: it would wait for the minute's sweep.
        # Look once more now that the lease is free.
        if this_time == 0 or not _any_queued(services, round_id):
            return pushed


def _any_queued(services: Services, round_id: int) -> bool:
    with services.uow(read_only=True) as uow:
        return bool(uow.candidates.queued(round_id, 1))


@dataclass
class _LeaseHolder:
    lease: datetime


def _push_under_lease(
    services: Services, round_id: int, progress: Callable[[int], None] | None, holder: _LeaseHolder
) -> int:
    pushed = 0
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
    if round_.label_studio_project_id is None or not round_.is_live:
        return 0  # a frozen round's decisions are final: nothing more goes to Label Studio
    project_id = round_.label_studio_project_id
    policy = round_.decision_policy
    while True:
        holder.lease = _renew_push_lease(services, round_id, holder.lease)
        with services.uow() as uow:
            batch = uow.candidates.queued(round_id, services.settings.push_batch_size)
            if not batch:
                return pushed
            gold = uow.gold.to_push(round_id, gold_to_mix(policy, len(batch)))
            items: list[Candidate | GoldItem] = [*batch, *gold]
            retried = [item.id for item in items if item.push_attempted_at is not None]
            # No transaction stays open across a Label Studio call (on SQLite it would hold the
            # write lock, and every webhook, for as long as Label Studio takes to answer).
            uow.commit()
        # An earlier attempt may have created tasks whose ids never came back: ask first.
        existing = (
            services.label_studio.find_tasks(project_id=project_id, candidate_ids=retried) if retried else {}
        )
        fresh = [item for item in items if item.id not in existing]
        with services.uow() as uow:
            now = utcnow()
            adopted = [item for item in items if item.id in existing]
            for item in adopted:
                _enter_validation(item, existing[item.id], policy.min_votes, round_.policy, now)
            _save_all(uow, adopted)
            for item in fresh:
                item.push_attempted_at = now
            uow.candidates.mark_push_attempted([i.id for i in fresh if isinstance(i, Candidate)], now)
            for item in fresh:
                if isinstance(item, GoldItem):
                    uow.gold.save(item)
            uow.commit()
        if fresh:
            # Gold items must not sit at a recognisable place among the candidates.
            random.Random(fresh[0].id).shuffle(fresh)
            task_ids = services.label_studio.import_tasks(
                project_id=project_id, tasks=[task_data(services, round_, item) for item in fresh]
            )
            with services.uow() as uow:
                now = utcnow()
                for item, task_id in zip(fresh, task_ids, strict=True):
                    _enter_validation(item, task_id, policy.min_votes, round_.policy, now)
                _save_all(uow, fresh)
                uow.commit()
        pushed += len(batch)
        if progress:
            progress(len(batch))


def task_data(services: Services, round_: Round, item: Candidate | GoldItem) -> dict[str, str]:
    """A Label Studio task's data: the item's id and its inputs, blind (no writer, label or model),
    shaped alike for candidates and gold items; an image as its signed URL, which the annotator's
    browser loads from this service without a token."""
    data = {"candidate_id": item.id, **item.inputs}
    if services.catalog.get(round_.task_type).reads_images:
        for name, value in item.inputs.items():
            if is_image_ref(value):
                data[name] = stored_images.image_url(services.settings, value)
    return data


def _enter_validation(
    item: Candidate | GoldItem, task_id: int, overlap: int, policy: dict[str, object], at: datetime
) -> None:
    """The item's task is in Label Studio. A candidate gets its first decision ("0 of N first
    votes") on record."""
    if isinstance(item, Candidate):
        item.enter_validation(task_id=task_id, overlap=overlap, at=at)
        item.decide([], policy, excluded=frozenset(), cause="pushed", at=at)
    else:
        item.enter_validation(task_id=task_id, at=at)


def _save_all(uow: UnitOfWork, items: Sequence[Candidate | GoldItem]) -> None:
    """Save a batch: its candidates with one statement each for rows and history (they were loaded
    in an earlier unit of work, and saving them one by one read each row first: three quarters of
    a push's CPU time), its gold items (a few) one by one."""
    uow.candidates.save_many([item for item in items if isinstance(item, Candidate)])
    for item in items:
        if isinstance(item, GoldItem):
            uow.gold.save(item)


def apply_escalations(services: Services, round_id: int) -> int:
    """Raise the task overlap in Label Studio where a decision wants more votes (never in a frozen
    round: its decisions are final)."""
    with services.uow(read_only=True) as uow:
        if not uow.rounds.get(round_id).is_live:
            return 0
        work = [
            (c.id, c.label_studio_task_id, c.wanted_votes, uow.candidates.voters(c.id))
            for c in uow.candidates.wanting_more_votes(round_id)
        ]
    for candidate_id, task_id, wanted, voter_count in work:
        assert task_id is not None
        # Label Studio's queue skips a task marked labelled even after its overlap rises.
        services.label_studio.set_task_overlap(
            task_id=task_id, overlap=wanted, is_labeled=voter_count >= wanted
        )
        with services.uow() as uow:
            candidate = uow.candidates.get(candidate_id, for_update=True)
            if candidate is not None:
                candidate.record_overlap(wanted)
                uow.candidates.save(candidate)
                uow.commit()
    return len(work)


def push_retry_at(services: Services, round_id: int) -> datetime | None:
    """When the round's next push is due after failed ones (None: no push is waiting for a retry)."""
    with services.uow(read_only=True) as uow:
        return uow.rounds.get(round_id).push_retry_at


def background_pass(services: Services) -> None:
    """One pass of the sweep (a periodic task): score leftovers, push and escalate every live round."""
    from dynaval.service_layer.validation.candidates import score_pending

    score_pending(services)
    with services.uow(read_only=True) as uow:
        round_ids = uow.rounds.live_ids()
    for round_id in round_ids:
        try:
            push_pending(services, round_id)
            apply_escalations(services, round_id)
        except Unavailable as exc:
            log.warning("round %s: Label Studio work postponed: %s", round_id, exc.message)
