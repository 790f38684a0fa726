"""The audit log's storage.

A repository of the SQL unit of work (:mod:`dynaval.adapters.db.unit_of_work`); its rows are kept
by an :class:`~dynaval.adapters.db.identity_map.IdentityMap`.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from dynaval.adapters.db.orm import (
    AuditEventRow,
    as_utc,
)
from dynaval.domain.audit import AuditEvent


class SqlAuditRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, event: AuditEvent) -> None:
        self._session.add(
            AuditEventRow(
                round_id=event.round_id,
                candidate_id=event.candidate_id,
                action=event.action,
                by=event.by,
                reason=event.reason,
                status_before=event.status_before,
                status_after=event.status_after,
                at=event.at,
            )
        )

    def of_round(self, round_id: int) -> list[AuditEvent]:
        return self._events(AuditEventRow.round_id == round_id)

    def of_candidate(self, candidate_id: str) -> list[AuditEvent]:
        return self._events(AuditEventRow.candidate_id == candidate_id)

    def _events(self, condition: Any) -> list[AuditEvent]:
        rows = self._session.exec(
            select(AuditEventRow).where(condition).order_by(col(AuditEventRow.id))
        ).all()
        return [
            AuditEvent(
                id=r.id,
                round_id=r.round_id,
                candidate_id=r.candidate_id,
                action=r.action,
                by=r.by,
                reason=r.reason,
                status_before=r.status_before,
                status_after=r.status_after,
                at=as_utc(r.at),
            )
            for r in rows
        ]
