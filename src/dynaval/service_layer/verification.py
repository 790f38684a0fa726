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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection
from sqlmodel import Session, select

from dynaval.adapters import task_checks, vote_store
from dynaval.adapters.label_studio import READ_BATCH_SIZE, ExportedTask, ParsedAnnotation
from dynaval.adapters.orm import (
    CandidateRow,
    GoldAnswerRow,
    GoldItemRow,
    RoundRow,
    as_utc,
    utcnow,
)
from dynaval.domain.task_type import TaskType
from dynaval.domain.votes import AnnotationRecord
from dynaval.service_layer.decisions import evaluate_decision, wants_more_annotations
from dynaval.service_layer.gold import apply_gold_rule, gold_item_for_task
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services

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

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


ReconcileReport = ReadReport


@dataclass(frozen=True)
class _Round:
    id: int
    project_id: int | None
    task_type: TaskType
    policy: dict[str, Any]


def _round(services: Services, round_id: int) -> _Round:
    with services.database.reading() as session:
        round_row = get_round(session, round_id)
        return _Round(
            id=round_id,
            project_id=round_row.label_studio_project_id,
            task_type=services.catalog.get(round_row.task_type),
            policy=dict(round_row.policy),
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
        with services.database.reading() as session:
            task_ids = task_checks.pending_tasks(
                session.connection(), round_id, until=started, limit=batch_size
            )
        if not task_ids:
            break
        read_at = utcnow()
        read = services.label_studio.read_tasks(
            project_id=target.project_id, task_ids=task_ids, task_type=target.task_type
        )
        by_id = {task.task_id: task for task in read}
        report.tasks_missing += sum(1 for task_id in task_ids if task_id not in by_id)
        _apply_read(
            services, target, [by_id[t] for t in task_ids if t in by_id], read_at, report, "verification"
        )
        with services.database.transaction() as connection:
            task_checks.settle_checks(connection, round_id, task_ids, read_at)
        if len(task_ids) < batch_size:
            break
    return report


def verify_pending_rounds(services: Services) -> dict[int, ReadReport]:
    """Verify every round that has tasks waiting (the sweep's safety net for lost queue work)."""
    with services.database.reading() as session:
        round_ids = task_checks.rounds_with_pending_checks(session.connection())
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
    with services.database.transaction() as connection:
        task_checks.settle_round(connection, round_id, read_at)
    return report


def sync_round(
    services: Services, round_id: int, *, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Push what is queued, reconcile every annotation, then apply escalations."""
    from dynaval.service_layer.pushing import apply_escalations, push_pending

    with services.database.reading() as session:
        get_round(session, round_id)
    pushed = push_pending(services, round_id, force=True)
    report = reconcile_round(services, round_id, progress=progress)
    escalated = apply_escalations(services, round_id)
    return {"round_id": round_id, "pushed": pushed, **report.to_dict(), "escalations_applied": escalated}


def reconcile_live_rounds(services: Services) -> dict[int, ReadReport]:
    """Reconcile every round that is not frozen (the scheduled safety net for lost webhooks)."""
    with services.database.reading() as session:
        round_ids = [r for r in session.exec(select(RoundRow.id).where(RoundRow.state != "frozen")).all()]
    reports = {}
    for round_id in round_ids:
        assert round_id is not None
        reports[round_id] = reconcile_round(services, round_id)
    return reports


# --------------------------------------------------------------- applying Label Studio's copy

CHUNK_TASKS = 50
"""Candidates' tasks applied per transaction: enough to amortise the statements, few enough that a
webhook waiting for SQLite's write lock waits a few milliseconds."""


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
    with services.database.reading() as session:
        kinds = vote_store.task_kinds(session.connection(), target.id, [t.task_id for t in tasks])
    for task in tasks:
        if task.task_id not in kinds:
            kind = _adopt(services, target.id, task, report)
            if kind is None:
                report.unknown_tasks += 1
            else:
                kinds[task.task_id] = kind
    done = 0
    wants_more_votes = False
    candidate_tasks = [t for t in tasks if kinds.get(t.task_id) == "candidate"]
    for start in range(0, len(candidate_tasks), CHUNK_TASKS):
        chunk = candidate_tasks[start : start + CHUNK_TASKS]
        with services.database.transaction() as connection:
            wants_more_votes |= _apply_candidates(connection, target, chunk, read_at, report, source)
        done += len(chunk)
        if progress:
            progress(done, len(tasks))
    gold_annotators: set[str] = set()
    for task in tasks:
        if kinds.get(task.task_id) != "gold":
            continue
        with services.database.unit_of_work() as session:
            gold_item = gold_item_for_task(session, target.id, task.task_id)
            assert gold_item is not None
            report.gold_tasks += 1
            gold_annotators |= _apply_gold_answers(session, gold_item, task.annotations, read_at, report)
            session.commit()
        done += 1
        if progress:
            progress(done, len(tasks))
    if gold_annotators:
        with services.database.unit_of_work() as session:
            changed = apply_gold_rule(session, get_round(session, target.id), gold_annotators)
            session.commit()
        report.decisions_changed += changed
        wants_more_votes |= changed > 0
    if wants_more_votes:
        services.work.escalate_soon(target.id)


def _apply_candidates(
    connection: Connection,
    target: _Round,
    tasks: Sequence[ExportedTask],
    read_at: datetime,
    report: ReadReport,
    source: str,
) -> bool:
    """Make the stored annotations of these tasks' candidates equal the copies read, and decide
    each again; returns whether Label Studio must be asked for more annotations."""
    locked = vote_store.lock_candidates(connection, target.id, [t.task_id for t in tasks])
    excluded = vote_store.excluded_annotators(connection, target.id)
    unseen = {
        a.annotation_id
        for t in tasks
        if t.task_id in locked
        for a in t.annotations
        if a.annotation_id not in locked[t.task_id].annotations
    }
    # Label Studio never gives one annotation to two tasks; an id stored for another candidate
    # would be a corrupt read, and is left alone rather than moved.
    foreign = vote_store.annotation_owners(connection, unseen)
    writes = vote_store.VoteWrites()
    now = utcnow()
    wants_more_votes = False
    for task in tasks:
        candidate = locked.get(task.task_id)
        if candidate is None:
            continue
        if candidate.read_at is not None and candidate.read_at >= read_at:
            report.newer_read_kept += 1
            continue
        report.annotations_seen += len(task.annotations)
        current = dict(candidate.annotations)
        incoming = {a.annotation_id: a for a in task.annotations}
        for annotation_id, parsed in incoming.items():
            values = _columns(parsed)
            stored = candidate.annotations.get(annotation_id)
            if stored == values:
                continue
            if stored is None and annotation_id in foreign:
                log.warning(
                    "annotation %s of task %s belongs to another candidate; not moved",
                    annotation_id,
                    task.task_id,
                )
                continue
            row = {"id": annotation_id, **values, "received_at": now, "source": source}
            if stored is None:
                writes.inserted.append({**row, "candidate_id": candidate.id, "round_id": target.id})
            else:
                writes.updated.append(row)
            current[annotation_id] = values
            report.added_or_updated += 1
        for annotation_id in [i for i in candidate.annotations if i not in incoming]:
            writes.deleted.append(annotation_id)
            del current[annotation_id]
            report.deleted += 1
        change = evaluate_decision(
            status=candidate.status,
            override_outcome=candidate.override_outcome,
            stored_decision=candidate.decision,
            writer_label=candidate.writer_label,
            records=[_record(annotation_id, values) for annotation_id, values in current.items()],
            policy=target.policy,
            excluded=excluded,
            cause=source,
        )
        if change is None:
            writes.read_only.append({"candidate_id": candidate.id, "read_at": read_at})
            continue
        writes.decisions.append(
            {
                "candidate_id": candidate.id,
                "status": change.status,
                "decision": change.decision,
                "wanted_votes": change.wanted_votes,
                "decided_at": change.decided_at,
                "read_at": read_at,
            }
        )
        writes.history.append({"candidate_id": candidate.id, **change.history})
        report.decisions_changed += 1
        wants_more_votes |= wants_more_annotations(
            change.status, change.wanted_votes, candidate.label_studio_overlap
        )
    vote_store.write(connection, writes)
    return wants_more_votes


def _columns(parsed: ParsedAnnotation) -> dict[str, Any]:
    """The stored columns of an annotation as read (those of :data:`vote_store.ANNOTATION_FIELDS`)."""
    return {
        "annotator_id": parsed.annotator_id,
        "label": parsed.label,
        "flagged": parsed.flagged,
        "flag_reason": parsed.reason,
        "was_cancelled": parsed.was_cancelled,
        "lead_time_s": parsed.lead_time_s,
        "created_at": parsed.created_at,
        "updated_at": parsed.updated_at,
    }


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
    with services.database.unit_of_work() as session:
        if _adopt_task(session, round_id, task.candidate_id, task.task_id, report) is not None:
            session.commit()
            return "candidate"
        if _gold_item_of_task(session, round_id, task) is not None:
            session.commit()
            return "gold"
    return None


def _adopt_task(
    session: Session, round_id: int, candidate_id: str, task_id: int, report: ReadReport
) -> str | None:
    """A task created by an import whose answer never came back: link it to its candidate."""
    candidate = session.get(CandidateRow, candidate_id)
    if candidate is None or candidate.round_id != round_id or candidate.label_studio_task_id is not None:
        return None
    overlap = int(get_round(session, round_id).policy["min_votes"])
    candidate.label_studio_task_id = task_id
    candidate.status = "in_validation"
    candidate.wanted_votes = overlap
    candidate.label_studio_overlap = overlap
    session.add(candidate)
    session.flush()
    report.tasks_adopted += 1
    return candidate.id


def _gold_item_of_task(session: Session, round_id: int, task: ExportedTask) -> GoldItemRow | None:
    """The gold item behind a task, adopting the task if its import's answer never came back."""
    gold_item = gold_item_for_task(session, round_id, task.task_id)
    if gold_item is None and task.candidate_id:
        orphan = session.get(GoldItemRow, task.candidate_id)
        if orphan is not None and orphan.round_id == round_id and orphan.label_studio_task_id is None:
            orphan.label_studio_task_id = task.task_id
            orphan.pushed_at = orphan.pushed_at or orphan.push_attempted_at
            session.add(orphan)
            session.flush()
            gold_item = orphan
    return gold_item


def _apply_gold_answers(
    session: Session,
    gold_item: GoldItemRow,
    annotations: Sequence[ParsedAnnotation],
    read_at: datetime,
    report: ReadReport,
) -> set[str]:
    """Make one gold item's stored answers equal the task's copy; returns the annotators touched."""
    locked = session.exec(select(GoldItemRow).where(GoldItemRow.id == gold_item.id).with_for_update()).one()
    if locked.label_studio_read_at is not None and as_utc(locked.label_studio_read_at) >= read_at:
        report.newer_read_kept += 1
        return set()
    report.annotations_seen += len(annotations)
    stored = {
        row.id: row
        for row in session.exec(select(GoldAnswerRow).where(GoldAnswerRow.gold_item_id == locked.id)).all()
    }
    incoming = {parsed.annotation_id: parsed for parsed in annotations}
    touched: set[str] = set()
    now = utcnow()
    for annotation_id, parsed in incoming.items():
        row = stored.get(annotation_id)
        same = row is not None and (
            row.annotator_id,
            row.label,
            row.was_cancelled,
            as_utc(row.updated_at),
        ) == (parsed.annotator_id, parsed.label, parsed.was_cancelled, parsed.updated_at)
        if same:
            continue
        if row is None:
            row = GoldAnswerRow(
                id=annotation_id,
                gold_item_id=locked.id,
                round_id=locked.round_id,
                annotator_id=parsed.annotator_id,
                updated_at=parsed.updated_at,
            )
        else:
            touched.add(row.annotator_id)  # an answer moved to another annotator changes both
        row.annotator_id = parsed.annotator_id
        row.label = parsed.label
        row.was_cancelled = parsed.was_cancelled
        row.updated_at = parsed.updated_at
        row.received_at = now
        session.add(row)
        touched.add(parsed.annotator_id)
        report.added_or_updated += 1
    for annotation_id, row in stored.items():
        if annotation_id not in incoming:
            touched.add(row.annotator_id)
            session.delete(row)
            report.deleted += 1
    locked.label_studio_read_at = read_at
    session.add(locked)
    session.flush()
    return touched
