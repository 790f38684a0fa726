"""The annotators' storage: their status per round (gold accuracy, exclusion) and the exclusion log.

A repository of the SQL unit of work (:mod:`dynaval.adapters.db.unit_of_work`); its rows are kept
by an :class:`~dynaval.adapters.db.identity_map.IdentityMap`.
"""

from __future__ import annotations

from sqlmodel import Session, col, select

from dynaval.adapters.db.orm import (
    AnnotatorStatusRow,
    ExclusionEventRow,
    as_utc,
)
from dynaval.domain.validation.gold import AnnotatorStatus, DecidedBy, ExclusionEvent


class SqlAnnotatorRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def excluded(self, round_id: int) -> frozenset[str]:
        rows = self._session.exec(
            select(AnnotatorStatusRow.annotator_id).where(
                AnnotatorStatusRow.round_id == round_id, col(AnnotatorStatusRow.excluded).is_(True)
            )
        ).all()
        return frozenset(rows)

    def status(self, round_id: int, annotator: str) -> AnnotatorStatus | None:
        row = self._session.get(AnnotatorStatusRow, (round_id, annotator))
        return _status_of(row) if row is not None else None

    def statuses(self, round_id: int) -> dict[str, AnnotatorStatus]:
        rows = self._session.exec(
            select(AnnotatorStatusRow).where(AnnotatorStatusRow.round_id == round_id)
        ).all()
        return {r.annotator_id: _status_of(r) for r in rows}

    def set_status(self, round_id: int, status: AnnotatorStatus) -> None:
        row = self._session.get(AnnotatorStatusRow, (round_id, status.annotator)) or AnnotatorStatusRow(
            round_id=round_id,
            annotator_id=status.annotator,
            decided_by=status.decided_by.value,
            reason=status.reason,
        )
        row.excluded = status.excluded
        row.decided_by = status.decided_by.value
        row.reason = status.reason
        if status.changed_at is not None:
            row.changed_at = status.changed_at
        self._session.add(row)
        self._session.flush()

    def log(self, event: ExclusionEvent) -> None:
        self._session.add(
            ExclusionEventRow(
                round_id=event.round_id,
                annotator_id=event.annotator,
                excluded=event.excluded,
                decided_by=event.decided_by.value,
                reason=event.reason,
                gold_correct=event.gold_correct,
                gold_total=event.gold_total,
                decisions_changed=event.decisions_changed,
                made_at=event.made_at,
            )
        )

    def events(self, round_id: int) -> list[ExclusionEvent]:
        rows = self._session.exec(
            select(ExclusionEventRow)
            .where(ExclusionEventRow.round_id == round_id)
            .order_by(col(ExclusionEventRow.id))
        ).all()
        return [
            ExclusionEvent(
                round_id=r.round_id,
                annotator=r.annotator_id,
                excluded=r.excluded,
                decided_by=DecidedBy(r.decided_by),
                reason=r.reason,
                gold_correct=r.gold_correct,
                gold_total=r.gold_total,
                decisions_changed=r.decisions_changed,
                made_at=as_utc(r.made_at),
            )
            for r in rows
        ]


def _status_of(row: AnnotatorStatusRow) -> AnnotatorStatus:
    return AnnotatorStatus(
        annotator=row.annotator_id,
        excluded=row.excluded,
        decided_by=DecidedBy(row.decided_by),
        reason=row.reason,
        changed_at=as_utc(row.changed_at),
    )
