"""The captures' storage: each capture's provenance (its candidate is stored by the candidate
repository), the round's references, and the accepted captures the regression suite takes."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from dynaval.adapters.db.orm import CandidateRow, CaptureRow, as_utc
from dynaval.domain.errors import Conflict
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.capture import AcceptedCapture, Capture, CaptureSource


class DuplicateReference(Conflict):
    """A capture's reference was stored meanwhile in the same round by another request (the unique
    index refused it); the use case names the earlier capture."""

    def __init__(self, round_id: int) -> None:
        super().__init__(f"a reference is already taken in round {round_id}", field="reference")
        self.round_id = round_id


def _capture(row: CaptureRow) -> Capture:
    return Capture(
        candidate_id=row.candidate_id,
        round_id=row.round_id,
        source=CaptureSource(row.source),
        observed_output=row.observed_output,
        model_name=row.model_name,
        model_version=row.model_version,
        observed_at=as_utc(row.observed_at),
        reporter=row.reporter,
        reference=row.reference,
    )


class SqlCaptureRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add_many(self, captures: Sequence[Capture]) -> None:
        """Store the captures' provenance (their candidates must be added first, in this unit of
        work). Raises :class:`DuplicateReference` when a reference is taken in the round: the
        unique index decides, so two requests racing with one reference cannot both store it."""
        self._session.add_all(
            CaptureRow(
                candidate_id=c.candidate_id,
                round_id=c.round_id,
                source=c.source.value,
                observed_output=c.observed_output,
                model_name=c.model_name,
                model_version=c.model_version,
                observed_at=c.observed_at,
                reference=c.reference,
                reporter=c.reporter,
            )
            for c in captures
        )
        try:
            self._session.flush()
        except IntegrityError as error:
            if "reference" not in str(error.orig):
                raise
            raise DuplicateReference(captures[0].round_id) from None

    def get(self, candidate_id: str) -> Capture | None:
        row = self._session.get(CaptureRow, candidate_id)
        return _capture(row) if row is not None else None

    def by_references(self, round_id: int, references: Collection[str]) -> dict[str, str]:
        """The ids of the round's captures with these references, by reference."""
        if not references:
            return {}
        rows = self._session.exec(
            select(col(CaptureRow.reference), col(CaptureRow.candidate_id)).where(
                CaptureRow.round_id == round_id, col(CaptureRow.reference).in_(list(references))
            )
        ).all()
        return {reference: candidate_id for reference, candidate_id in rows if reference is not None}

    def accepted_captures(self, round_id: int | None = None) -> list[AcceptedCapture]:
        """Every accepted capture (of one round, or of all), in report order: the regression
        suite's cases from production, each with the id of the candidate it was validated as."""
        query = (
            sa_select(
                col(CandidateRow.id),
                col(CandidateRow.round_id),
                col(CandidateRow.inputs),
                col(CandidateRow.writer_label),
                col(CaptureRow.source),
            )
            .join(CaptureRow, col(CaptureRow.candidate_id) == col(CandidateRow.id))
            .where(col(CandidateRow.status) == CandidateStatus.ACCEPTED.value)
            .order_by(col(CaptureRow.reported_at), col(CandidateRow.id))
        )
        if round_id is not None:
            query = query.where(col(CaptureRow.round_id) == round_id)
        return [
            AcceptedCapture(
                candidate_id=candidate_id,
                round_id=found_round,
                inputs=dict(inputs),
                reported_label=label,
                source=CaptureSource(source),
            )
            for candidate_id, found_round, inputs, label, source in self._session.execute(query).all()
        ]
