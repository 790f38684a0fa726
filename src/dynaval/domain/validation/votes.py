"""From Label Studio annotations to votes: one per annotator, the latest non-cancelled one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from dynaval.domain.validation.decision import Ballot


@dataclass(frozen=True)
class AnnotationRecord:
    """What we keep of one Label Studio annotation (never the raw payload)."""

    annotation_id: int
    annotator: str
    label: str | None
    flagged: bool
    reason: str | None
    was_cancelled: bool
    updated_at: datetime
    created_at: datetime | None = None
    lead_time_s: float | None = None
    late: bool = False
    """Read after its round was frozen: stored, shown, never a vote."""


def current_votes(annotations: Iterable[AnnotationRecord]) -> list[AnnotationRecord]:
    """Each annotator's vote: their latest non-cancelled annotation that says something.

    Label Studio accepts several annotations by the same user on one task; the most recently
    updated one is that annotator's vote (ties broken by the higher annotation id). Cancelled
    (skipped) annotations, empty ones and late ones (read after the round was frozen) are not votes.
    """
    latest: dict[str, AnnotationRecord] = {}
    for record in annotations:
        if record.late or record.was_cancelled or (record.label is None and not record.flagged):
            continue
        seen = latest.get(record.annotator)
        if seen is None or (record.updated_at, record.annotation_id) > (seen.updated_at, seen.annotation_id):
            latest[record.annotator] = record
    return sorted(latest.values(), key=lambda r: r.annotator)


def current_ballots(annotations: Iterable[AnnotationRecord]) -> list[Ballot]:
    """The ballots the decision rule counts: one per annotator (see :func:`current_votes`)."""
    return [
        Ballot(annotator=r.annotator, label=r.label, flagged=r.flagged, reason=r.reason)
        for r in current_votes(annotations)
    ]
