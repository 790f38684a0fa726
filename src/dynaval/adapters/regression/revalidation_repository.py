"""The re-validations' storage: which suite case each revalidation candidate stands for, and
whether its outcome has settled the case yet."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from dynaval.adapters.db.orm import RevalidationRow, as_utc
from dynaval.domain.errors import Conflict
from dynaval.domain.regression.revalidation import Revalidation, RevalidationOutcome


def _revalidation(row: RevalidationRow) -> Revalidation:
    return Revalidation(
        case_id=row.case_id,
        candidate_id=row.candidate_id,
        round_id=row.round_id,
        sent_by=row.sent_by,
        sent_at=as_utc(row.sent_at),
        settled_at=as_utc(row.settled_at) if row.settled_at else None,
        outcome=RevalidationOutcome(row.outcome) if row.outcome else None,
    )


class SqlRevalidationRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add_many(self, revalidations: Sequence[Revalidation]) -> None:
        """Store them (their candidates first, in this unit of work). A case already under
        re-validation, sent meanwhile by another request: :class:`Conflict` naming ``cases`` (the
        partial unique index on open re-validations decides)."""
        self._session.add_all(
            RevalidationRow(
                candidate_id=r.candidate_id,
                case_id=r.case_id,
                round_id=r.round_id,
                sent_by=r.sent_by,
                sent_at=r.sent_at,
            )
            for r in revalidations
        )
        try:
            self._session.flush()
        except IntegrityError as error:
            if "case_id" not in str(error.orig) and "uq_revalidation_open_case" not in str(error.orig):
                raise
            raise Conflict(
                "a case was sent to re-validation by another request at the same moment", field="cases"
            ) from None

    def open(self, *, round_id: int | None = None, for_update: bool = False) -> list[Revalidation]:
        """The re-validations not settled yet (of one round, or all), oldest first; row-locked with
        ``for_update``, so two settle passes cannot settle one twice."""
        query = select(RevalidationRow).where(col(RevalidationRow.settled_at).is_(None))
        if round_id is not None:
            query = query.where(RevalidationRow.round_id == round_id)
        query = query.order_by(col(RevalidationRow.sent_at), col(RevalidationRow.candidate_id))
        if for_update:
            query = query.with_for_update()
        return [_revalidation(row) for row in self._session.exec(query).all()]

    def of_cases(self, case_ids: Collection[str]) -> dict[str, Revalidation]:
        """Each case's latest re-validation (open or settled), by case id."""
        if not case_ids:
            return {}
        rows = self._session.exec(
            select(RevalidationRow)
            .where(col(RevalidationRow.case_id).in_(list(case_ids)))
            .order_by(col(RevalidationRow.sent_at), col(RevalidationRow.candidate_id))
        ).all()
        return {row.case_id: _revalidation(row) for row in rows}

    def save(self, revalidation: Revalidation) -> None:
        self._session.execute(
            update(RevalidationRow)
            .where(col(RevalidationRow.candidate_id) == revalidation.candidate_id)
            .values(
                settled_at=revalidation.settled_at,
                outcome=revalidation.outcome.value if revalidation.outcome else None,
            )
        )
