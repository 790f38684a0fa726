"""The candidates' storage: candidates, their decisions' history, and their annotations as read.

A repository of the SQL unit of work (:mod:`dynaval.adapters.db.unit_of_work`); its rows are kept
by an :class:`~dynaval.adapters.db.identity_map.IdentityMap`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, update
from sqlmodel import Session, col, select

from dynaval.adapters.db.identity_map import IdentityMap, utc
from dynaval.adapters.db.orm import (
    AnnotationRow,
    CandidateRow,
    DecisionRow,
    GoldAnswerRow,
    as_utc,
)
from dynaval.domain.validation.candidate import Candidate, CandidateStatus, DecisionEntry, Override
from dynaval.domain.validation.votes import AnnotationRecord


def candidate_of(row: CandidateRow) -> Candidate:
    """The domain's candidate of a stored row."""
    override = (
        Override(
            outcome=CandidateStatus(row.override_outcome),
            reason=row.override_reason or "",
            by=row.override_by or "",
            at=as_utc(row.override_at) if row.override_at else as_utc(row.submitted_at),
        )
        if row.override_outcome is not None
        else None
    )
    return Candidate(
        id=row.id,
        round_id=row.round_id,
        inputs=dict(row.inputs),
        writer_label=row.writer_label,
        writer_id=row.writer_id,
        status=CandidateStatus(row.status),
        submitted_by=row.submitted_by,
        collected_by=row.collected_by,
        rationale=row.rationale,
        submitted_at=utc(row.submitted_at),
        model_prediction=row.model_prediction,
        model_probabilities=dict(row.model_probabilities) if row.model_probabilities is not None else None,
        model_signature=row.model_signature,
        model_hash=row.model_hash,
        model_name=row.model_name,
        fooled=row.fooled,
        scored_at=utc(row.scored_at),
        push_attempted_at=utc(row.push_attempted_at),
        pushed_at=utc(row.pushed_at),
        label_studio_task_id=row.label_studio_task_id,
        wanted_votes=row.wanted_votes,
        label_studio_overlap=row.label_studio_overlap,
        decision=dict(row.decision) if row.decision is not None else None,
        decided_at=utc(row.decided_at),
        version=row.version,
        override=override,
        label_studio_read_at=utc(row.label_studio_read_at),
    )


def _candidate_columns(candidate: Candidate) -> dict[str, Any]:
    """The columns a save writes, from the domain's candidate."""
    override = candidate.override
    return {
        "status": candidate.status.value,
        "model_prediction": candidate.model_prediction,
        "model_probabilities": candidate.model_probabilities,
        "model_signature": candidate.model_signature,
        "model_hash": candidate.model_hash,
        "model_name": candidate.model_name,
        "fooled": candidate.fooled,
        "scored_at": candidate.scored_at,
        "push_attempted_at": candidate.push_attempted_at,
        "pushed_at": candidate.pushed_at,
        "label_studio_task_id": candidate.label_studio_task_id,
        "wanted_votes": candidate.wanted_votes,
        "label_studio_overlap": candidate.label_studio_overlap,
        "decision": candidate.decision,
        "decided_at": candidate.decided_at,
        "version": candidate.version,
        "override_outcome": override.outcome.value if override else None,
        "override_reason": override.reason if override else None,
        "override_by": override.by if override else None,
        "override_at": override.at if override else None,
        "label_studio_read_at": candidate.label_studio_read_at,
    }


def _copy_candidate(candidate: Candidate, row: CandidateRow) -> None:
    for name, value in _candidate_columns(candidate).items():
        setattr(row, name, value)


_CANDIDATE_TABLE: Any = CandidateRow.__table__  # type: ignore[attr-defined]
_SAVE_MANY = (
    update(_CANDIDATE_TABLE)
    .where(_CANDIDATE_TABLE.c.id == bindparam("b_id"))
    .values(
        {
            name: bindparam(f"b_{name}")
            for name in _candidate_columns(
                Candidate(id="", round_id=0, inputs={}, writer_label="", writer_id="")
            )
        }
    )
)


def _chunked(values: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    return (values[i : i + size] for i in range(0, len(values), size))


def record_of(row: AnnotationRow) -> AnnotationRecord:
    """The domain's view of a stored annotation."""
    return AnnotationRecord(
        annotation_id=row.id,
        annotator=row.annotator_id,
        label=row.label,
        flagged=row.flagged,
        reason=row.flag_reason,
        was_cancelled=row.was_cancelled,
        updated_at=as_utc(row.updated_at),
        created_at=as_utc(row.created_at),
        lead_time_s=row.lead_time_s,
        late=row.late,
    )


class SqlCandidateRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._map = IdentityMap(session, CandidateRow, candidate_of, key=lambda row: row.id)
        self._keep = self._map.keep

    def get(self, candidate_id: str, *, for_update: bool = False) -> Candidate | None:
        return self._map.first(
            select(CandidateRow).where(CandidateRow.id == candidate_id), for_update=for_update
        )

    def get_many(self, candidate_ids: Collection[str]) -> dict[str, Candidate]:
        rows = self._session.exec(
            select(CandidateRow).where(col(CandidateRow.id).in_(list(candidate_ids)))
        ).all()
        return {c.id: c for c in self._keep(rows)}

    def by_task(self, round_id: int, task_id: int) -> Candidate | None:
        return self._map.first(
            select(CandidateRow).where(
                CandidateRow.round_id == round_id, CandidateRow.label_studio_task_id == task_id
            )
        )

    def add(self, candidate: Candidate) -> None:
        row = CandidateRow(
            id=candidate.id,
            round_id=candidate.round_id,
            inputs=dict(candidate.inputs),
            writer_label=candidate.writer_label,
            writer_id=candidate.writer_id,
            submitted_by=candidate.submitted_by,
            collected_by=candidate.collected_by,
            rationale=candidate.rationale,
            status=candidate.status.value,
        )
        if candidate.submitted_at is not None:
            row.submitted_at = candidate.submitted_at
        _copy_candidate(candidate, row)
        self._session.add(row)
        self._map.remember(row)
        self._add_history(candidate)

    def save(self, candidate: Candidate) -> None:
        row = self._map.row(candidate.id)
        _copy_candidate(candidate, row)
        self._session.add(row)
        self._add_history(candidate)

    def mark_push_attempted(self, candidate_ids: Collection[str], at: datetime) -> None:
        """Record that an import of these candidates is about to be tried (one UPDATE)."""
        for chunk in _chunked(sorted(candidate_ids), 500):
            self._session.connection().execute(
                update(_CANDIDATE_TABLE).where(_CANDIDATE_TABLE.c.id.in_(chunk)).values(push_attempted_at=at)
            )

    def save_many(self, candidates: Sequence[Candidate]) -> None:
        """:meth:`save` for many candidates, whether or not this unit of work loaded them: one
        ``executemany`` UPDATE and one INSERT of their new history entries, at once (no row is
        read first). The session's copies of these rows, if it holds any, are not refreshed."""
        if not candidates:
            return
        connection = self._session.connection()  # Core statements: no ORM bulk semantics
        connection.execute(
            _SAVE_MANY,
            [
                {"b_id": c.id, **{f"b_{name}": value for name, value in _candidate_columns(c).items()}}
                for c in candidates
            ],
        )
        history = [
            {
                "candidate_id": c.id,
                "outcome": entry.outcome,
                "rule_version": entry.rule_version,
                "policy": dict(entry.policy),
                "ballots": list(entry.ballots),
                "figures": dict(entry.figures),
                "cause": entry.cause,
                "made_at": entry.made_at,
            }
            for c in candidates
            for entry in c.history
        ]
        if history:
            connection.execute(insert(DecisionRow.__table__), history)  # type: ignore[attr-defined]
        for candidate in candidates:
            candidate.history.clear()

    def _add_history(self, candidate: Candidate) -> None:
        for entry in candidate.history:
            self._session.add(
                DecisionRow(
                    candidate_id=candidate.id,
                    outcome=entry.outcome,
                    rule_version=entry.rule_version,
                    policy=dict(entry.policy),
                    ballots=list(entry.ballots),
                    figures=dict(entry.figures),
                    cause=entry.cause,
                    made_at=entry.made_at,
                )
            )
        candidate.history.clear()

    def annotations(self, candidate_id: str) -> list[AnnotationRecord]:
        rows = self._session.exec(
            select(AnnotationRow).where(AnnotationRow.candidate_id == candidate_id)
        ).all()
        return [record_of(r) for r in rows]

    def annotations_of(self, candidate_ids: Collection[str]) -> dict[str, list[AnnotationRecord]]:
        found: dict[str, list[AnnotationRecord]] = {c: [] for c in candidate_ids}
        for start in range(0, len(candidate_ids), 500):
            chunk = list(candidate_ids)[start : start + 500]
            for row in self._session.exec(
                select(AnnotationRow).where(col(AnnotationRow.candidate_id).in_(chunk))
            ):
                found[row.candidate_id].append(record_of(row))
        return found

    def cancelled_annotations(self, candidate_id: str) -> int:
        return int(
            self._session.exec(
                select(func.count())
                .select_from(AnnotationRow)
                .where(AnnotationRow.candidate_id == candidate_id, col(AnnotationRow.was_cancelled).is_(True))
            ).one()
        )

    def voters(self, candidate_id: str) -> int:
        rows = self._session.exec(
            select(AnnotationRow.annotator_id)
            .where(AnnotationRow.candidate_id == candidate_id, col(AnnotationRow.was_cancelled).is_(False))
            .distinct()
        ).all()
        return len(rows)

    def history(self, candidate_id: str) -> list[DecisionEntry]:
        rows = self._session.exec(
            select(DecisionRow).where(DecisionRow.candidate_id == candidate_id).order_by(col(DecisionRow.id))
        ).all()
        return [
            DecisionEntry(
                outcome=r.outcome,
                rule_version=r.rule_version,
                policy=dict(r.policy),
                ballots=list(r.ballots),
                figures=dict(r.figures),
                cause=r.cause,
                made_at=as_utc(r.made_at),
            )
            for r in rows
        ]

    def count_with_status(self, round_id: int, status: CandidateStatus) -> int:
        return int(
            self._session.exec(
                select(func.count())
                .select_from(CandidateRow)
                .where(CandidateRow.round_id == round_id, CandidateRow.status == status.value)
            ).one()
        )

    def submitted_counts(self, round_id: int, submitted_by: str) -> dict[tuple[str, bool], int]:
        """The round's candidates submitted under ``submitted_by``, by (status, fooled)."""
        grouped = self._session.exec(
            select(CandidateRow.status, CandidateRow.fooled, func.count())
            .where(CandidateRow.round_id == round_id, CandidateRow.submitted_by == submitted_by)
            .group_by(col(CandidateRow.status), col(CandidateRow.fooled))
        ).all()
        return {(status, bool(fooled)): int(n) for status, fooled, n in grouped}

    def submitted_page(self, round_id: int, submitted_by: str, *, offset: int, limit: int) -> list[Candidate]:
        """The round's candidates submitted under ``submitted_by``, the newest first."""
        rows = self._session.exec(
            select(CandidateRow)
            .where(CandidateRow.round_id == round_id, CandidateRow.submitted_by == submitted_by)
            .order_by(col(CandidateRow.submitted_at).desc(), col(CandidateRow.id).desc())
            .offset(offset)
            .limit(limit)
        ).all()
        return [candidate_of(row) for row in rows]

    def page_with_status(
        self, round_id: int, status: CandidateStatus, *, after: tuple[datetime, str] | None, limit: int
    ) -> list[Candidate]:
        """The round's candidates with ``status`` in (submitted, id) order, after ``after``."""
        statement = select(CandidateRow).where(
            CandidateRow.round_id == round_id, CandidateRow.status == status.value
        )
        if after is not None:
            statement = statement.where(
                (col(CandidateRow.submitted_at) > after[0])
                | ((col(CandidateRow.submitted_at) == after[0]) & (col(CandidateRow.id) > after[1]))
            )
        rows = self._session.exec(
            statement.order_by(col(CandidateRow.submitted_at), col(CandidateRow.id)).limit(limit)
        ).all()
        return self._keep(rows)

    def queued(self, round_id: int, limit: int) -> list[Candidate]:
        rows = self._session.exec(
            select(CandidateRow)
            .where(CandidateRow.round_id == round_id, CandidateRow.status == CandidateStatus.QUEUED.value)
            .order_by(col(CandidateRow.submitted_at))
            .limit(limit)
        ).all()
        return self._keep(rows)

    def left_scoring(self, older_than: datetime, limit: int) -> list[Candidate]:
        rows = self._session.exec(
            select(CandidateRow)
            .where(
                CandidateRow.status == CandidateStatus.SCORING.value,
                col(CandidateRow.submitted_at) < older_than,
            )
            .limit(limit)
        ).all()
        return self._keep(rows)

    def wanting_more_votes(self, round_id: int) -> list[Candidate]:
        rows = self._session.exec(
            select(CandidateRow).where(
                CandidateRow.round_id == round_id,
                col(CandidateRow.label_studio_task_id).is_not(None),
                col(CandidateRow.wanted_votes) > col(CandidateRow.label_studio_overlap),
                # A decided candidate that got more votes than its task asked for wants nothing.
                col(CandidateRow.status).in_([s.value for s in CandidateStatus if s.waits_for_votes]),
            )
        ).all()
        return self._keep(rows)

    def annotated_by(self, round_id: int, annotator: str) -> list[str]:
        rows = self._session.exec(
            select(AnnotationRow.candidate_id)
            .where(AnnotationRow.round_id == round_id, AnnotationRow.annotator_id == annotator)
            .distinct()
        ).all()
        return sorted(rows)

    def annotators(self, round_id: int) -> set[str]:
        """Every raw annotator id with an annotation (or gold answer) in the round."""
        votes = self._session.exec(
            select(AnnotationRow.annotator_id).where(AnnotationRow.round_id == round_id)
        )
        gold = self._session.exec(
            select(GoldAnswerRow.annotator_id).where(GoldAnswerRow.round_id == round_id)
        )
        return set(votes.all()) | set(gold.all())
