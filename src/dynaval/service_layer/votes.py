"""Votes in from Label Studio: webhooks as they come, and reconcile for the ones that never came."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sqlmodel import Session, col, delete, select

from dynaval.adapters.label_studio import (
    WEBHOOK_ACTIONS,
    AnnotationFormatError,
    ParsedAnnotation,
    parse_annotation,
)
from dynaval.adapters.orm import (
    AnnotationRow,
    CandidateRow,
    GoldAnswerRow,
    GoldItemRow,
    RoundRow,
    as_utc,
    utcnow,
)
from dynaval.domain.errors import DomainError, InvalidInput, NotFound
from dynaval.service_layer.decisions import lock_candidate, refresh_decision
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
    session: Session, candidate: CandidateRow, parsed: ParsedAnnotation, *, source: str
) -> bool:
    """Insert or update one annotation row; an older copy never overwrites a newer one."""
    row = session.get(AnnotationRow, parsed.annotation_id)
    if row is not None and row.candidate_id != candidate.id:
        raise InvalidInput("annotation id belongs to another candidate", field="annotation.id")
    if row is not None and as_utc(row.updated_at) > as_utc(parsed.updated_at):
        return False  # a late, older delivery
    values: dict[str, Any] = {
        "annotator_id": parsed.annotator_id,
        "label": parsed.label,
        "flagged": parsed.flagged,
        "flag_reason": parsed.reason,
        "was_cancelled": parsed.was_cancelled,
        "lead_time_s": parsed.lead_time_s,
        "created_at": parsed.created_at,
        "updated_at": parsed.updated_at,
    }
    if row is None:
        session.add(
            AnnotationRow(
                id=parsed.annotation_id,
                candidate_id=candidate.id,
                round_id=candidate.round_id,
                source=source,
                **values,
            )
        )
        return True
    same_content = all(getattr(row, k) == v for k, v in values.items() if not k.endswith("_at"))
    if same_content and as_utc(row.updated_at) == as_utc(parsed.updated_at):
        return False
    for key, value in values.items():
        setattr(row, key, value)
    row.source = source
    row.received_at = utcnow()  # when it last changed here: the dashboard's figure cache keys on it
    session.add(row)
    return True


@dataclass
class WebhookResult:
    action: str
    handled: bool
    candidates_changed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    if not isinstance(project_id, int) or isinstance(project_id, bool):
        raise InvalidInput("webhook has no project id", field="project.id")
    with services.database.unit_of_work() as session:
        round_row = session.exec(
            select(RoundRow).where(RoundRow.label_studio_project_id == project_id)
        ).first()
        if round_row is None:
            raise NotFound("no round uses this Label Studio project", field="project.id")
        task_type = services.catalog.get(round_row.task_type)
        if action == "ANNOTATIONS_DELETED":
            changed = _apply_deletions(session, round_row, payload.get("annotations"))
        else:
            changed = _apply_annotation(session, round_row, task_type, payload.get("annotation"))
        session.commit()
        return WebhookResult(action=action, handled=True, candidates_changed=changed)


def _apply_annotation(session: Session, round_row: RoundRow, task_type: Any, raw: object) -> int:
    if not isinstance(raw, Mapping):
        raise InvalidInput("webhook has no annotation object", field="annotation")
    try:
        parsed = parse_annotation(raw, task_type)
    except AnnotationFormatError as exc:
        raise InvalidInput(str(exc), field="annotation") from exc
    candidate_id = session.exec(
        select(CandidateRow.id).where(
            CandidateRow.label_studio_task_id == parsed.task_id, CandidateRow.round_id == round_row.id
        )
    ).first()
    if candidate_id is None:
        gold_item = gold_item_for_task(session, round_row.id or 0, parsed.task_id)
        if gold_item is None:
            raise NotFound("the annotation's task is not a candidate of this round", field="annotation.task")
        store_gold_answer(session, gold_item, parsed)
        session.flush()
        return apply_gold_rule(session, round_row, [parsed.annotator_id])
    candidate = lock_candidate(session, candidate_id)
    assert candidate is not None
    _store_annotation(session, candidate, parsed, source="webhook")
    session.flush()
    return int(refresh_decision(session, candidate, round_row, cause="webhook"))


def _apply_deletions(session: Session, round_row: RoundRow, raw: object) -> int:
    if not isinstance(raw, list) or not all(
        isinstance(a, Mapping) and isinstance(a.get("id"), int) for a in raw
    ):
        raise InvalidInput("annotations must be a list of objects with an integer id", field="annotations")
    ids = [int(a["id"]) for a in raw]
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
    exported = list(services.label_studio.export_tasks(project_id=project_id, task_type=task_type))
    report.tasks = len(exported)
    gold_annotators: set[str] = set()
    for done, task in enumerate(exported, start=1):
        with services.database.unit_of_work() as session:
            round_row = get_round(session, round_id)
            gold_item = _gold_item_of_task(session, round_id, task.task_id, task.candidate_id)
            if gold_item is not None:
                report.gold_tasks += 1
                gold_annotators |= _reconcile_gold_answers(session, gold_item, task.annotations, report)
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
            seen_ids = set()
            for parsed in task.annotations:
                seen_ids.add(parsed.annotation_id)
                report.annotations_seen += 1
                if _store_annotation(session, candidate, parsed, source="reconcile"):
                    report.added_or_updated += 1
            stale = session.exec(
                select(AnnotationRow.id).where(
                    AnnotationRow.candidate_id == candidate_id, col(AnnotationRow.id).not_in(seen_ids or {-1})
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
    session: Session, gold_item: GoldItemRow, annotations: list[ParsedAnnotation], report: ReconcileReport
) -> set[str]:
    """Make the stored answers of one gold item equal Label Studio's; returns the annotators touched."""
    seen = {a.annotation_id for a in annotations}
    touched = {a.annotator_id for a in annotations}
    for parsed in annotations:
        report.annotations_seen += 1
        if store_gold_answer(session, gold_item, parsed):
            report.added_or_updated += 1
    stale = session.exec(
        select(GoldAnswerRow).where(
            GoldAnswerRow.gold_item_id == gold_item.id, col(GoldAnswerRow.id).not_in(seen or {-1})
        )
    ).all()
    for row in stale:
        touched.add(row.annotator_id)
        session.delete(row)
        report.deleted += 1
    session.flush()
    return touched


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
    pushed = push_pending(services, round_id)
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
