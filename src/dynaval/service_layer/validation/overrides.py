"""A lead overrides a candidate's decision, with a reason; every override goes to the audit log.

The candidate's status becomes the lead's outcome and stays so: later votes are still stored, but
the rule no longer decides an overridden candidate (see :meth:`Candidate.decide`). An override to
``accepted`` puts the candidate in the round dataset; one to ``rejected`` takes it out.
"""

from __future__ import annotations

from typing import Any

from dynaval.domain.audit import AuditEvent
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import NotFound
from dynaval.domain.validation.candidate import CandidateStatus, Override, OverrideOutcome
from dynaval.domain.validation.votes import current_ballots
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.candidate_views import candidate_public

OVERRIDE = "override"


def override_decision(
    services: Services, *, candidate_id: str, outcome: OverrideOutcome, reason: str, by: str
) -> dict[str, Any]:
    """Set a candidate's outcome as a lead decided; returns the candidate as the API shows it.

    ``outcome`` and ``reason`` come checked by the request model (a readable reason, NFC). Refused
    (and nothing written) for an unknown candidate, a candidate not yet in validation (still being
    scored or waiting to be pushed: the push would race with the override) and a frozen round.
    """
    override = Override(CandidateStatus(outcome), reason, by, utcnow())
    with services.uow() as uow:
        candidate = uow.candidates.get(candidate_id, for_update=True)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        round_ = uow.rounds.get(candidate.round_id)
        round_.check_decisions_may_change(field="candidate_id")
        ballots = [
            {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
            for b in current_ballots(uow.candidates.annotations(candidate.id))
        ]
        before = candidate.apply_override(override, ballots=ballots, policy=round_.policy)
        uow.candidates.save(candidate)
        uow.audit.add(
            AuditEvent(
                round_id=candidate.round_id,
                candidate_id=candidate.id,
                action=OVERRIDE,
                by=by,
                reason=override.reason,
                status_before=before.value,
                status_after=override.outcome.value,
                at=override.at,
            )
        )
        uow.commit()
        shown = candidate_public(services, uow, candidate)
    return shown


def round_audit_log(services: Services, round_id: int) -> list[dict[str, Any]]:
    """Every audit event of a round, oldest first."""
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)
        return [event.to_dict() for event in uow.audit.of_round(round_id)]


def candidate_audit_log(services: Services, candidate_id: str) -> list[dict[str, Any]]:
    """The audit events of one candidate, oldest first."""
    with services.uow(read_only=True) as uow:
        return [event.to_dict() for event in uow.audit.of_candidate(candidate_id)]
