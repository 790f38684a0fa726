"""Whose votes count: the gold rule excludes an annotator whose gold accuracy is too low, and a lead
may exclude or reinstate anyone (the rule then leaves that annotator to the lead).

Every change is logged with the gold figures of the moment, and every decision the annotator took
part in is made again at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import NotFound
from dynaval.domain.provenance import pseudonym
from dynaval.domain.validation.gold import (
    AnnotatorStatus,
    DecidedBy,
    ExclusionEvent,
    GoldScore,
    gold_scores,
    gold_verdict,
)
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork


def apply_gold_rule(services: Services, round_id: int, annotators: Iterable[str]) -> int:
    """Exclude or reinstate ``annotators`` by their gold accuracy. Returns the decisions changed.
    A frozen round's exclusions are final: the rule leaves them alone."""
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        if not round_.is_live:
            return 0
        scores = gold_scores(uow.gold.answers(round_id))
        changed = 0
        for annotator in sorted(set(annotators)):
            score = scores.get(annotator, GoldScore(0, 0))
            verdict = gold_verdict(score, round_.decision_policy, uow.annotators.status(round_id, annotator))
            if verdict is not None:
                excluded, reason = verdict
                changed += _set_status(
                    uow,
                    round_id,
                    annotator,
                    excluded,
                    DecidedBy.GOLD,
                    reason,
                    score,
                    services.writer_annotators(),
                )
        uow.commit()
    return changed


def set_exclusion_by_lead(
    services: Services, *, round_id: int, annotator: str, excluded: bool, reason: str
) -> dict[str, Any]:
    """A lead excludes or reinstates an annotator (the gold rule then leaves them alone). The
    request model checked ``reason``: readable text, stored NFC, as it goes into the log. Refused
    (409) in a frozen round: its decisions are final."""
    with services.uow() as uow:
        uow.rounds.get(round_id).check_decisions_may_change()
        raw = _raw_annotator(services, uow, round_id, annotator)
        score = gold_scores(uow.gold.answers(round_id)).get(raw, GoldScore(0, 0))
        changed = _set_status(
            uow, round_id, raw, excluded, DecidedBy.LEAD, reason, score, services.writer_annotators()
        )
        uow.commit()
    if changed:
        services.work.escalate_soon(round_id)  # a vote that stopped counting may leave a task short
    return {
        "annotator": annotator,
        "excluded": excluded,
        "decided_by": DecidedBy.LEAD.value,
        "decisions_changed": changed,
    }


def _raw_annotator(services: Services, uow: UnitOfWork, round_id: int, annotator: str) -> str:
    """The raw Label Studio user id behind a pseudonymous annotator id of this round."""
    secret = services.settings.pseudonym_secret
    for raw in uow.candidates.annotators(round_id):
        if pseudonym(secret, "annotator", raw) == annotator:
            return raw
    raise NotFound("no annotator with this id has answered in this round", field="annotator")


def _set_status(
    uow: UnitOfWork,
    round_id: int,
    annotator: str,
    excluded: bool,
    decided_by: DecidedBy,
    reason: str,
    score: GoldScore,
    writer_annotators: Mapping[str, str],
) -> int:
    """Record the annotator's status and the event, and make every decision they took part in again."""
    now = utcnow()
    uow.annotators.set_status(round_id, AnnotatorStatus(annotator, excluded, decided_by, reason, now))
    policy = uow.rounds.get(round_id).policy
    excluded_now = uow.annotators.excluded(round_id)
    changed = 0
    for candidate_id in uow.candidates.annotated_by(round_id, annotator):
        candidate = uow.candidates.get(candidate_id, for_update=True)
        if candidate is None:
            continue
        entry = candidate.decide(
            uow.candidates.annotations(candidate_id),
            policy,
            excluded=excluded_now,
            cause=f"{decided_by.value}-exclusion",
            at=now,
            writer_annotators=writer_annotators,
        )
        if entry is not None:
            uow.candidates.save(candidate)
            changed += 1
    uow.annotators.log(
        ExclusionEvent(
            round_id=round_id,
            annotator=annotator,
            excluded=excluded,
            decided_by=decided_by,
            reason=reason,
            gold_correct=score.correct,
            gold_total=score.total,
            decisions_changed=changed,
            made_at=now,
        )
    )
    return changed


def annotator_statuses(uow: UnitOfWork, round_id: int) -> dict[str, dict[str, Any]]:
    """Per raw annotator id: gold figures and exclusion, for the round's reports."""
    scores = gold_scores(uow.gold.answers(round_id))
    statuses = uow.annotators.statuses(round_id)
    out: dict[str, dict[str, Any]] = {}
    for annotator in set(scores) | set(statuses):
        score = scores.get(annotator, GoldScore(0, 0))
        status = statuses.get(annotator)
        out[annotator] = {
            "gold_correct": score.correct,
            "gold_total": score.total,
            "gold_accuracy": score.accuracy,
            "excluded": bool(status and status.excluded),
            "excluded_by": status.decided_by.value if status and status.excluded else None,
            "exclusion_reason": status.reason if status else None,
        }
    return out


def exclusion_log(services: Services, round_id: int) -> list[dict[str, Any]]:
    """Every exclusion and reinstatement of the round, oldest first, by pseudonymous annotator."""
    secret = services.settings.pseudonym_secret
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)
        events = uow.annotators.events(round_id)
    return [
        {
            "annotator": pseudonym(secret, "annotator", e.annotator),
            "excluded": e.excluded,
            "decided_by": e.decided_by.value,
            "reason": e.reason,
            "gold_correct": e.gold_correct,
            "gold_total": e.gold_total,
            "decisions_changed": e.decisions_changed,
            "made_at": e.made_at.isoformat(),
        }
        for e in events
    ]
