"""Failure captures: wrong outputs found in production (monitoring, canary runs, human review,
customer reports), each reported with the output observed and the label the reporter says is right.

A capture is stored as a candidate of a capture round, so that it is validated exactly as a fooled
candidate is (the same push, votes, decision rule, gold, escalation and agreement): the reported
label takes the place of the writer's label and the reporter the writer's. Its provenance (where it
was found, what the model said, which model) is kept beside it and never sent to Label Studio.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from dynaval.domain.validation.candidate import Candidate, CandidateStatus


class CaptureSource(StrEnum):
    MONITORING = "monitoring"
    CANARY = "canary"
    REVIEW = "review"
    CUSTOMER = "customer"


CaptureSourceName = Literal["monitoring", "canary", "review", "customer"]
"""The sources as the request model takes them: ``CaptureSource``'s values."""


@dataclass(frozen=True)
class Capture:
    """A capture's provenance: where and when the wrong output was seen, and from which model."""

    candidate_id: str
    round_id: int
    source: CaptureSource
    observed_output: str
    model_name: str
    model_version: str
    observed_at: datetime
    reporter: str
    """The name of the token it was reported with (a reporter's or a lead's)."""
    reference: str | None = None
    """The reporter's own id for it (a ticket, an alert); unique within a round."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.value,
            "reference": self.reference,
            "observed_output": self.observed_output,
            "model_name": self.model_name,
            "model_version": self.model_version,
            "observed_at": self.observed_at.isoformat(),
        }


def reported_candidate(
    *,
    candidate_id: str,
    round_id: int,
    inputs: dict[str, str],
    reported_label: str,
    reporter: str,
    at: datetime,
) -> Candidate:
    """The candidate a capture is validated as: the reported label in the writer's place, the
    reporter as its writer, queued for Label Studio at once (no model scores it; it is a reported
    failure, so it counts as one that fooled the model)."""
    return Candidate(
        id=candidate_id,
        round_id=round_id,
        inputs=inputs,
        writer_label=reported_label,
        writer_id=reporter,
        submitted_by=reporter,
        status=CandidateStatus.QUEUED,
        submitted_at=at,
        fooled=True,
    )


@dataclass(frozen=True)
class AcceptedCapture:
    """An accepted capture as a regression case takes it: its id (the case's id), round, inputs,
    the label validation confirmed, and where it was found."""

    candidate_id: str
    round_id: int
    inputs: dict[str, str]
    reported_label: str
    source: CaptureSource
