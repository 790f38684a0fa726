"""The leads' dashboard sessions' storage (``dashboard_session``): kept by the hash of their id,
touched, revoked and purged (:mod:`dynaval.service_layer.dashboard.sessions` says when)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, or_, update
from sqlmodel import Session, col

from dynaval.adapters.db.orm import DashboardSessionRow, as_utc
from dynaval.domain.dashboard.lead_session import LeadSessionRecord


class SqlDashboardSessions:
    """The lead's dashboard sessions (table ``dashboard_session``)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, record: LeadSessionRecord) -> None:
        self._session.add(
            DashboardSessionRow(
                id_hash=record.id_hash,
                lead=record.lead,
                token_fingerprint=record.token_fingerprint,
                created_at=record.created_at,
                last_seen_at=record.last_seen_at,
                expires_at=record.expires_at,
                revoked_at=record.revoked_at,
            )
        )

    def get(self, id_hash: str) -> LeadSessionRecord | None:
        row = self._session.get(DashboardSessionRow, id_hash)
        if row is None:
            return None
        return LeadSessionRecord(
            id_hash=row.id_hash,
            lead=row.lead,
            token_fingerprint=row.token_fingerprint,
            created_at=as_utc(row.created_at),
            last_seen_at=as_utc(row.last_seen_at),
            expires_at=as_utc(row.expires_at),
            revoked_at=as_utc(row.revoked_at) if row.revoked_at else None,
        )

    def touch(self, id_hash: str, now: datetime) -> None:
        """Note that the session was used at ``now`` (never moving ``last_seen_at`` back)."""
        self._session.execute(
            update(DashboardSessionRow)
            .where(col(DashboardSessionRow.id_hash) == id_hash)
            .where(col(DashboardSessionRow.last_seen_at) < now)
            .values(last_seen_at=now)
        )

    def revoke(self, id_hash: str, now: datetime) -> None:
        self._session.execute(
            update(DashboardSessionRow)
            .where(col(DashboardSessionRow.id_hash) == id_hash)
            .where(col(DashboardSessionRow.revoked_at).is_(None))
            .values(revoked_at=now)
        )

    def purge(self, now: datetime, *, idle: timedelta) -> None:
        """Delete the rows that can no longer hold: past their lifetime or their idle timeout.
        A revoked row stays until then, so the table shows recent logouts."""
        self._session.execute(
            delete(DashboardSessionRow).where(
                or_(
                    col(DashboardSessionRow.expires_at) <= now,
                    col(DashboardSessionRow.last_seen_at) <= now - idle,
                )
            )
        )
