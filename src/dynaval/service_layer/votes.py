"""Votes in from Label Studio: webhooks as they come, and reconcile for the ones that never came."""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TypeGuard

from sqlalchemy import Insert, Select, Update, and_, bindparam, func, or_, text
from sqlalchemy import insert as sa_insert
from sqlalchemy import select as sa_select
from sqlalchemy import update as sa_update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import ReturningInsert
from sqlmodel import Session, col, delete, select

from dynaval.adapters.label_studio import (
    WEBHOOK_ACTIONS,
    AnnotationFormatError,
    ParsedAnnotation,
    parse_annotation,
)
from dynaval.adapters.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    CandidateRow,
    DecisionRow,
    DeletedAnnotationRow,
    GoldAnswerRow,
    GoldItemRow,
    RoundRow,
    as_utc,
    utcnow,
)
from dynaval.domain.errors import DomainError, InvalidInput, NotFound
from dynaval.domain.votes import AnnotationRecord
from dynaval.service_layer.decisions import (
    evaluate_decision,
    lock_candidate,
    refresh_decision,
    wants_more_annotations,
)
from dynaval.service_layer.gold import apply_gold_rule, gold_item_for_task, store_gold_answer
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services


class WebhookUnauthorized(DomainError):
    code = "unauthorized"


def check_webhook_secret(services: Services, presented: str | None) -> None:
    expected = services.settings.webhook_secret
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise WebhookUnauthorized("missing or wrong webhook secret", field="X-Dynaval-Webhook-Secret")


def _store_annotation(
    connection: Connection, candidate_id: str, round_id: int, parsed: ParsedAnnotation, *, source: str
) -> bool:
    """Insert or update one annotation row (webhook and reconcile alike); returns whether it changed.

    One upsert that only overwrites an older copy of the same candidate's annotation: a late or
    repeated delivery changes nothing, and an annotation id of another candidate is refused.
    """
    statements = _vote_statements(connection.dialect.name)
    written = connection.execute(
        statements.upsert_annotation,
        {
            "id": parsed.annotation_id,
            "candidate_id": candidate_id,
            "round_id": round_id,
            "annotator_id": parsed.annotator_id,
            "label": parsed.label,
            "flagged": parsed.flagged,
            "flag_reason": parsed.reason,
            "was_cancelled": parsed.was_cancelled,
            "lead_time_s": parsed.lead_time_s,
            "created_at": parsed.created_at,
            "updated_at": parsed.updated_at,
            # When it last changed here: the dashboard's figure cache keys on it.
            "received_at": utcnow(),
            "source": source,
        },
    )
    if written.first() is not None:
        return True
    owner = connection.execute(statements.annotation_owner, {"id": parsed.annotation_id}).scalar()
    if owner != candidate_id:
        raise InvalidInput("annotation id belongs to another candidate", field="annotation.id")
    return False


_ANNOTATION_LOCK = text("SELECT pg_advisory_xact_lock(i) FROM unnest(CAST(:ids AS bigint[])) AS i")
"""PostgreSQL: one transaction-scoped lock per Label Studio annotation id, so that the creation and
the deletion of one annotation never interleave (a deletion may come before any row exists)."""


def _is_id(value: object) -> TypeGuard[int]:
    """A Label Studio id: a positive integer that fits the database's 64-bit columns."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


@dataclass
class WebhookResult:
    action: str
    handled: bool
    candidates_changed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "handled": self.handled, "candidates_changed": self.candidates_changed}


def ingest_webhook(services: Services, payload: object) -> WebhookResult:
    """Apply one Label Studio webhook. The raw payload (it carries the project's token) is never stored."""
    if not isinstance(payload, Mapping):
        raise InvalidInput("webhook body must be a JSON object", field="body")
    action = payload.get("action")
    if not isinstance(action, str):
        raise InvalidInput("webhook has no action", field="action")
    if action not in WEBHOOK_ACTIONS:
        return WebhookResult(action=action, handled=False)
    project = payload.get("project")
    project_id = project.get("id") if isinstance(project, Mapping) else None
    if not _is_id(project_id):
        raise InvalidInput("webhook has no project id (a positive integer)", field="project.id")
    database = services.database
    dialect = "sqlite" if database.is_sqlite else "postgresql"
    round_row = services.webhook_rounds.get(project_id)
    if round_row is None:
        with database.reading() as session:
            found = session.execute(
                _vote_statements(dialect).round_by_project, {"project_id": project_id}
            ).first()
        if found is None:
            raise NotFound("no round uses this Label Studio project", field="project.id")
        # A round's project, task type and policy never change: read them once per process.
        round_row = _RoundForVotes(id=found.id, task_type=found.task_type, policy=found.policy)
        services.webhook_rounds[project_id] = round_row
    # Read the annotation before the transaction: a malformed one is refused without waiting for
    # the write lock, and the lock is held only for the statements.
    parsed = None
    if action != "ANNOTATIONS_DELETED":
        parsed = _parse(payload.get("annotation"), services.catalog.get(round_row.task_type))
    with database.transaction() as connection:
        if dialect == "postgresql":
            # Label Studio waits for this answer inside its annotation request; a vote lost to a
            # PostgreSQL crash in the next fraction of a second comes back with the next reconcile.
            connection.execute(text("SET LOCAL synchronous_commit = off"))
        if parsed is None:
            with _session_on(connection) as session:
                round_full = get_round(session, round_row.id)
                changed = _apply_deletions(session, round_full, payload.get("annotations"))
            wants_more_votes = changed > 0  # fewer votes, or an annotator's gold figures changed
        else:
            changed, wants_more_votes = _apply_annotation(connection, round_row, parsed, dialect=dialect)
    if wants_more_votes:
        services.work.escalate_soon(round_row.id)
    return WebhookResult(action=action, handled=True, candidates_changed=changed)


@contextmanager
def _session_on(connection: Connection) -> Iterator[Session]:
    """An ORM session inside the webhook's transaction, for its rare paths (deletions, gold
    answers): its work is a savepoint, kept when the block ends and committed with the webhook."""
    session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield session
        session.commit()  # releases the savepoint; the webhook's transaction commits it
    finally:
        session.close()


def _parse(raw: object, task_type: Any) -> ParsedAnnotation:
    if not isinstance(raw, Mapping):
        raise InvalidInput("webhook has no annotation object", field="annotation")
    try:
        return parse_annotation(raw, task_type)
    except AnnotationFormatError as exc:
        raise InvalidInput(str(exc), field="annotation") from exc


def _apply_annotation(
    connection: Connection, round_row: _RoundForVotes, parsed: ParsedAnnotation, *, dialect: str
) -> tuple[int, bool]:
    """One created or updated annotation: the hot path, a handful of Core statements.

    1. the candidate behind the task, row-locked (``SELECT ... FOR UPDATE`` on PostgreSQL), so
       concurrent votes for one candidate apply one after the other, and whether the annotation
       was deleted already (then this delivery is stale);
    2. one upsert of the annotation that only overwrites an older copy of the same candidate's
       annotation (a late or repeated delivery changes nothing);
    3. one select of each annotator's latest counting annotation, with their exclusion;
    4. when the decision changed: an update of the candidate and one row of decision history.

    Returns the candidates whose decision changed, and whether Label Studio must be asked for
    more annotations (an escalation, or a gold answer that may have excluded an annotator).
    """
    statements = _vote_statements(dialect)
    if dialect == "postgresql":
        # A deletion of this annotation arriving at the same moment waits for us, or we for it
        # (SQLite runs one write transaction at a time anyway).
        connection.execute(_ANNOTATION_LOCK, {"ids": [parsed.annotation_id]})
    candidate = connection.execute(
        statements.candidate_by_task,
        {"task_id": parsed.task_id, "round_id": round_row.id, "annotation_id": parsed.annotation_id},
    ).first()
    if (candidate.deleted if candidate is not None else None) or (
        candidate is None and connection.execute(statements.tombstone, {"id": parsed.annotation_id}).first()
    ):
        return 0, False  # deleted in Label Studio; this delivery was overtaken by the deletion
    if candidate is None:
        with _session_on(connection) as session:
            gold_item = gold_item_for_task(session, round_row.id, parsed.task_id)
            if gold_item is None:
                raise NotFound(
                    "the annotation's task is not a candidate of this round", field="annotation.task"
                )
            store_gold_answer(session, gold_item, parsed)
            session.flush()
            changed = apply_gold_rule(session, get_round(session, round_row.id), [parsed.annotator_id])
        return changed, changed > 0
    if not _store_annotation(connection, candidate.id, round_row.id, parsed, source="webhook"):
        return 0, False  # a repeated or older delivery: the stored votes already say this
    records = []
    excluded = set()
    for vote in connection.execute(statements.votes_of_candidate, {"candidate_id": candidate.id}):
        records.append(
            AnnotationRecord(
                annotation_id=vote.id,
                annotator=vote.annotator_id,
                label=vote.label,
                flagged=vote.flagged,
                reason=vote.flag_reason,
                was_cancelled=vote.was_cancelled,
                updated_at=as_utc(vote.updated_at),
            )
        )
        if vote.excluded:
            excluded.add(vote.annotator_id)
    change = evaluate_decision(
        status=candidate.status,
        override_outcome=candidate.override_outcome,
        stored_decision=candidate.decision,
        writer_label=candidate.writer_label,
        records=records,
        policy=round_row.policy,
        excluded=excluded,
        cause="webhook",
    )
    if change is None:
        return 0, False
    connection.execute(
        statements.update_candidate_decision,
        {
            "candidate_id": candidate.id,
            "status": change.status,
            "decision": change.decision,
            "wanted_votes": change.wanted_votes,
            "decided_at": change.decided_at,
        },
    )
    connection.execute(statements.insert_history, {"candidate_id": candidate.id, **change.history})
    return 1, wants_more_annotations(change.status, change.wanted_votes, candidate.label_studio_overlap)


@dataclass(frozen=True)
class _RoundForVotes:
    id: int
    task_type: str
    policy: dict[str, Any]


@dataclass(frozen=True)
class _VoteStatements:
    round_by_project: Select[Any]
    candidate_by_task: Select[Any]
    upsert_annotation: ReturningInsert[Any]
    annotation_owner: Select[Any]
    votes_of_candidate: Select[Any]
    update_candidate_decision: Update
    insert_history: Insert
    tombstone: Select[Any]


_VOTE_COLUMNS = (
    "id", "round_id", "annotator_id", "label", "flagged", "flag_reason", "was_cancelled", "updated_at",
)  # fmt: skip


@functools.cache
def _vote_statements(dialect: str) -> _VoteStatements:
    """The webhook path's statements, built once per SQL dialect (SQLAlchemy caches their compiled form)."""
    round_table = RoundRow.__table__  # type: ignore[attr-defined]
    candidate = CandidateRow.__table__  # type: ignore[attr-defined]
    annotation = AnnotationRow.__table__  # type: ignore[attr-defined]
    status = AnnotatorStatusRow.__table__  # type: ignore[attr-defined]
    history = DecisionRow.__table__  # type: ignore[attr-defined]
    deleted = DeletedAnnotationRow.__table__  # type: ignore[attr-defined]
    insert_into = sqlite_insert if dialect == "sqlite" else postgresql_insert
    upsert = insert_into(annotation)
    incoming = upsert.excluded
    newer_or_different = or_(
        annotation.c.updated_at < incoming.updated_at,
        and_(
            annotation.c.updated_at == incoming.updated_at,
            or_(
                annotation.c.label.is_distinct_from(incoming.label),
                annotation.c.flagged != incoming.flagged,
                annotation.c.flag_reason.is_distinct_from(incoming.flag_reason),
                annotation.c.was_cancelled != incoming.was_cancelled,
            ),
        ),
    )
    overwritten = (
        "annotator_id", "label", "flagged", "flag_reason", "was_cancelled", "lead_time_s",
        "created_at", "updated_at", "received_at", "source",
    )  # fmt: skip
    # Each annotator's vote only: their latest annotation that counts (the rule of
    # dynaval.domain.votes.current_votes, done by the database), so a candidate that gathered many
    # re-annotations costs no more per webhook than one with a vote per annotator.
    latest = (
        sa_select(
            *(annotation.c[name] for name in _VOTE_COLUMNS),
            func.row_number()
            .over(
                partition_by=annotation.c.annotator_id,
                order_by=(annotation.c.updated_at.desc(), annotation.c.id.desc()),
            )
            .label("rank"),
        )
        .where(
            annotation.c.candidate_id == bindparam("candidate_id"),
            annotation.c.was_cancelled.is_(False),
            or_(annotation.c.label.is_not(None), annotation.c.flagged.is_(True)),
        )
        .subquery("latest")
    )
    return _VoteStatements(
        round_by_project=sa_select(round_table.c.id, round_table.c.task_type, round_table.c.policy).where(
            round_table.c.label_studio_project_id == bindparam("project_id")
        ),
        candidate_by_task=sa_select(
            candidate.c.id,
            candidate.c.writer_label,
            candidate.c.status,
            candidate.c.decision,
            candidate.c.override_outcome,
            candidate.c.label_studio_overlap,
            sa_select(deleted.c.id)
            .where(deleted.c.id == bindparam("annotation_id"))
            .exists()
            .label("deleted"),
        )
        .where(
            candidate.c.label_studio_task_id == bindparam("task_id"),
            candidate.c.round_id == bindparam("round_id"),
        )
        .with_for_update(),
        upsert_annotation=upsert.on_conflict_do_update(
            index_elements=[annotation.c.id],
            set_={name: incoming[name] for name in overwritten},
            # Only a newer copy of the same candidate's annotation overwrites; a returned row then
            # tells a change from a late or repeated delivery or a foreign annotation id (none).
            where=and_(annotation.c.candidate_id == incoming.candidate_id, newer_or_different),
        ).returning(annotation.c.id),
        annotation_owner=sa_select(annotation.c.candidate_id).where(annotation.c.id == bindparam("id")),
        votes_of_candidate=sa_select(*(latest.c[name] for name in _VOTE_COLUMNS), status.c.excluded)
        .select_from(
            latest.outerjoin(
                status,
                and_(status.c.round_id == latest.c.round_id, status.c.annotator_id == latest.c.annotator_id),
            )
        )
        .where(latest.c.rank == 1),
        update_candidate_decision=sa_update(candidate)
        .where(candidate.c.id == bindparam("candidate_id"))
        .values(version=candidate.c.version + 1),
        insert_history=sa_insert(history),
        tombstone=sa_select(deleted.c.id).where(deleted.c.id == bindparam("id")),
    )


def _apply_deletions(session: Session, round_row: RoundRow, raw: object) -> int:
    if not isinstance(raw, list) or not all(isinstance(a, Mapping) and _is_id(a.get("id")) for a in raw):
        raise InvalidInput(
            "annotations must be a list of objects with a positive integer id", field="annotations"
        )
    ids = sorted({int(a["id"]) for a in raw})
    assert round_row.id is not None
    if session.get_bind().dialect.name == "postgresql":
        # In id order, so two deletions never wait for each other in a circle.
        session.execute(_ANNOTATION_LOCK, {"ids": ids})
    # Remember the deletion, so that a creation or update delivered after it changes nothing. Ids
    # stored for another round are not this project's annotations: they are left alone.
    not_new = {
        *session.exec(select(DeletedAnnotationRow.id).where(col(DeletedAnnotationRow.id).in_(ids))).all(),
        *session.exec(
            select(AnnotationRow.id).where(
                col(AnnotationRow.id).in_(ids), AnnotationRow.round_id != round_row.id
            )
        ).all(),
        *session.exec(
            select(GoldAnswerRow.id).where(
                col(GoldAnswerRow.id).in_(ids), GoldAnswerRow.round_id != round_row.id
            )
        ).all(),
    }
    for annotation_id in ids:
        if annotation_id not in not_new:
            session.add(DeletedAnnotationRow(id=annotation_id, round_id=round_row.id))
    session.flush()
    rows = session.exec(
        select(AnnotationRow).where(col(AnnotationRow.id).in_(ids), AnnotationRow.round_id == round_row.id)
    ).all()
    candidate_ids = sorted({r.candidate_id for r in rows})
    changed = 0
    for candidate_id in candidate_ids:
        candidate = lock_candidate(session, candidate_id)
        assert candidate is not None
        session.execute(
            delete(AnnotationRow).where(
                col(AnnotationRow.id).in_(ids), col(AnnotationRow.candidate_id) == candidate_id
            )
        )
        session.flush()
        changed += int(refresh_decision(session, candidate, round_row, cause="webhook"))
    gold_answers = session.exec(
        select(GoldAnswerRow).where(col(GoldAnswerRow.id).in_(ids), GoldAnswerRow.round_id == round_row.id)
    ).all()
    if gold_answers:
        annotators = {a.annotator_id for a in gold_answers}
        session.execute(delete(GoldAnswerRow).where(col(GoldAnswerRow.id).in_([a.id for a in gold_answers])))
        session.flush()
        changed += apply_gold_rule(session, round_row, annotators)
    return changed


@dataclass
class ReconcileReport:
    tasks: int = 0
    annotations_seen: int = 0
    added_or_updated: int = 0
    deleted: int = 0
    decisions_changed: int = 0
    tasks_adopted: int = 0
    gold_tasks: int = 0
    unknown_tasks: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def reconcile_round(
    services: Services, round_id: int, *, progress: Callable[[int, int], None] | None = None
) -> ReconcileReport:
    """Make stored annotations equal Label Studio's for the round, whatever webhooks were lost."""
    with services.database.unit_of_work() as session:
        round_row = get_round(session, round_id)
        project_id = round_row.label_studio_project_id
        task_type = services.catalog.get(round_row.task_type)
    report = ReconcileReport()
    if project_id is None:
        return report
    # The export is a snapshot; webhooks keep coming while it is applied. What changed here after it
    # was taken is newer than the snapshot and stays: an annotation stored since is not "missing",
    # and one deleted since is not brought back.
    exported_at = utcnow()
    exported = list(services.label_studio.export_tasks(project_id=project_id, task_type=task_type))
    report.tasks = len(exported)
    gold_annotators: set[str] = set()
    for done, task in enumerate(exported, start=1):
        with services.database.unit_of_work() as session:
            round_row = get_round(session, round_id)
            gold_item = _gold_item_of_task(session, round_id, task.task_id, task.candidate_id)
            if gold_item is not None:
                report.gold_tasks += 1
                gold_annotators |= _reconcile_gold_answers(
                    session, gold_item, task.annotations, report, exported_at
                )
                session.commit()
                continue
            candidate_id = session.exec(
                select(CandidateRow.id).where(
                    CandidateRow.label_studio_task_id == task.task_id, CandidateRow.round_id == round_id
                )
            ).first()
            if candidate_id is None and task.candidate_id:
                candidate_id = _adopt_task(session, round_id, task.candidate_id, task.task_id, report)
            if candidate_id is None:
                report.unknown_tasks += 1
                continue
            candidate = lock_candidate(session, candidate_id)
            assert candidate is not None
            seen_ids = {parsed.annotation_id for parsed in task.annotations}
            deleted_since = _deleted_since(session, seen_ids, exported_at)
            for parsed in task.annotations:
                report.annotations_seen += 1
                if parsed.annotation_id in deleted_since:
                    continue
                if _store_annotation(
                    session.connection(), candidate.id, candidate.round_id, parsed, source="reconcile"
                ):
                    report.added_or_updated += 1
            _forget_deletions(session, seen_ids - deleted_since)
            stale = session.exec(
                select(AnnotationRow.id).where(
                    AnnotationRow.candidate_id == candidate_id,
                    col(AnnotationRow.id).not_in(seen_ids or {-1}),
                    col(AnnotationRow.received_at) < exported_at,
                )
            ).all()
            if stale:
                session.execute(delete(AnnotationRow).where(col(AnnotationRow.id).in_(stale)))
                report.deleted += len(stale)
            session.flush()
            if refresh_decision(session, candidate, round_row, cause="reconcile"):
                report.decisions_changed += 1
            session.commit()
        if progress:
            progress(done, report.tasks)
    if gold_annotators:
        with services.database.unit_of_work() as session:
            report.decisions_changed += apply_gold_rule(
                session, get_round(session, round_id), gold_annotators
            )
            session.commit()
    return report


def _gold_item_of_task(
    session: Session, round_id: int, task_id: int, data_id: str | None
) -> GoldItemRow | None:
    """The gold item behind a task, adopting the task if its import's answer never came back."""
    gold_item = gold_item_for_task(session, round_id, task_id)
    if gold_item is None and data_id:
        orphan = session.get(GoldItemRow, data_id)
        if orphan is not None and orphan.round_id == round_id and orphan.label_studio_task_id is None:
            orphan.label_studio_task_id = task_id
            orphan.pushed_at = orphan.pushed_at or orphan.push_attempted_at
            session.add(orphan)
            session.flush()
            gold_item = orphan
    return gold_item


def _reconcile_gold_answers(
    session: Session,
    gold_item: GoldItemRow,
    annotations: list[ParsedAnnotation],
    report: ReconcileReport,
    exported_at: datetime,
) -> set[str]:
    """Make the stored answers of one gold item equal Label Studio's export taken at ``exported_at``
    (what changed here since is kept); returns the annotators touched."""
    seen = {a.annotation_id for a in annotations}
    touched = {a.annotator_id for a in annotations}
    deleted_since = _deleted_since(session, seen, exported_at)
    _forget_deletions(session, seen - deleted_since)
    for parsed in annotations:
        report.annotations_seen += 1
        if parsed.annotation_id not in deleted_since and store_gold_answer(session, gold_item, parsed):
            report.added_or_updated += 1
    stale = session.exec(
        select(GoldAnswerRow).where(
            GoldAnswerRow.gold_item_id == gold_item.id,
            col(GoldAnswerRow.id).not_in(seen or {-1}),
            col(GoldAnswerRow.received_at) < exported_at,
        )
    ).all()
    for row in stale:
        touched.add(row.annotator_id)
        session.delete(row)
        report.deleted += 1
    session.flush()
    return touched


def _deleted_since(session: Session, annotation_ids: set[int], moment: datetime) -> set[int]:
    """Which of these annotations a webhook said were deleted at or after ``moment``."""
    if not annotation_ids:
        return set()
    return set(
        session.exec(
            select(DeletedAnnotationRow.id).where(
                col(DeletedAnnotationRow.id).in_(annotation_ids),
                col(DeletedAnnotationRow.deleted_at) >= moment,
            )
        ).all()
    )


def _forget_deletions(session: Session, annotation_ids: set[int]) -> None:
    """Label Studio still has these annotations: whatever deletion we heard of was not theirs."""
    if annotation_ids:
        session.execute(delete(DeletedAnnotationRow).where(col(DeletedAnnotationRow.id).in_(annotation_ids)))


def _adopt_task(
    session: Session, round_id: int, candidate_id: str, task_id: int, report: ReconcileReport
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


def sync_round(
    services: Services, round_id: int, *, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Push what is queued, reconcile every annotation, then apply escalations."""
    from dynaval.service_layer.pushing import apply_escalations, push_pending

    with services.database.unit_of_work() as session:
        get_round(session, round_id)
    pushed = push_pending(services, round_id, force=True)
    report = reconcile_round(services, round_id, progress=progress)
    escalated = apply_escalations(services, round_id)
    return {"round_id": round_id, "pushed": pushed, **report.to_dict(), "escalations_applied": escalated}


def reconcile_live_rounds(services: Services) -> dict[int, ReconcileReport]:
    """Reconcile every round that is not frozen (the scheduled safety net for lost webhooks)."""
    with services.database.unit_of_work() as session:
        round_ids = [r for r in session.exec(select(RoundRow.id).where(RoundRow.state != "frozen")).all()]
    reports = {}
    for round_id in round_ids:
        assert round_id is not None
        reports[round_id] = reconcile_round(services, round_id)
    return reports
