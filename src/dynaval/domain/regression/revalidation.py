"""Re-validation of suspect regression cases: a case that every evaluated model fails may carry a
wrong label, so a lead sends it back to the validators, blind, in a revalidation round.

The case goes to Label Studio as a candidate of that round: its inputs, with the case's gold label
in the writer's label's place (the validators never see it), so the ordinary decision rule decides
it. A :class:`Revalidation` links the candidate to the case until it is *settled*:

- the candidate **accepted**: the validators agree with the label; the case is **confirmed** (it
  stays in the suite, no longer suspect);
- the candidate **rejected**: they do not; the case is **retired**, by the system, with a reason
  naming the round and the candidate;
- the round frozen before either (the candidate unvalidated): **unresolved**; the case stays suspect
  and may be sent again.

Anything else (in validation, escalated, flagged for a lead) is not settled yet: a flagged
candidate waits for a lead's override, which decides it like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from dynaval.domain.regression.suite import RegressionCase
from dynaval.domain.validation.candidate import Candidate, CandidateStatus
from dynaval.domain.validation.capture import reported_candidate

SYSTEM = "system"
"""Who retires or confirms a case when its re-validation settles (the audit log's ``by``)."""


class RevalidationOutcome(StrEnum):
    CONFIRMED = "confirmed"
    RETIRED = "retired"
    UNRESOLVED = "unresolved"


def outcome_of(status: CandidateStatus, *, round_frozen: bool) -> RevalidationOutcome | None:
    """What a re-validation candidate's status means for its case; None while it is not settled.

    Only a frozen round's decisions are final: until then a later vote, an escalation or a lead's
    override may still change a decision, and a case retired on a passing one could not come back.
    So a case settles when its revalidation round is frozen, as an accepted capture joins the suite.

    >>> outcome_of(CandidateStatus.REJECTED, round_frozen=True)
    <RevalidationOutcome.RETIRED: 'retired'>
    >>> outcome_of(CandidateStatus.REJECTED, round_frozen=False) is None
    True
    """
    if not round_frozen:
        return None
    if status is CandidateStatus.ACCEPTED:
        return RevalidationOutcome.CONFIRMED
    if status is CandidateStatus.REJECTED:
        return RevalidationOutcome.RETIRED
    return RevalidationOutcome.UNRESOLVED


@dataclass(frozen=True)
class Revalidation:
    """One case sent back to the validators as one candidate of a revalidation round."""

    case_id: str
    candidate_id: str
    round_id: int
    sent_by: str
    sent_at: datetime
    settled_at: datetime | None = None
    outcome: RevalidationOutcome | None = None

    @property
    def is_open(self) -> bool:
        """Not settled yet: the case is under re-validation and is not sent again."""
        return self.settled_at is None

    def settle(self, outcome: RevalidationOutcome, *, at: datetime) -> Revalidation:
        return replace(self, settled_at=at, outcome=outcome)

    def retire_reason(self) -> str:
        return (
            f"re-validation rejected its label: revalidation round {self.round_id}, "
            f"candidate {self.candidate_id}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "candidate_id": self.candidate_id,
            "sent_by": self.sent_by,
            "sent_at": self.sent_at.isoformat(),
            "settled_at": self.settled_at.isoformat() if self.settled_at else None,
            "outcome": self.outcome.value if self.outcome else None,
        }


def revalidation_candidate(
    case: RegressionCase, *, candidate_id: str, round_id: int, by: str, at: datetime
) -> Candidate:
    """The candidate a case is re-validated as: its inputs, its gold label in the writer's label's
    place (as a capture's reported label is), the lead who sent it as its writer; queued for Label
    Studio at once."""
    return reported_candidate(
        candidate_id=candidate_id,
        round_id=round_id,
        inputs=dict(case.inputs),
        reported_label=case.label,
        reporter=by,
        at=at,
    )


def settle_case(
    case: RegressionCase, revalidation: Revalidation, outcome: RevalidationOutcome, *, at: datetime
) -> tuple[RegressionCase, Revalidation]:
    """The case and its re-validation after ``outcome``: confirmed, retired (by the system, with the
    reason naming the round and candidate) or left as it is (unresolved). A case a lead retired
    meanwhile stays as the lead left it."""
    settled = revalidation.settle(outcome, at=at)
    if case.retired or outcome is RevalidationOutcome.UNRESOLVED:
        return case, settled
    if outcome is RevalidationOutcome.CONFIRMED:
        return case.confirm(), settled
    return case.retire(by=SYSTEM, reason=revalidation.retire_reason(), at=at), settled
