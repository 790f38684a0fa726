"""A candidate's lifecycle, from the writer's submission to a decision.

    scoring ──score──▶ queued ──enter_validation──▶ in_validation ⇄ escalated ──▶ accepted
        └─────score──▶ not_fooled                         (the rule, on every vote change)   rejected
                                                                                              flagged
    (a lead may override any validated candidate to accepted or rejected; it then stays so)
    (a round frozen by force leaves every candidate still waiting for votes ``unvalidated``)

Each transition is one method that checks its own precondition. The rule itself is
:func:`dynaval.domain.validation.decision.decide`; :meth:`Candidate.decide` applies it to the candidate's
votes and says what to record.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from dynaval.domain.errors import Conflict
from dynaval.domain.validation.decision import Decision, Outcome, decide
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.votes import AnnotationRecord, current_ballots


class CandidateStatus(StrEnum):
    SCORING = "scoring"
    """Stored, waiting for the model's answer (a model failure leaves it here for the sweep)."""
    QUEUED = "queued"
    """Fooled the model (or validated anyway): waiting to be imported into Label Studio."""
    NOT_FOOLED = "not_fooled"
    IN_VALIDATION = "in_validation"
    ESCALATED = "escalated"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FLAGGED = "flagged"
    UNVALIDATED = "unvalidated"
    """Still waiting for votes when a lead froze its round by force: never decided, never accepted."""

    @property
    def is_validated_by_rule(self) -> bool:
        """In Label Studio: the decision rule decides it on every change of its votes."""
        return self.value in _OUTCOMES

    @property
    def waits_for_votes(self) -> bool:
        """Still asking Label Studio for votes (only these ask for more)."""
        return self in (CandidateStatus.IN_VALIDATION, CandidateStatus.ESCALATED)

    @property
    def waits_at_freeze(self) -> bool:
        """Not decided yet: waiting for votes, for its push or for the model. A round is frozen with
        such candidates only by force, and they are then left ``unvalidated``."""
        return self.waits_for_votes or self.not_validated_yet

    @property
    def not_validated_yet(self) -> bool:
        """Not yet in Label Studio: a lead cannot override it (the push would race the override)."""
        return self in (CandidateStatus.SCORING, CandidateStatus.QUEUED)


_OUTCOMES = frozenset(o.value for o in Outcome)
OVERRIDE_OUTCOMES = (CandidateStatus.ACCEPTED, CandidateStatus.REJECTED)
OverrideOutcome = Literal["accepted", "rejected"]
"""The outcomes a lead may set: ``OVERRIDE_OUTCOMES``, as the request model takes them."""
OVERRIDE_RULE_VERSION = "lead-override/1"
FREEZE_RULE_VERSION = "round-freeze/1"
WAITING_AT_FREEZE = tuple(s for s in CandidateStatus if s.waits_at_freeze)
"""The statuses a round may not be frozen with, unless by force."""


@dataclass(frozen=True)
class Override:
    """A lead's outcome for a candidate, which the rule then leaves alone. The request model checked
    the outcome (one of ``OverrideOutcome``) and the reason (readable text, stored NFC, since it goes
    into the dataset's provenance)."""

    outcome: CandidateStatus
    reason: str
    by: str
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "reason": self.reason,
            "by": self.by,
            "at": self.at.isoformat(),
        }


@dataclass(frozen=True)
class DecisionEntry:
    """One entry of a candidate's decision history: what was decided, from which votes, and why."""

    outcome: str
    rule_version: str
    policy: dict[str, Any]
    ballots: list[dict[str, Any]]
    figures: dict[str, Any]
    cause: str
    made_at: datetime


@dataclass
class Candidate:
    """A writer's example in a round, with the model's answer and, once validated, its decision."""

    id: str
    round_id: int
    inputs: dict[str, str]
    writer_label: str
    writer_id: str
    status: CandidateStatus = CandidateStatus.SCORING
    submitted_by: str | None = None
    collected_by: str | None = None
    rationale: str | None = None
    """Why the writer thinks the model is wrong (optional): stored, exported and shown to leads,
    never sent to Label Studio."""
    submitted_at: datetime | None = None
    model_prediction: str | None = None
    model_probabilities: dict[str, float] | None = None
    model_signature: str | None = None
    model_hash: str | None = None
    """The content hash of the model that scored it (None until scored): its round's model then,
    kept when a retraining policy's swap replaces the round's model."""
    model_name: str | None = None
    fooled: bool | None = None
    scored_at: datetime | None = None
    push_attempted_at: datetime | None = None
    pushed_at: datetime | None = None
    label_studio_task_id: int | None = None
    wanted_votes: int = 0
    label_studio_overlap: int = 0
    decision: dict[str, Any] | None = None
    """The rule's figures and the ballots they came from, as last decided."""
    decided_at: datetime | None = None
    version: int = 0
    override: Override | None = None
    label_studio_read_at: datetime | None = None
    history: list[DecisionEntry] = field(default_factory=list)
    """Decision entries made since the candidate was loaded, to be stored with it."""

    def score(
        self,
        *,
        prediction: str,
        probabilities: Mapping[str, float],
        signature: str,
        model_hash: str,
        model_name: str,
        validate_non_fooling: bool,
        at: datetime,
    ) -> bool:
        """``scoring`` → ``queued`` (fooled, or validated anyway) or ``not_fooled``. A candidate
        scored already keeps its first answer; returns whether this call scored it."""
        if self.status is not CandidateStatus.SCORING:
            return False
        self.model_prediction = prediction
        self.model_probabilities = dict(probabilities)
        self.model_signature = signature
        self.model_hash, self.model_name = model_hash, model_name
        self.fooled = prediction != self.writer_label
        self.scored_at = at
        queued = self.fooled or validate_non_fooling
        self.status = CandidateStatus.QUEUED if queued else CandidateStatus.NOT_FOOLED
        return True

    def enter_validation(self, *, task_id: int, overlap: int, at: datetime) -> None:
        """``queued`` → ``in_validation``: its task is in Label Studio, asking for ``overlap`` votes
        (after a push, or found there when an import's answer never came back)."""
        if self.status is not CandidateStatus.QUEUED:
            raise Conflict(f"candidate {self.id} is {self.status.value}, not queued", field="candidate_id")
        self.label_studio_task_id = task_id
        self.pushed_at = self.pushed_at or at
        self.status = CandidateStatus.IN_VALIDATION
        self.wanted_votes = overlap
        self.label_studio_overlap = overlap

    def decide(
        self,
        records: Iterable[AnnotationRecord],
        policy: Mapping[str, Any],
        *,
        excluded: Collection[str],
        cause: str,
        at: datetime,
        writer_annotators: Mapping[str, str] | None = None,
    ) -> DecisionEntry | None:
        """Apply the round's rule to these annotations; record and return the new decision, or
        None when nothing changed. A candidate the rule does not decide (not in validation, or
        overridden by a lead) is left alone: its votes are kept, its status is not touched.

        ``writer_annotators`` gives writers' Label Studio users by writer name: this candidate's
        writer's own vote never counts (a collector's writers are names of its front end, not
        people the service knows, so they have none)."""
        if not self.status.is_validated_by_rule or self.override is not None:
            return None
        ballots = current_ballots(records)
        own = (writer_annotators or {}).get(self.writer_id) if self.collected_by is None else None
        decision: Decision = decide(
            ballots, self.writer_label, DecisionPolicy(**policy), excluded=excluded, writer_annotator=own
        )
        ballot_dicts = [
            {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
            for b in ballots
        ]
        figures = decision.to_dict()
        stored = {**figures, "ballots": ballot_dicts}
        if self.decision == stored and self.status.value == decision.outcome.value:
            return None
        self.status = CandidateStatus(decision.outcome.value)
        self.decision = stored
        self.wanted_votes = decision.wanted_votes
        self.decided_at = at if decision.outcome.is_final else None
        self.version += 1
        entry = DecisionEntry(
            outcome=decision.outcome.value,
            rule_version=decision.rule_version,
            policy=dict(policy),
            ballots=ballot_dicts,
            figures=figures,
            cause=cause,
            made_at=at,
        )
        self.history.append(entry)
        return entry

    def apply_override(
        self, override: Override, *, ballots: list[dict[str, Any]], policy: Mapping[str, Any]
    ) -> CandidateStatus:
        """A lead sets the outcome; the rule leaves the candidate alone from now on. Returns the
        status before. Refused for a candidate not in Label Studio yet."""
        if self.status.not_validated_yet:
            raise Conflict(
                f"candidate {self.id} is {self.status.value}; override it once it is in validation",
                field="candidate_id",
            )
        before = self.status
        rule_decision = {k: v for k, v in (self.decision or {}).items() if k != "ballots"} or None
        self.override = override
        self.status = override.outcome
        self.decided_at = override.at
        # Decided: no more votes are wanted from Label Studio for it.
        self.wanted_votes = min(self.wanted_votes, self.label_studio_overlap)
        self.version += 1
        self.history.append(
            DecisionEntry(
                outcome=override.outcome.value,
                rule_version=OVERRIDE_RULE_VERSION,
                policy=dict(policy),
                ballots=ballots,
                figures={
                    "outcome": override.outcome.value,
                    "reason": override.reason,
                    "by": override.by,
                    "status_before": before.value,
                    "rule_decision": rule_decision,
                },
                cause="override",
                made_at=override.at,
            )
        )
        return before

    def leave_unvalidated(self, *, by: str, reason: str, at: datetime) -> CandidateStatus:
        """Still waiting when a lead froze its round by force (``by``, ``reason``): it stays
        ``unvalidated``, neither accepted nor rejected, and no vote decides it any more. Returns the
        status before. Refused for a candidate already decided."""
        if not self.status.waits_at_freeze:
            raise Conflict(
                f"candidate {self.id} is {self.status.value}; only a waiting candidate is left unvalidated",
                field="candidate_id",
            )
        before = self.status
        self.status = CandidateStatus.UNVALIDATED
        self.decided_at = None
        # No more votes are wanted from Label Studio for it.
        self.wanted_votes = min(self.wanted_votes, self.label_studio_overlap)
        self.version += 1
        self.history.append(
            DecisionEntry(
                outcome=CandidateStatus.UNVALIDATED.value,
                rule_version=FREEZE_RULE_VERSION,
                policy={},
                ballots=[dict(b) for b in (self.decision or {}).get("ballots", [])],
                figures={"by": by, "reason": reason, "status_before": before.value},
                cause="forced-freeze",
                made_at=at,
            )
        )
        return before

    def record_overlap(self, overlap: int) -> None:
        """Label Studio now asks for ``overlap`` annotations of its task (never fewer than before)."""
        self.label_studio_overlap = max(self.label_studio_overlap, overlap)

    @property
    def wants_more_annotations(self) -> bool:
        """Whether Label Studio must be asked for more annotations of its task. A decided candidate
        never is, even when it got more votes than its task asked for."""
        return self.status.waits_for_votes and self.wanted_votes > self.label_studio_overlap
