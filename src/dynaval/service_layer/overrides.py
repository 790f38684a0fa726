"""A lead overrides a candidate's decision, with a reason; every override goes to the audit log.

The candidate's status becomes the lead's outcome and stays so: later votes are still stored, but
the rule no longer decides an overridden candidate (see :func:`decisions.refresh_decision`). An
override to ``accepted`` puts the candidate in the round dataset; one to ``rejected`` takes it out.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from dynaval.adapters.orm import AuditEventRow, DecisionRow, utcnow
from dynaval.domain.decision import Outcome
from dynaval.domain.errors import Conflict, InvalidInput, NotFound
from dynaval.domain.text import has_visible_character, normalised
from dynaval.domain.votes import current_ballots
from dynaval.service_layer.candidates import candidate_public
from dynaval.service_layer.decisions import annotation_records, lock_candidate
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services

OVERRIDE_OUTCOMES = (Outcome.ACCEPTED.value, Outcome.REJECTED.value)
OVERRIDE = "override"
OVERRIDE_RULE_VERSION = "lead-override/1"
MAX_REASON_CHARS = 2000
NOT_YET_VALIDATED = frozenset({"scoring", "queued"})


def check_override(outcome: object, reason: object) -> tuple[str, str]:
    """The outcome and the stripped reason, or :class:`InvalidInput` naming the bad field."""
    if not isinstance(outcome, str) or outcome not in OVERRIDE_OUTCOMES:
        raise InvalidInput(f"outcome must be one of: {', '.join(OVERRIDE_OUTCOMES)}", field="outcome")
    # The reason goes into the dataset's provenance: readable text, stored NFC.
    if not isinstance(reason, str) or not has_visible_character(reason):
        raise InvalidInput("a reason is required", field="reason")
    reason = normalised(reason).strip()
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(f"reason must be at most {MAX_REASON_CHARS} characters", field="reason")
    return outcome, reason


def override_decision(
    services: Services, *, candidate_id: str, outcome: object, reason: object, by: str
) -> dict[str, Any]:
    """Set a candidate's outcome as a lead decided; returns the candidate as the API shows it.

    Refused (and nothing written) for a bad outcome or a missing reason, an unknown candidate,
    a candidate not yet in validation (still being scored or waiting to be pushed: the push would
    race with the override) and a frozen round.
    """
    checked_outcome, checked_reason = check_override(outcome, reason)
    with services.database.unit_of_work() as session:
        candidate = lock_candidate(session, candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        round_row = get_round(session, candidate.round_id)
        if round_row.state == "frozen":
            raise Conflict(f"round {round_row.id} is frozen; its decisions are final", field="candidate_id")
        if candidate.status in NOT_YET_VALIDATED:
            raise Conflict(
                f"candidate {candidate_id} is {candidate.status}; override it once it is in validation",
                field="candidate_id",
            )
        before = candidate.status
        now = utcnow()
        ballots = [
            {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
            for b in current_ballots(annotation_records(session, candidate.id))
        ]
        rule_decision = {k: v for k, v in (candidate.decision or {}).items() if k != "ballots"} or None
        candidate.override_outcome = checked_outcome
        candidate.override_reason = checked_reason
        candidate.override_by = by
        candidate.override_at = now
        candidate.status = checked_outcome
        candidate.decided_at = now
        # Decided: no more votes are wanted from Label Studio for it.
        candidate.wanted_votes = min(candidate.wanted_votes, candidate.label_studio_overlap)
        candidate.version += 1
        session.add(candidate)
        session.add(
            DecisionRow(
                candidate_id=candidate.id,
                outcome=checked_outcome,
                rule_version=OVERRIDE_RULE_VERSION,
                policy=dict(round_row.policy),
                ballots=ballots,
                figures={
                    "outcome": checked_outcome,
                    "reason": checked_reason,
                    "by": by,
                    "status_before": before,
                    "rule_decision": rule_decision,
                },
                cause=OVERRIDE,
                made_at=now,
            )
        )
        session.add(
            AuditEventRow(
                round_id=candidate.round_id,
                candidate_id=candidate.id,
                action=OVERRIDE,
                by=by,
                reason=checked_reason,
                status_before=before,
                status_after=checked_outcome,
                at=now,
            )
        )
        session.commit()
        return candidate_public(services, candidate, session=session)


def _event_public(row: AuditEventRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "round_id": row.round_id,
        "candidate_id": row.candidate_id,
        "action": row.action,
        "by": row.by,
        "reason": row.reason,
        "status_before": row.status_before,
        "status_after": row.status_after,
        "at": row.at.isoformat(),
    }


def round_audit_log(services: Services, round_id: int) -> list[dict[str, Any]]:
    """Every audit event of a round, oldest first."""
    with services.database.unit_of_work() as session:
        get_round(session, round_id)
        return _events(session, AuditEventRow.round_id == round_id)


def candidate_audit_log(services: Services, candidate_id: str) -> list[dict[str, Any]]:
    """The audit events of one candidate, oldest first."""
    with services.database.unit_of_work() as session:
        return _events(session, AuditEventRow.candidate_id == candidate_id)


def _events(session: Session, condition: Any) -> list[dict[str, Any]]:
    rows = session.exec(select(AuditEventRow).where(condition).order_by(col(AuditEventRow.id))).all()
    return [_event_public(r) for r in rows]
