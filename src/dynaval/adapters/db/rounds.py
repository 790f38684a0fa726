"""The rounds' storage.

A repository of the SQL unit of work (:mod:`dynaval.adapters.db.unit_of_work`); its rows are kept
by an :class:`~dynaval.adapters.db.identity_map.IdentityMap`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, or_, update
from sqlmodel import Session, col, select

from dynaval.adapters.db.database import MAX_SERIAL_ID
from dynaval.adapters.db.identity_map import IdentityMap, utc
from dynaval.adapters.db.orm import (
    RoundRow,
)
from dynaval.domain.errors import NotFound
from dynaval.domain.validation.round import Round, RoundKind, RoundState


def _round_of(row: RoundRow) -> Round:
    assert row.id is not None
    return Round(
        id=row.id,
        name=row.name,
        task_type=row.task_type,
        state=RoundState(row.state),
        model_dir=row.model_dir,
        model_name=row.model_name,
        model_hash=row.model_hash,
        labels=list(row.labels),
        policy=dict(row.policy),
        label_studio_project_id=row.label_studio_project_id,
        label_studio_webhook_id=row.label_studio_webhook_id,
        created_at=utc(row.created_at),
        closed_at=utc(row.closed_at),
        frozen_at=utc(row.frozen_at),
        push_failures=row.push_failures,
        push_retry_at=utc(row.push_retry_at),
        kind=RoundKind(row.kind),
    )


class SqlRoundRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._map = IdentityMap(session, RoundRow, _round_of, key=lambda row: row.id)

    def get(self, round_id: int, *, for_update: bool = False) -> Round:
        """The round, row-locked with ``for_update``; :class:`NotFound` naming ``round_id``."""
        # A larger id names no row; asking PostgreSQL for it would be an overflow error, not a 404.
        found = None
        if 0 < round_id <= MAX_SERIAL_ID:
            found = self._map.first(select(RoundRow).where(RoundRow.id == round_id), for_update=for_update)
        if found is None:
            raise NotFound(f"round {round_id} does not exist", field="round_id")
        return found

    def add(self, round_: Round) -> Round:
        row = RoundRow(
            name=round_.name,
            task_type=round_.task_type,
            state=round_.state.value,
            model_dir=round_.model_dir,
            model_name=round_.model_name,
            model_hash=round_.model_hash,
            labels=list(round_.labels),
            policy=dict(round_.policy),
            label_studio_project_id=round_.label_studio_project_id,
            label_studio_webhook_id=round_.label_studio_webhook_id,
            kind=round_.kind.value,
        )
        self._session.add(row)
        self._session.flush()
        return self._map.keep([row])[0]

    def save(self, round_: Round) -> None:
        assert round_.id is not None
        row = self._map.row(round_.id)
        row.name = round_.name
        row.state = round_.state.value
        row.model_dir = round_.model_dir  # a retraining policy's swap replaces an open round's model
        row.model_name = round_.model_name
        row.model_hash = round_.model_hash
        row.policy = dict(round_.policy)
        row.closed_at = round_.closed_at
        row.frozen_at = round_.frozen_at
        row.push_failures = round_.push_failures
        row.push_retry_at = round_.push_retry_at
        self._session.add(row)

    def all(self) -> list[Round]:
        return [_round_of(r) for r in self._session.exec(select(RoundRow).order_by(col(RoundRow.id))).all()]

    def live_ids(self) -> list[int]:
        rows = self._session.exec(select(RoundRow.id).where(RoundRow.state != RoundState.FROZEN.value)).all()
        return [int(r) for r in rows if r is not None]

    def take_push_lease(
        self, round_id: int, lease: datetime, *, now: datetime, respect_backoff: bool
    ) -> bool:
        conditions = [
            col(RoundRow.id) == round_id,
            or_(col(RoundRow.push_lease_until).is_(None), col(RoundRow.push_lease_until) < now),
        ]
        if respect_backoff:
            conditions.append(or_(col(RoundRow.push_retry_at).is_(None), col(RoundRow.push_retry_at) <= now))
        result: CursorResult[Any] = self._session.execute(  # type: ignore[assignment]
            update(RoundRow).where(*conditions).values(push_lease_until=lease)
        )
        return result.rowcount == 1

    def renew_push_lease(self, round_id: int, lease: datetime, renewed: datetime) -> bool:
        result: CursorResult[Any] = self._session.execute(  # type: ignore[assignment]
            update(RoundRow)
            .where(col(RoundRow.id) == round_id, col(RoundRow.push_lease_until) == lease)
            .values(push_lease_until=renewed)
        )
        return result.rowcount == 1

    def release_push_lease(self, round_id: int, lease: datetime) -> None:
        self._session.execute(
            update(RoundRow)
            .where(col(RoundRow.id) == round_id, col(RoundRow.push_lease_until) == lease)
            .values(push_lease_until=None)
        )
