"""The SQL repositories: every query of the use cases, and the mapping between rows and domain objects.

Each repository works inside its unit of work's session (:mod:`dynaval.adapters.db.unit_of_work`).
``get`` builds a domain object from a row and keeps the row; ``save`` copies the object back onto
that row, so the session writes only what changed, when the unit of work commits. Row locks
(``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite has one writer at a time anyway) and the push
lease's conditional updates live here, not in the use cases.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, bindparam, func, insert, or_, update
from sqlmodel import Session, col, select

from dynaval.adapters.db.database import MAX_SERIAL_ID
from dynaval.adapters.db.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    AuditEventRow,
    CandidateRow,
    DecisionRow,
    ExclusionEventRow,
    GoldAnswerRow,
    GoldItemRow,
    RoundRow,
    as_utc,
)
from dynaval.domain.audit import AuditEvent
from dynaval.domain.errors import NotFound
from dynaval.domain.validation.candidate import Candidate, CandidateStatus, DecisionEntry, Override
from dynaval.domain.validation.gold import AnnotatorStatus, DecidedBy, ExclusionEvent, GoldAnswer, GoldItem
from dynaval.domain.validation.round import Round, RoundKind, RoundState
from dynaval.domain.validation.votes import AnnotationRecord


def _utc(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


# ------------------------------------------------------------------------------------------ rounds


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
        created_at=_utc(row.created_at),
        closed_at=_utc(row.closed_at),
        frozen_at=_utc(row.frozen_at),
        push_failures=row.push_failures,
        push_retry_at=_utc(row.push_retry_at),
        kind=RoundKind(row.kind),
    )


class SqlRoundRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._rows: dict[int, RoundRow] = {}

    def get(self, round_id: int, *, for_update: bool = False) -> Round:
        """The round, row-locked with ``for_update``; :class:`NotFound` naming ``round_id``."""
        # A larger id names no row; asking PostgreSQL for it would be an overflow error, not a 404.
        row = None
        if 0 < round_id <= MAX_SERIAL_ID:
            statement = select(RoundRow).where(RoundRow.id == round_id)
            row = self._session.exec(statement.with_for_update() if for_update else statement).first()
        if row is None:
            raise NotFound(f"round {round_id} does not exist", field="round_id")
        self._rows[round_id] = row
        return _round_of(row)

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
        assert row.id is not None
        self._rows[row.id] = row
        return _round_of(row)

    def save(self, round_: Round) -> None:
        assert round_.id is not None
        row = self._rows.get(round_.id) or self._session.get(RoundRow, round_.id)
        assert row is not None
        row.name = round_.name
        row.state = round_.state.value
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


# -------------------------------------------------------------------------------------- candidates


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
        submitted_at=_utc(row.submitted_at),
        model_prediction=row.model_prediction,
        model_probabilities=dict(row.model_probabilities) if row.model_probabilities is not None else None,
        model_signature=row.model_signature,
        fooled=row.fooled,
        scored_at=_utc(row.scored_at),
        push_attempted_at=_utc(row.push_attempted_at),
        pushed_at=_utc(row.pushed_at),
        label_studio_task_id=row.label_studio_task_id,
        wanted_votes=row.wanted_votes,
        label_studio_overlap=row.label_studio_overlap,
        decision=dict(row.decision) if row.decision is not None else None,
        decided_at=_utc(row.decided_at),
        version=row.version,
        override=override,
        label_studio_read_at=_utc(row.label_studio_read_at),
    )


def _candidate_columns(candidate: Candidate) -> dict[str, Any]:
    """The columns a save writes, from the domain's candidate."""
    override = candidate.override
    return {
        "status": candidate.status.value,
        "model_prediction": candidate.model_prediction,
        "model_probabilities": candidate.model_probabilities,
        "model_signature": candidate.model_signature,
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
"""The UPDATE of :meth:`SqlCandidateRepository.save_many`: every column a save writes."""


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
        self._rows: dict[str, CandidateRow] = {}

    def _keep(self, rows: Iterable[CandidateRow]) -> list[Candidate]:
        found = []
        for row in rows:
            self._rows[row.id] = row
            found.append(candidate_of(row))
        return found

    def get(self, candidate_id: str, *, for_update: bool = False) -> Candidate | None:
        statement = select(CandidateRow).where(CandidateRow.id == candidate_id)
        if for_update:
            statement = statement.with_for_update()
        row = self._session.exec(statement).first()
        return self._keep([row])[0] if row is not None else None

    def get_many(self, candidate_ids: Collection[str]) -> dict[str, Candidate]:
        rows = self._session.exec(
            select(CandidateRow).where(col(CandidateRow.id).in_(list(candidate_ids)))
        ).all()
        return {c.id: c for c in self._keep(rows)}

    def by_task(self, round_id: int, task_id: int) -> Candidate | None:
        row = self._session.exec(
            select(CandidateRow).where(
                CandidateRow.round_id == round_id, CandidateRow.label_studio_task_id == task_id
            )
        ).first()
        return self._keep([row])[0] if row is not None else None

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
        self._rows[row.id] = row
        self._add_history(candidate)

    def save(self, candidate: Candidate) -> None:
        row = self._rows.get(candidate.id) or self._session.get(CandidateRow, candidate.id)
        assert row is not None, f"candidate {candidate.id} was never loaded"
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


# ------------------------------------------------------------------------------------------- gold


def _gold_of(row: GoldItemRow) -> GoldItem:
    return GoldItem(
        id=row.id,
        round_id=row.round_id,
        inputs=dict(row.inputs),
        label=row.label,
        created_at=_utc(row.created_at),
        push_attempted_at=_utc(row.push_attempted_at),
        pushed_at=_utc(row.pushed_at),
        label_studio_task_id=row.label_studio_task_id,
        label_studio_read_at=_utc(row.label_studio_read_at),
    )


class SqlGoldRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._rows: dict[str, GoldItemRow] = {}

    def _keep(self, rows: Iterable[GoldItemRow]) -> list[GoldItem]:
        found = []
        for row in rows:
            self._rows[row.id] = row
            found.append(_gold_of(row))
        return found

    def add(self, item: GoldItem) -> None:
        row = GoldItemRow(id=item.id, round_id=item.round_id, inputs=dict(item.inputs), label=item.label)
        self._session.add(row)
        self._rows[row.id] = row

    def get(self, item_id: str, *, for_update: bool = False) -> GoldItem | None:
        statement = select(GoldItemRow).where(GoldItemRow.id == item_id)
        if for_update:
            statement = statement.with_for_update()
        row = self._session.exec(statement).first()
        return self._keep([row])[0] if row is not None else None

    def by_task(self, round_id: int, task_id: int) -> GoldItem | None:
        row = self._session.exec(
            select(GoldItemRow).where(
                GoldItemRow.round_id == round_id, GoldItemRow.label_studio_task_id == task_id
            )
        ).first()
        return self._keep([row])[0] if row is not None else None

    def to_push(self, round_id: int, limit: int) -> list[GoldItem]:
        if limit <= 0:
            return []
        rows = self._session.exec(
            select(GoldItemRow)
            .where(GoldItemRow.round_id == round_id, col(GoldItemRow.label_studio_task_id).is_(None))
            .order_by(col(GoldItemRow.created_at), col(GoldItemRow.id))
            .limit(limit)
        ).all()
        return self._keep(rows)

    def save(self, item: GoldItem) -> None:
        row = self._rows.get(item.id) or self._session.get(GoldItemRow, item.id)
        assert row is not None
        row.push_attempted_at = item.push_attempted_at
        row.pushed_at = item.pushed_at
        row.label_studio_task_id = item.label_studio_task_id
        row.label_studio_read_at = item.label_studio_read_at
        self._session.add(row)

    def answers_of_item(self, item_id: str) -> list[GoldAnswer]:
        rows = self._session.exec(select(GoldAnswerRow).where(GoldAnswerRow.gold_item_id == item_id)).all()
        return [_answer_of(r) for r in rows]

    def put_answer(self, round_id: int, answer: GoldAnswer, received_at: datetime) -> None:
        row = self._session.get(GoldAnswerRow, answer.annotation_id) or GoldAnswerRow(
            id=answer.annotation_id,
            gold_item_id=answer.gold_item_id,
            round_id=round_id,
            annotator_id=answer.annotator,
            updated_at=answer.updated_at,
        )
        row.annotator_id = answer.annotator
        row.label = answer.label
        row.was_cancelled = answer.was_cancelled
        row.updated_at = answer.updated_at
        row.received_at = received_at
        self._session.add(row)

    def delete_answer(self, annotation_id: int) -> None:
        row = self._session.get(GoldAnswerRow, annotation_id)
        if row is not None:
            self._session.delete(row)

    def answers(self, round_id: int) -> list[tuple[GoldAnswer, str]]:
        rows = self._session.exec(
            select(GoldAnswerRow, GoldItemRow.label)
            .join(GoldItemRow, col(GoldItemRow.id) == GoldAnswerRow.gold_item_id)
            .where(GoldAnswerRow.round_id == round_id)
        ).all()
        return [(_answer_of(answer), truth) for answer, truth in rows]


def _answer_of(row: GoldAnswerRow) -> GoldAnswer:
    return GoldAnswer(
        annotation_id=row.id,
        gold_item_id=row.gold_item_id,
        annotator=row.annotator_id,
        label=row.label,
        was_cancelled=row.was_cancelled,
        updated_at=as_utc(row.updated_at),
    )


# -------------------------------------------------------------------------------------- annotators


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


# -------------------------------------------------------------------------------------------- audit


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
