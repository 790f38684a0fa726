"""Recompute one candidate's decision from its stored annotations, inside a unit of work."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from dynaval.adapters.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    CandidateRow,
    DecisionRow,
    RoundRow,
    utcnow,
)
from dynaval.domain.decision import Decision, Outcome, decide
from dynaval.domain.policy import DecisionPolicy
from dynaval.domain.votes import AnnotationRecord, current_ballots

VALIDATION_STATUSES = frozenset(o.value for o in Outcome)
WAITING_STATUSES = frozenset(o.value for o in Outcome if not o.is_final)
"""Statuses of a candidate that waits for more votes: only these make Label Studio ask for more."""


def wants_more_annotations(status: str, wanted_votes: int, label_studio_overlap: int) -> bool:
    """Whether Label Studio must be asked for more annotations of the candidate's task. A decided
    candidate never is, even when it got more votes than its task asked for."""
    return status in WAITING_STATUSES and wanted_votes > label_studio_overlap


def lock_candidate(session: Session, candidate_id: str) -> CandidateRow | None:
    """Load a candidate with a row lock (PostgreSQL) so concurrent votes serialise on it."""
    statement = select(CandidateRow).where(CandidateRow.id == candidate_id).with_for_update()
    return session.exec(statement).first()


def annotation_records(session: Session, candidate_id: str) -> list[AnnotationRecord]:
    rows = session.exec(select(AnnotationRow).where(AnnotationRow.candidate_id == candidate_id)).all()
    return annotation_records_of(rows)


def annotation_records_of(rows: Iterable[AnnotationRow]) -> list[AnnotationRecord]:
    """The domain's view of stored annotation rows."""
    return [
        AnnotationRecord(
            annotation_id=r.id,
            annotator=r.annotator_id,
            label=r.label,
            flagged=r.flagged,
            reason=r.flag_reason,
            was_cancelled=r.was_cancelled,
            updated_at=r.updated_at,
        )
        for r in rows
    ]


def excluded_annotators(session: Session, round_id: int) -> frozenset[str]:
    """Annotators whose votes do not count in the round (poor gold accuracy, or a lead said so)."""
    rows = session.exec(
        select(AnnotatorStatusRow.annotator_id).where(
            AnnotatorStatusRow.round_id == round_id, col(AnnotatorStatusRow.excluded).is_(True)
        )
    ).all()
    return frozenset(rows)


@dataclass(frozen=True)
class DecisionChange:
    """A candidate's new decision, ready to be written to the candidate and its history."""

    status: str
    decision: dict[str, Any]
    wanted_votes: int
    decided_at: datetime | None
    history: dict[str, Any]
    """The :class:`DecisionRow` columns (without the candidate id)."""


def evaluate_decision(
    *,
    status: str,
    override_outcome: str | None,
    stored_decision: dict[str, Any] | None,
    writer_label: str,
    records: Iterable[AnnotationRecord],
    policy: dict[str, Any],
    excluded: Collection[str],
    cause: str,
) -> DecisionChange | None:
    """The round's rule applied to a candidate's annotations; None when nothing would change.

    A candidate a lead overrode keeps the lead's outcome: its votes are still stored, but the rule
    no longer decides it. Candidates not yet in validation are left alone too.
    """
    if status not in VALIDATION_STATUSES or override_outcome is not None:
        return None
    ballots = current_ballots(records)
    decision: Decision = decide(ballots, writer_label, DecisionPolicy(**policy), excluded=excluded)
    ballot_dicts = [
        {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
        for b in ballots
    ]
    figures = decision.to_dict()
    stored = {**figures, "ballots": ballot_dicts}
    if stored_decision == stored and status == decision.outcome.value:
        return None
    now = utcnow()
    return DecisionChange(
        status=decision.outcome.value,
        decision=stored,
        wanted_votes=decision.wanted_votes,
        decided_at=now if decision.outcome.is_final else None,
        history={
            "outcome": decision.outcome.value,
            "rule_version": decision.rule_version,
            "policy": dict(policy),
            "ballots": ballot_dicts,
            "figures": figures,
            "cause": cause,
            "made_at": now,
        },
    )


def refresh_decision(session: Session, candidate: CandidateRow, round_row: RoundRow, *, cause: str) -> bool:
    """Apply the round's rule to the candidate's current votes; record it if anything changed.

    Returns whether the decision changed. The caller commits.
    """
    if candidate.status not in VALIDATION_STATUSES or candidate.override_outcome is not None:
        return False
    change = evaluate_decision(
        status=candidate.status,
        override_outcome=candidate.override_outcome,
        stored_decision=candidate.decision,
        writer_label=candidate.writer_label,
        records=annotation_records(session, candidate.id),
        policy=round_row.policy,
        excluded=excluded_annotators(session, candidate.round_id),
        cause=cause,
    )
    if change is None:
        return False
    candidate.status = change.status
    candidate.decision = change.decision
    candidate.wanted_votes = change.wanted_votes
    candidate.decided_at = change.decided_at
    candidate.version += 1
    session.add(candidate)
    session.add(DecisionRow(candidate_id=candidate.id, **change.history))
    return True


def decision_history(session: Session, candidate_id: str) -> list[DecisionRow]:
    statement = (
        select(DecisionRow).where(DecisionRow.candidate_id == candidate_id).order_by(col(DecisionRow.id))
    )
    return list(session.exec(statement).all())


def override_record(candidate: CandidateRow) -> dict[str, Any] | None:
    """A lead's override of the candidate's decision as the API and the dataset show it, or None."""
    if candidate.override_outcome is None:
        return None
    return {
        "outcome": candidate.override_outcome,
        "reason": candidate.override_reason,
        "by": candidate.override_by,
        "at": candidate.override_at.isoformat() if candidate.override_at else None,
    }
