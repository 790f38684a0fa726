"""Votes from Label Studio's own copy, read with the service's key: the only source of truth.

Two reads apply Label Studio's copy of a task to the stored annotations:

- **verification**: the tasks that webhooks named (``task_check``), read in small batches soon
  after the webhooks came (:func:`verify_round`, run by the task queue);
- **reconcile**: every task of a round (:func:`reconcile_round`: ``POST /api/rounds/<id>/sync``,
  ``dynaval sync`` and the scheduled pass), for the webhooks Label Studio lost.

Applying a task's copy makes the stored annotations of its candidate (or gold item) *equal* to it:
an annotation Label Studio has is stored as Label Studio has it, whatever the stored copy's
timestamps say; one it no longer has is removed. Nothing else writes annotations, so no vote, no
deletion and no decision rests on a webhook's content.

Reads race with each other (several consumers, a reconcile beside a verification), so each
candidate and gold item records when the copy it holds was read (the start of the read, under its
row lock): an older read is never applied over a newer one. A request that arrived during a read
is not settled by it (its change may have landed after the read), so the task is read again.

A frozen round's decisions are final. What Label Studio still has for it is stored, but *late*: an
annotation first read after the freeze is kept marked ``late`` (shown, never a vote), a late one is
changed or removed as Label Studio says, and the annotations stored before the freeze stay as they
were, whatever Label Studio now says of them (they are the record the decisions rest on). No decision,
status, escalation or gold-based exclusion changes: gold answers are not read any more, and nothing
is asked of Label Studio.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import Candidate, CandidateStatus
from dynaval.domain.validation.gold import GoldAnswer
from dynaval.domain.validation.votes import AnnotationRecord
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork
from dynaval.service_layer.validation import task_images
from dynaval.service_layer.validation.annotator_exclusion import apply_gold_rule
from dynaval.service_layer.validation.label_studio_port import READ_BATCH_SIZE, ExportedTask, ParsedAnnotation
from dynaval.service_layer.validation.storage import ANNOTATION_FIELDS, VoteWrites

log = logging.getLogger(__name__)


@dataclass
class ReadReport:
    """What applying Label Studio's copy changed (a verification pass or a reconcile)."""

    tasks: int = 0
    annotations_seen: int = 0
    added_or_updated: int = 0
    deleted: int = 0
    decisions_changed: int = 0
    tasks_adopted: int = 0
    gold_tasks: int = 0
    unknown_tasks: int = 0
    """Tasks of the project that are no candidate or gold item of the round."""
    tasks_missing: int = 0
    """Tasks a webhook named that Label Studio no longer has (deleted with their annotations)."""
    newer_read_kept: int = 0
    """Tasks whose stored copy came from a later read than this one: left as they were."""
    late: int = 0
    """Annotations first stored by this read although their round is frozen (marked late)."""
    frozen_kept: int = 0
    """Annotations stored before the round was frozen that Label Studio changed or removed since:
    kept as they were (a frozen round's record does not change)."""

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class _Round:
    id: int
    project_id: int | None
    task_type: TaskType
    policy: dict[str, Any]
    frozen: bool
    """Its decisions are final: what is read is stored late and decides nothing."""


def _round(services: Services, round_id: int) -> _Round:
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
    return _Round(
        id=round_id,
        project_id=round_.label_studio_project_id,
        task_type=services.catalog.get(round_.task_type),
        policy=dict(round_.policy),
        frozen=not round_.is_live,
    )


# --------------------------------------------------------------------------- verification


def verify_round(services: Services, round_id: int, *, batch_size: int = READ_BATCH_SIZE) -> ReadReport:
    """Read back, from Label Studio, the round's tasks that webhooks asked for, and apply them.

    Works through the requests that were waiting when it started, ``batch_size`` tasks per read,
    the longest-waiting first; requests that arrive meanwhile are left to the next run (the
    webhook that made them asked for one). Label Studio unreachable: raises
    :class:`~dynaval.adapters.label_studio.LabelStudioUnavailable` and the requests stay.
    """
    target = _round(services, round_id)
    report = ReadReport()
    if target.project_id is None:
        return report
    started = utcnow()
    while True:
        with services.uow(read_only=True) as uow:
            task_ids = uow.task_checks.pending(round_id, until=started, limit=batch_size)
        if not task_ids:
            break
        read_at = utcnow()
        read = services.label_studio.read_tasks(
            project_id=target.project_id, task_ids=task_ids, task_type=target.task_type
        )
        by_id = {task.task_id: task for task in read}
        report.tasks_missing += sum(1 for task_id in task_ids if task_id not in by_id)
        found = [by_id[t] for t in task_ids if t in by_id]
        _apply_read(services, target, found, read_at, report, "verification")
        with services.uow() as uow:
            uow.task_checks.settle(round_id, task_ids, read_at)
            uow.commit()
        if len(task_ids) < batch_size:
            break
    return report


def verify_pending_rounds(services: Services) -> dict[int, ReadReport]:
    """Verify every round that has tasks waiting (the sweep's safety net for lost queue work)."""
    with services.uow(read_only=True) as uow:
        round_ids = uow.task_checks.rounds_waiting()
    return {round_id: verify_round(services, round_id) for round_id in round_ids}


# ------------------------------------------------------------------------------ reconcile


def reconcile_round(
    services: Services, round_id: int, *, progress: Callable[[int, int], None] | None = None
) -> ReadReport:
    """Make the stored annotations of every task of the round equal Label Studio's, whatever
    webhooks were lost (one export of the project, applied task by task)."""
    target = _round(services, round_id)
    report = ReadReport()
    if target.project_id is None:
        return report
    read_at = utcnow()
    exported = list(
        services.label_studio.export_tasks(project_id=target.project_id, task_type=target.task_type)
    )
    _apply_read(services, target, exported, read_at, report, "reconcile", progress=progress)
    with services.uow() as uow:
        uow.task_checks.settle_round(round_id, read_at)
        uow.commit()
    if not target.frozen:  # annotators may still open its tasks: their images must still load
        task_images.renew_image_urls(services, target.task_type, exported)
    return report


def sync_round(
    services: Services, round_id: int, *, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Push what is queued, reconcile every annotation, then apply escalations."""
    from dynaval.service_layer.validation.pushing import apply_escalations, push_pending

    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)  # an unknown round: a 404 before Label Studio is called
    pushed = push_pending(services, round_id, force=True)
    report = reconcile_round(services, round_id, progress=progress)
    escalated = apply_escalations(services, round_id)
    return {"round_id": round_id, "pushed": pushed, **report.to_dict(), "escalations_applied": escalated}


def reconcile_live_rounds(services: Services) -> dict[int, ReadReport]:
    """Reconcile every round that is not frozen (the scheduled safety net for lost webhooks)."""
    with services.uow(read_only=True) as uow:
        round_ids = uow.rounds.live_ids()
    return {round_id: reconcile_round(services, round_id) for round_id in round_ids}


# --------------------------------------------------------------- applying Label Studio's copy

CHUNK_TASKS = 50
"""Candidates' tasks applied per transaction, by a reconcile and by the read-back of the tasks
webhooks named: enough to amortise the statements (ten a transaction cost the read-back nearly
twice the CPU per vote). A webhook never waits for such a transaction: where SQLite's write lock
is taken it leaves its hint in the inbox (after at most 5 ms for its own process's threads), and
PostgreSQL locks rows."""


def _apply_read(
    services: Services,
    target: _Round,
    tasks: Sequence[ExportedTask],
    read_at: datetime,
    report: ReadReport,
    source: str,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Apply each task's copy: candidates' tasks in chunks, gold items' one by one (they are few);
    then the gold rule for the annotators whose gold answers changed, and escalations."""
    report.tasks += len(tasks)
    with services.uow(read_only=True) as uow:
        kinds = uow.votes.task_kinds(target.id, [t.task_id for t in tasks])
    for task in tasks:
        if task.task_id not in kinds:
            # A frozen round adopts nothing: a task whose import never answered stays unknown.
            kind = None if target.frozen else _adopt(services, target.id, task, report)
            if kind is None:
                report.unknown_tasks += 1
            else:
                kinds[task.task_id] = kind
    links = services.writer_annotators()
    done = 0
    wants_more_votes = False
    candidate_tasks = [t for t in tasks if kinds.get(t.task_id) == "candidate"]
    for start in range(0, len(candidate_tasks), CHUNK_TASKS):
        chunk = candidate_tasks[start : start + CHUNK_TASKS]
        with services.uow() as uow:
            wants_more_votes |= _apply_candidates(uow, target, chunk, read_at, report, source, links)
            uow.commit()
        done += len(chunk)
        if progress:
            progress(done, len(tasks))
    gold_annotators: set[str] = set()
    for task in tasks:
        if kinds.get(task.task_id) != "gold":
            continue
        if target.frozen:
            report.gold_tasks += 1  # a frozen round's exclusions are final: gold answers are not read
            continue
        with services.uow() as uow:
            report.gold_tasks += 1
            gold_annotators |= _apply_gold_answers(uow, target.id, task, read_at, report)
            uow.commit()
        done += 1
        if progress:
            progress(done, len(tasks))
    if gold_annotators:
        changed = apply_gold_rule(services, target.id, gold_annotators)
        report.decisions_changed += changed
        wants_more_votes |= changed > 0
    if wants_more_votes and not target.frozen:
        services.work.escalate_soon(target.id)


def _log_own_vote(candidate: Candidate) -> None:
    own = (candidate.decision or {}).get("own_vote_ignored")
    if own is not None:
        log.warning(
            "candidate %s: its writer %s voted on it as Label Studio user %s; the vote is not counted",
            candidate.id,
            candidate.writer_id,
            own,
        )


def _apply_candidates(
    uow: UnitOfWork,
    target: _Round,
    tasks: Sequence[ExportedTask],
    read_at: datetime,
    report: ReadReport,
    source: str,
    writer_annotators: Mapping[str, str],
) -> bool:
    """Make the stored annotations of these tasks' candidates equal the copies read, and decide
    each again; returns whether Label Studio must be asked for more annotations. In a frozen round
    the copies are stored late and nothing is decided (see the module's notes)."""
    locked = uow.votes.lock_candidates(target.id, [t.task_id for t in tasks])
    if not target.frozen and not uow.rounds.get(target.id).is_live:
        target = replace(target, frozen=True)  # frozen since this read began
    excluded = uow.annotators.excluded(target.id)
    unseen = {
        a.annotation_id
        for t in tasks
        if t.task_id in locked
        for a in t.annotations
        if a.annotation_id not in locked[t.task_id].annotations
    }
    # Label Studio never gives one annotation to two tasks; an id stored for another candidate
    # would be a corrupt read, and is left alone rather than moved.
    foreign = uow.votes.annotation_owners(unseen)
    writes = VoteWrites()
    now = utcnow()
    wants_more_votes = False
    for task in tasks:
        stored = locked.get(task.task_id)
        if stored is None:
            continue
        read_before = stored.candidate.label_studio_read_at
        if read_before is not None and read_before >= read_at:
            report.newer_read_kept += 1
            continue
        report.annotations_seen += len(task.annotations)
        current = dict(stored.annotations)
        incoming = {a.annotation_id: a for a in task.annotations}
        for annotation_id, parsed in incoming.items():
            values = _columns(parsed)
            before = stored.annotations.get(annotation_id)
            if before == values:
                continue
            if target.frozen and before is not None and annotation_id not in stored.late:
                report.frozen_kept += 1
                continue
            if before is None and annotation_id in foreign:
                log.warning(
                    "annotation %s of task %s belongs to another candidate; not moved",
                    annotation_id,
                    task.task_id,
                )
                continue
            row = {"id": annotation_id, **values, "received_at": now, "source": source}
            if before is None:
                writes.inserted.append(
                    {**row, "candidate_id": stored.candidate.id, "round_id": target.id, "late": target.frozen}
                )
                if target.frozen:
                    report.late += 1
            else:
                writes.updated.append(row)
            current[annotation_id] = values
            report.added_or_updated += 1
        for annotation_id in [i for i in stored.annotations if i not in incoming]:
            if target.frozen and annotation_id not in stored.late:
                report.frozen_kept += 1
                continue
            writes.deleted.append(annotation_id)
            del current[annotation_id]
            report.deleted += 1
        candidate = stored.candidate
        if target.frozen:
            candidate.label_studio_read_at = read_at
            writes.read_only.append({"candidate_id": candidate.id, "read_at": read_at})
            continue
        entry = candidate.decide(
            [_record(annotation_id, values) for annotation_id, values in current.items()],
            target.policy,
            excluded=excluded,
            cause=source,
            at=now,
            writer_annotators=writer_annotators,
        )
        candidate.label_studio_read_at = read_at
        if entry is None:
            writes.read_only.append({"candidate_id": candidate.id, "read_at": read_at})
            continue
        _log_own_vote(candidate)
        writes.decisions.append(
            {
                "candidate_id": candidate.id,
                "status": candidate.status.value,
                "decision": candidate.decision,
                "wanted_votes": candidate.wanted_votes,
                "decided_at": candidate.decided_at,
                "read_at": read_at,
            }
        )
        # The entry's values as they are (``asdict`` deep-copies each ballot: a fifth of a read's
        # time); the row is written at once and nothing changes them meanwhile.
        writes.history.append({"candidate_id": candidate.id, **vars(entry)})
        report.decisions_changed += 1
        wants_more_votes |= candidate.wants_more_annotations
    uow.votes.write(writes)
    return wants_more_votes


def _columns(parsed: ParsedAnnotation) -> dict[str, Any]:
    """The stored columns of an annotation as read (those of :data:`ANNOTATION_FIELDS`)."""
    columns = {
        "annotator_id": parsed.annotator_id,
        "label": parsed.label,
        "flagged": parsed.flagged,
        "flag_reason": parsed.reason,
        "was_cancelled": parsed.was_cancelled,
        "lead_time_s": parsed.lead_time_s,
        "created_at": parsed.created_at,
        "updated_at": parsed.updated_at,
    }
    assert tuple(columns) == ANNOTATION_FIELDS
    return columns


def _record(annotation_id: int, values: dict[str, Any]) -> AnnotationRecord:
    return AnnotationRecord(
        annotation_id=annotation_id,
        annotator=values["annotator_id"],
        label=values["label"],
        flagged=values["flagged"],
        reason=values["flag_reason"],
        was_cancelled=values["was_cancelled"],
        updated_at=values["updated_at"],
    )


def _adopt(services: Services, round_id: int, task: ExportedTask, report: ReadReport) -> str | None:
    """A task created by an import whose answer never came back: link it to the candidate or gold
    item its data names. Returns what it now is (``"candidate"`` or ``"gold"``), or None."""
    if not task.candidate_id:
        return None
    with services.uow() as uow:
        overlap = int(uow.rounds.get(round_id).policy["min_votes"])
        now = utcnow()
        candidate = uow.candidates.get(task.candidate_id, for_update=True)
        if (
            candidate is not None
            and candidate.round_id == round_id
            and candidate.label_studio_task_id is None
            and candidate.status is CandidateStatus.QUEUED
        ):
            candidate.enter_validation(task_id=task.task_id, overlap=overlap, at=now)
            uow.candidates.save(candidate)
            uow.commit()
            report.tasks_adopted += 1
            return "candidate"
        item = uow.gold.get(task.candidate_id, for_update=True)
        if item is not None and item.round_id == round_id and item.label_studio_task_id is None:
            item.enter_validation(task_id=task.task_id, at=item.push_attempted_at or now)
            uow.gold.save(item)
            uow.commit()
            return "gold"
    return None


def _apply_gold_answers(
    uow: UnitOfWork, round_id: int, task: ExportedTask, read_at: datetime, report: ReadReport
) -> set[str]:
    """Make one gold item's stored answers equal the task's copy; returns the annotators touched."""
    item = uow.gold.by_task(round_id, task.task_id)
    assert item is not None
    item = uow.gold.get(item.id, for_update=True)
    assert item is not None
    if item.label_studio_read_at is not None and item.label_studio_read_at >= read_at:
        report.newer_read_kept += 1
        return set()
    report.annotations_seen += len(task.annotations)
    stored = {a.annotation_id: a for a in uow.gold.answers_of_item(item.id)}
    touched: set[str] = set()
    now = utcnow()
    for parsed in task.annotations:
        answer = GoldAnswer(
            annotation_id=parsed.annotation_id,
            gold_item_id=item.id,
            annotator=parsed.annotator_id,
            label=parsed.label,
            was_cancelled=parsed.was_cancelled,
            updated_at=parsed.updated_at,
        )
        before = stored.get(parsed.annotation_id)
        if before == answer:
            continue
        if before is not None:
            touched.add(before.annotator)  # an answer moved to another annotator changes both
        uow.gold.put_answer(round_id, answer, received_at=now)
        touched.add(answer.annotator)
        report.added_or_updated += 1
    seen = {a.annotation_id for a in task.annotations}
    for annotation_id, before in stored.items():
        if annotation_id not in seen:
            touched.add(before.annotator)
            uow.gold.delete_answer(annotation_id)
            report.deleted += 1
    item.label_studio_read_at = read_at
    uow.gold.save(item)
    return touched
