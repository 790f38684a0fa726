"""Moving candidates into Label Studio: bulk imports that never import a candidate twice,
and escalation (asking Label Studio for one more annotation on a task)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, or_, update
from sqlmodel import Session, col, select

from dynaval.adapters.orm import AnnotationRow, CandidateRow, GoldItemRow, RoundRow, as_utc, utcnow
from dynaval.domain.errors import Unavailable
from dynaval.domain.policy import DecisionPolicy
from dynaval.service_layer.decisions import WAITING_STATUSES, refresh_decision
from dynaval.service_layer.gold import gold_to_push
from dynaval.service_layer.services import Services
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
    now = utcnow()
    conditions = [
        col(RoundRow.id) == round_id,
        or_(col(RoundRow.push_lease_until).is_(None), col(RoundRow.push_lease_until) < now),
    ]
    if not force:
        conditions.append(or_(col(RoundRow.push_retry_at).is_(None), col(RoundRow.push_retry_at) <= now))
    lease = _new_lease_time(services)
    with services.database.unit_of_work() as session:
        result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            update(RoundRow).where(*conditions).values(push_lease_until=lease)
        )
        session.commit()
        return lease if result.rowcount == 1 else None


def _new_lease_time(services: Services) -> datetime:
    # Random microseconds make each holder's expiry its own: renew and release match on it.
    return utcnow() + timedelta(
        seconds=services.settings.push_lease_s, microseconds=random.randrange(1_000_000)
    )


def _renew_push_lease(services: Services, round_id: int, lease: datetime) -> datetime:
    """Extend this process's lease; raises :class:`PushLeaseLost` when another process took over."""
    renewed = _new_lease_time(services)
    with services.database.unit_of_work() as session:
        result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            update(RoundRow)
            .where(col(RoundRow.id) == round_id, col(RoundRow.push_lease_until) == lease)
            .values(push_lease_until=renewed)
        )
        session.commit()
    if result.rowcount != 1:
        raise PushLeaseLost(f"round {round_id}: another process took the push over")
    return renewed


def push_backoff_s(settings: Settings, failures: int) -> float:
    """The wait before the next push after ``failures`` failed ones in a row (exponential, capped)."""
    if failures <= 0:
        return 0.0
    return float(min(settings.push_retry_max_s, settings.push_retry_base_s * 2 ** min(failures - 1, 30)))


def _record_push_outcome(services: Services, round_id: int, *, failed: bool) -> None:
    with services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, round_id)
        if round_row is None:
            return
        if failed:
            round_row.push_failures += 1
            wait = push_backoff_s(services.settings, round_row.push_failures)
            round_row.push_retry_at = utcnow() + timedelta(seconds=wait * random.uniform(0.8, 1.0))
        elif round_row.push_failures or round_row.push_retry_at is not None:
            round_row.push_failures = 0
            round_row.push_retry_at = None
        else:
            return
        session.add(round_row)
        session.commit()


def _release_push_lease(services: Services, round_id: int, lease: datetime) -> None:
    """Give the lease back, unless it is no longer this process's."""
    with services.database.unit_of_work() as session:
        session.execute(
            update(RoundRow)
            .where(col(RoundRow.id) == round_id, col(RoundRow.push_lease_until) == lease)
            .values(push_lease_until=None)
        )
        session.commit()


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
    lease = _take_push_lease(services, round_id, force=force)
    if lease is None:
        return 0
    holder = _LeaseHolder(lease)
    try:
        pushed = _push_under_lease(services, round_id, progress, holder)
    except Unavailable:
        _record_push_outcome(services, round_id, failed=True)
        raise
    except PushLeaseLost as exc:
        log.warning("%s; it carries on from here", exc)
        return 0
    else:
        _record_push_outcome(services, round_id, failed=False)
        return pushed
    finally:
        _release_push_lease(services, round_id, holder.lease)


@dataclass
class _LeaseHolder:
    lease: datetime


def _push_under_lease(
    services: Services, round_id: int, progress: Callable[[int], None] | None, holder: _LeaseHolder
) -> int:
    pushed = 0
    with services.database.unit_of_work() as session:
        round_row = session.get(RoundRow, round_id)
        if round_row is None or round_row.label_studio_project_id is None:
            return 0
        project_id = round_row.label_studio_project_id
        policy = DecisionPolicy(**round_row.policy)
        overlap = policy.min_votes
    while True:
        holder.lease = _renew_push_lease(services, round_id, holder.lease)
        with services.database.unit_of_work() as session:
            batch = session.exec(
                select(CandidateRow)
                .where(CandidateRow.round_id == round_id, CandidateRow.status == "queued")
                .order_by(col(CandidateRow.submitted_at))
                .limit(services.settings.push_batch_size)
            ).all()
            if not batch:
                return pushed
            gold = gold_to_push(session, round_id, policy, len(batch))
            rows: list[CandidateRow | GoldItemRow] = [*batch, *gold]
            retried = [r.id for r in rows if r.push_attempted_at is not None]
            # No transaction stays open across a Label Studio call (on SQLite it would hold the
            # write lock, and every webhook, for as long as Label Studio takes to answer).
            session.commit()
            # An earlier attempt may have created tasks whose ids never came back: ask first.
            existing = (
                services.label_studio.find_tasks(project_id=project_id, candidate_ids=retried)
                if retried
                else {}
            )
            now = utcnow()
            fresh: list[CandidateRow | GoldItemRow] = []
            adopted: list[CandidateRow | GoldItemRow] = []
            for row in rows:
                task_id = existing.get(row.id)
                if task_id is not None:
                    _mark_pushed(row, task_id, overlap, now)
                    adopted.append(row)
                else:
                    row.push_attempted_at = now
                    fresh.append(row)
                session.add(row)
            _record_first_decisions(session, round_id, adopted)
            session.commit()
            if fresh:
                # Gold items must not sit at a recognisable place among the candidates.
                random.Random(fresh[0].id).shuffle(fresh)
                task_ids = services.label_studio.import_tasks(
                    project_id=project_id,
                    tasks=[{"candidate_id": r.id, **r.inputs} for r in fresh],
                )
                now = utcnow()
                for row, task_id in zip(fresh, task_ids, strict=True):
                    _mark_pushed(row, task_id, overlap, now)
                    session.add(row)
                _record_first_decisions(session, round_id, fresh)
                session.commit()
            pushed += len(batch)
            if progress:
                progress(len(batch))


def _record_first_decisions(session: Session, round_id: int, rows: list[CandidateRow | GoldItemRow]) -> None:
    """A candidate entering validation gets its first decision ("0 of N first votes") on record."""
    round_row = session.get(RoundRow, round_id)
    assert round_row is not None
    for row in rows:
        if isinstance(row, CandidateRow):
            refresh_decision(session, row, round_row, cause="pushed")


def _mark_pushed(row: CandidateRow | GoldItemRow, task_id: int, overlap: int, now: datetime) -> None:
    row.label_studio_task_id = task_id
    row.pushed_at = now
    if isinstance(row, CandidateRow):
        row.status = "in_validation"
        row.wanted_votes = overlap
        row.label_studio_overlap = overlap


def apply_escalations(services: Services, round_id: int) -> int:
    """Raise the task overlap in Label Studio where a decision wants more votes."""
    with services.database.unit_of_work() as session:
        rows = session.exec(
            select(CandidateRow).where(
                CandidateRow.round_id == round_id,
                col(CandidateRow.label_studio_task_id).is_not(None),
                col(CandidateRow.wanted_votes) > col(CandidateRow.label_studio_overlap),
                # A decided candidate that got more votes than its task asked for wants nothing.
                col(CandidateRow.status).in_(WAITING_STATUSES),
            )
        ).all()
        work = []
        for c in rows:
            voters = session.exec(
                select(AnnotationRow.annotator_id)
                .where(AnnotationRow.candidate_id == c.id, col(AnnotationRow.was_cancelled).is_(False))
                .distinct()
            ).all()
            work.append((c.id, c.label_studio_task_id, c.wanted_votes, len(voters)))
    done = 0
    for candidate_id, task_id, wanted, voter_count in work:
        assert task_id is not None
        # Label Studio's queue skips a task marked labelled even after its overlap rises.
        services.label_studio.set_task_overlap(
            task_id=task_id, overlap=wanted, is_labeled=voter_count >= wanted
        )
        with services.database.unit_of_work() as session:
            candidate = session.get(CandidateRow, candidate_id)
            if candidate is not None:
                candidate.label_studio_overlap = max(candidate.label_studio_overlap, wanted)
                session.add(candidate)
                session.commit()
        done += 1
    return done


def push_retry_at(services: Services, round_id: int) -> datetime | None:
    """When the round's next push is due after failed ones (None: no push is waiting for a retry)."""
    with services.database.reading() as session:
        round_row = session.get(RoundRow, round_id)
        if round_row is None or round_row.push_retry_at is None:
            return None
        return as_utc(round_row.push_retry_at)


def background_pass(services: Services) -> None:
    """One pass of the sweep (a periodic task): score leftovers, push and escalate every live round."""
    from dynaval.service_layer.candidates import score_pending

    score_pending(services)
    with services.database.unit_of_work() as session:
        round_ids = [r for r in session.exec(select(RoundRow.id).where(RoundRow.state != "frozen")).all()]
    for round_id in round_ids:
        assert round_id is not None
        try:
            push_pending(services, round_id)
            apply_escalations(services, round_id)
        except Unavailable as exc:
            log.warning("round %s: Label Studio work postponed: %s", round_id, exc.message)
