"""Gold items: known answers mixed into a round's Label Studio project to check its annotators.

A lead uploads items with known labels. Pushes mix them among the candidates at the round's
``gold_rate``, with task data shaped exactly like a candidate's, so annotators cannot tell them
apart. Every gold answer updates that annotator's gold accuracy; once they have answered
``gold_min_items`` gold items, an accuracy below ``gold_min_accuracy`` excludes them: their votes
stop counting and every decision they took part in is recomputed. Each change is logged, and a
lead can reverse it (the rule then leaves that annotator to the lead).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from dynaval.adapters.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    ExclusionEventRow,
    GoldAnswerRow,
    GoldItemRow,
    RoundRow,
    as_utc,
    utcnow,
)
from dynaval.domain.errors import InvalidInput, NotFound
from dynaval.domain.policy import DecisionPolicy
from dynaval.domain.provenance import pseudonym
from dynaval.domain.text import has_visible_character
from dynaval.service_layer.candidates import validated_inputs
from dynaval.service_layer.decisions import lock_candidate, refresh_decision
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services

MAX_GOLD_ITEMS_PER_REQUEST = 1000
GOLD_RULE = "gold"
LEAD = "lead"


def add_gold_items(services: Services, *, round_id: int, items: object) -> list[str]:
    """Store a lead's gold items (all or none). Returns their ids, in the order given."""
    if not isinstance(items, list) or not items:
        raise InvalidInput("items must be a non-empty list of {text, label} objects", field="items")
    if len(items) > MAX_GOLD_ITEMS_PER_REQUEST:
        raise InvalidInput(f"at most {MAX_GOLD_ITEMS_PER_REQUEST} items per request", field="items")
    with services.database.unit_of_work() as session:
        round_row = get_round(session, round_id)
        rows = []
        for index, item in enumerate(items):
            where = f"items[{index}]"
            if not isinstance(item, dict):
                raise InvalidInput("each item must be an object", field=where)
            inputs = validated_inputs(services, round_row, item, field_prefix=f"{where}.")
            label = item.get("label")
            if not isinstance(label, str) or label not in round_row.labels:
                raise InvalidInput(
                    f"label must be one of: {', '.join(round_row.labels)}", field=f"{where}.label"
                )
            rows.append(GoldItemRow(id=str(uuid.uuid4()), round_id=round_id, inputs=inputs, label=label))
        session.add_all(rows)
        session.commit()
        return [r.id for r in rows]


def gold_item_for_task(session: Session, round_id: int, task_id: int) -> GoldItemRow | None:
    return session.exec(
        select(GoldItemRow).where(
            GoldItemRow.round_id == round_id, GoldItemRow.label_studio_task_id == task_id
        )
    ).first()


@dataclass(frozen=True)
class GoldScore:
    correct: int
    total: int

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.total if self.total else None


def gold_scores(session: Session, round_id: int) -> dict[str, GoldScore]:
    """Each annotator's gold accuracy: their latest non-cancelled answer per gold item."""
    rows = session.exec(
        select(GoldAnswerRow, GoldItemRow.label)
        .join(GoldItemRow, col(GoldItemRow.id) == GoldAnswerRow.gold_item_id)
        .where(GoldAnswerRow.round_id == round_id, col(GoldAnswerRow.was_cancelled).is_(False))
    ).all()
    latest: dict[tuple[str, str], tuple[Any, int, bool]] = {}
    for answer, truth in rows:
        if answer.label is None:
            continue
        key = (answer.annotator_id, answer.gold_item_id)
        stamp = (as_utc(answer.updated_at), answer.id)
        if key not in latest or stamp > latest[key][:2]:
            latest[key] = (*stamp, answer.label == truth)
    scores: dict[str, list[int]] = {}
    for (annotator, _item), (_, _, right) in latest.items():
        tally = scores.setdefault(annotator, [0, 0])
        tally[0] += int(right)
        tally[1] += 1
    return {a: GoldScore(c, t) for a, (c, t) in scores.items()}


def apply_gold_rule(session: Session, round_row: RoundRow, annotators: Iterable[str]) -> int:
    """Exclude or reinstate ``annotators`` by their gold accuracy. Returns decisions changed.

    An annotator whose status a lead set is left to the lead.
    """
    assert round_row.id is not None
    policy = DecisionPolicy(**round_row.policy)
    scores = gold_scores(session, round_row.id)
    changed = 0
    for annotator in sorted(set(annotators)):
        status = session.get(AnnotatorStatusRow, (round_row.id, annotator))
        if status is not None and status.decided_by == LEAD:
            continue
        score = scores.get(annotator, GoldScore(0, 0))
        should_exclude = (
            score.total >= policy.gold_min_items
            and score.accuracy is not None
            and score.accuracy < policy.gold_min_accuracy
        )
        if status is None and not should_exclude:
            continue
        if status is not None and status.excluded == should_exclude:
            continue
        reason = (
            f"gold accuracy {score.correct}/{score.total} below {policy.gold_min_accuracy:g}"
            if should_exclude
            else f"gold accuracy {score.correct}/{score.total} back at or above {policy.gold_min_accuracy:g}"
        )
        changed += _set_status(session, round_row, annotator, should_exclude, GOLD_RULE, reason, score)
    return changed


def _set_status(
    session: Session,
    round_row: RoundRow,
    annotator: str,
    excluded: bool,
    decided_by: str,
    reason: str,
    score: GoldScore,
) -> int:
    assert round_row.id is not None
    status = session.get(AnnotatorStatusRow, (round_row.id, annotator)) or AnnotatorStatusRow(
        round_id=round_row.id, annotator_id=annotator, decided_by=decided_by, reason=reason
    )
    status.excluded = excluded
    status.decided_by = decided_by
    status.reason = reason
    status.changed_at = utcnow()
    session.add(status)
    session.flush()
    candidate_ids = session.exec(
        select(AnnotationRow.candidate_id)
        .where(AnnotationRow.round_id == round_row.id, AnnotationRow.annotator_id == annotator)
        .distinct()
    ).all()
    changed = 0
    for candidate_id in sorted(candidate_ids):
        candidate = lock_candidate(session, candidate_id)
        if candidate is not None:
            changed += int(refresh_decision(session, candidate, round_row, cause=f"{decided_by}-exclusion"))
    session.add(
        ExclusionEventRow(
            round_id=round_row.id,
            annotator_id=annotator,
            excluded=excluded,
            decided_by=decided_by,
            reason=reason,
            gold_correct=score.correct,
            gold_total=score.total,
            decisions_changed=changed,
        )
    )
    return changed


def resolve_annotator(session: Session, services: Services, round_id: int, annotator: str) -> str:
    """The raw Label Studio user id behind a pseudonymous annotator id of this round."""
    secret = services.settings.pseudonym_secret
    known = set(
        session.exec(select(AnnotationRow.annotator_id).where(AnnotationRow.round_id == round_id)).all()
    ) | set(session.exec(select(GoldAnswerRow.annotator_id).where(GoldAnswerRow.round_id == round_id)).all())
    for raw in known:
        if pseudonym(secret, "annotator", raw) == annotator:
            return raw
    raise NotFound("no annotator with this id has answered in this round", field="annotator")


def set_exclusion_by_lead(
    services: Services, *, round_id: int, annotator: str, excluded: object, reason: object
) -> dict[str, Any]:
    """A lead excludes or reinstates an annotator (the gold rule then leaves them alone)."""
    if not isinstance(excluded, bool):
        raise InvalidInput("excluded must be true or false", field="excluded")
    if not isinstance(reason, str) or not has_visible_character(reason):
        raise InvalidInput("a reason is required", field="reason")
    if len(reason) > 2000:
        raise InvalidInput("reason must be at most 2000 characters", field="reason")
    with services.database.unit_of_work() as session:
        round_row = get_round(session, round_id)
        raw = resolve_annotator(session, services, round_id, annotator)
        score = gold_scores(session, round_id).get(raw, GoldScore(0, 0))
        changed = _set_status(session, round_row, raw, excluded, LEAD, reason.strip(), score)
        session.commit()
    if changed:
        services.work.escalate_soon(round_id)  # a vote that stopped counting may leave a task short
    return {"annotator": annotator, "excluded": excluded, "decided_by": LEAD, "decisions_changed": changed}


def annotator_statuses(session: Session, round_id: int) -> dict[str, dict[str, Any]]:
    """Per raw annotator id: gold figures and exclusion, for the round's reports."""
    scores = gold_scores(session, round_id)
    statuses = {
        s.annotator_id: s
        for s in session.exec(select(AnnotatorStatusRow).where(AnnotatorStatusRow.round_id == round_id)).all()
    }
    out: dict[str, dict[str, Any]] = {}
    for annotator in set(scores) | set(statuses):
        score = scores.get(annotator, GoldScore(0, 0))
        status = statuses.get(annotator)
        out[annotator] = {
            "gold_correct": score.correct,
            "gold_total": score.total,
            "gold_accuracy": score.accuracy,
            "excluded": bool(status and status.excluded),
            "excluded_by": status.decided_by if status and status.excluded else None,
            "exclusion_reason": status.reason if status else None,
        }
    return out


def exclusion_log(services: Services, round_id: int) -> list[dict[str, Any]]:
    secret = services.settings.pseudonym_secret
    with services.database.unit_of_work() as session:
        get_round(session, round_id)
        rows = session.exec(
            select(ExclusionEventRow)
            .where(ExclusionEventRow.round_id == round_id)
            .order_by(col(ExclusionEventRow.id))
        ).all()
        return [
            {
                "annotator": pseudonym(secret, "annotator", r.annotator_id),
                "excluded": r.excluded,
                "decided_by": r.decided_by,
                "reason": r.reason,
                "gold_correct": r.gold_correct,
                "gold_total": r.gold_total,
                "decisions_changed": r.decisions_changed,
                "made_at": r.made_at.isoformat(),
            }
            for r in rows
        ]


def gold_to_push(
    session: Session, round_id: int, policy: DecisionPolicy, candidates: int
) -> list[GoldItemRow]:
    """Gold items to mix into a push of ``candidates`` candidates, keeping the round's gold rate."""
    if policy.gold_rate <= 0 or candidates <= 0:
        return []
    wanted = round(candidates * policy.gold_rate / (1 - policy.gold_rate))
    if wanted <= 0:
        return []
    return list(
        session.exec(
            select(GoldItemRow)
            .where(GoldItemRow.round_id == round_id, col(GoldItemRow.label_studio_task_id).is_(None))
            .order_by(col(GoldItemRow.created_at), col(GoldItemRow.id))
            .limit(wanted)
        ).all()
    )
