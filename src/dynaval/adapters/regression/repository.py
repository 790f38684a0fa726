"""The regression suite's storage: registered models, cases, evaluation runs with every case's
result, and gate runs; and the sources cases are taken from (released dev and test examples)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, insert, literal, or_, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import CursorResult
from sqlmodel import Session, col, select

from dynaval.adapters.db.orm import (
    CandidateRow,
    CaseResultRow,
    EvaluationRunRow,
    GateRunRow,
    RegisteredModelRow,
    RegressionCaseRow,
    ReleaseExampleRow,
    ReleaseRow,
    RevalidationRow,
    as_utc,
)
from dynaval.domain.errors import NotFound
from dynaval.domain.regression.gate import GateResult
from dynaval.domain.regression.suite import CaseResult, RegisteredModel, RegressionCase, latest_outcomes

INSERT_CHUNK = 5_000
SUITE_SPLITS = ("dev_", "test_")
"""Split name prefixes of the released examples that become cases."""


def _model(row: RegisteredModelRow) -> RegisteredModel:
    return RegisteredModel(
        hash=row.hash,
        name=row.name,
        folder=row.folder,
        registered_at=as_utc(row.registered_at),
        shipped=row.shipped,
        shipped_at=as_utc(row.shipped_at) if row.shipped_at else None,
        shipped_by=row.shipped_by,
        shipped_reason=row.shipped_reason,
    )


CASE_COLUMNS = (
    "id", "round_id", "split", "task_type", "inputs", "label", "source", "added_at",
    "round_model_prediction", "retired_at", "retired_by", "retired_reason", "suspect", "confirmed",
)  # fmt: skip


def _case_of(values: dict[str, Any]) -> RegressionCase:
    return RegressionCase(
        **{
            **values,
            "inputs": dict(values["inputs"]),
            "added_at": as_utc(values["added_at"]),
            "retired_at": as_utc(values["retired_at"]) if values["retired_at"] else None,
            "suspect": bool(values["suspect"]),
            "confirmed": bool(values["confirmed"]),
        }
    )


def _case(row: RegressionCaseRow) -> RegressionCase:
    return RegressionCase(
        id=row.id,
        round_id=row.round_id,
        split=row.split,
        task_type=row.task_type,
        inputs=dict(row.inputs),
        label=row.label,
        source=row.source,
        added_at=as_utc(row.added_at),
        round_model_prediction=row.round_model_prediction,
        retired_at=as_utc(row.retired_at) if row.retired_at else None,
        retired_by=row.retired_by,
        retired_reason=row.retired_reason,
        suspect=row.suspect,
        confirmed=row.confirmed,
    )


class SqlRegressionRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    # ------------------------------------------------------------------------------ models

    def register(self, model: RegisteredModel) -> RegisteredModel:
        """Store the model unless its hash is known; the stored one either way."""
        row = self._session.get(RegisteredModelRow, model.hash)
        if row is None:
            row = RegisteredModelRow(
                hash=model.hash, name=model.name, folder=model.folder, registered_at=model.registered_at
            )
            self._session.add(row)
            self._session.flush()
        return _model(row)

    def model(self, model_hash: str) -> RegisteredModel:
        row = self._session.get(RegisteredModelRow, model_hash)
        if row is None:
            raise NotFound(f"no registered model has the hash {model_hash}", field="model")
        return _model(row)

    def models(self) -> list[RegisteredModel]:
        rows = self._session.exec(select(RegisteredModelRow).order_by(col(RegisteredModelRow.registered_at)))
        return [_model(row) for row in rows.all()]

    def save_model(self, model: RegisteredModel) -> None:
        self._session.execute(
            update(RegisteredModelRow)
            .where(col(RegisteredModelRow.hash) == model.hash)
            .values(
                shipped=model.shipped,
                shipped_at=model.shipped_at,
                shipped_by=model.shipped_by,
                shipped_reason=model.shipped_reason,
            )
        )

    # ------------------------------------------------------------------------------- cases

    def released_examples(self) -> Iterator[RegressionCase]:
        """Every dev and test example of every release that the suite lacks, as a case (its source
        the first release that held it); the candidate row gives its inputs, label and the round
        model's answer. Plain columns, and the known cases left out by the database: the sync
        before every evaluation is a cheap query when nothing is new."""
        query = _suite_examples(
            col(ReleaseExampleRow.example_id),
            col(ReleaseExampleRow.split),
            col(ReleaseRow.name),
            col(ReleaseRow.version),
            col(ReleaseRow.task_type),
            col(CandidateRow.round_id),
            col(CandidateRow.inputs),
            col(CandidateRow.writer_label),
            col(CandidateRow.model_prediction),
        ).order_by(col(ReleaseExampleRow.release_id), col(ReleaseExampleRow.example_id))
        for (
            example_id,
            split,
            name,
            version,
            task_type,
            round_id,
            inputs,
            label,
            prediction,
        ) in self._session.execute(query):
            yield RegressionCase(
                id=example_id,
                round_id=round_id,
                split=split,
                task_type=task_type,
                inputs=dict(inputs),
                label=label,
                source=f"release:{name}@{version}",
                round_model_prediction=prediction,
            )

    def add_released_cases(self, release_id: int, *, at: datetime) -> int:
        """Every dev and test example of the release that the suite lacks, added as cases as
        :meth:`released_examples` makes them, by one ``INSERT ... SELECT``: the database copies
        them (a million-row release's 200,000 cases, as objects and dicts, took 125 MB and seconds
        here). How many were added."""
        table = RegressionCaseRow.__table__  # type: ignore[attr-defined]
        chosen = _suite_examples(
            col(ReleaseExampleRow.example_id),
            col(CandidateRow.round_id),
            col(ReleaseExampleRow.split),
            col(ReleaseRow.task_type),
            col(CandidateRow.inputs),
            col(CandidateRow.writer_label),
            literal("release:") + col(ReleaseRow.name) + literal("@") + col(ReleaseRow.version),
            col(CandidateRow.model_prediction),
            literal(at, type_=table.c.added_at.type),
            literal(False, type_=table.c.suspect.type),
            literal(False, type_=table.c.confirmed.type),
        ).where(col(ReleaseExampleRow.release_id) == release_id)
        columns = ["id", "round_id", "split", "task_type", "inputs", "label", "source"]
        columns += ["round_model_prediction", "added_at", "suspect", "confirmed"]
        result = self._session.execute(insert(table).from_select(columns, chosen))
        return int(cast(CursorResult[Any], result).rowcount)

    def case_ids(self) -> set[str]:
        return set(self._session.exec(select(RegressionCaseRow.id)).all())

    def add_cases(self, cases: Iterable[RegressionCase], *, at: datetime) -> int:
        """Add the cases the suite lacks (a known id is left alone); how many were added."""
        known = self.case_ids()
        rows: list[dict[str, Any]] = []
        for case in cases:
            if case.id in known:
                continue
            known.add(case.id)
            rows.append(
                {
                    "id": case.id,
                    "round_id": case.round_id,
                    "split": case.split,
                    "task_type": case.task_type,
                    "inputs": dict(case.inputs),
                    "label": case.label,
                    "source": case.source,
                    "round_model_prediction": case.round_model_prediction,
                    "added_at": at,
                    "suspect": False,
                    "confirmed": False,
                }
            )
        for start in range(0, len(rows), INSERT_CHUNK):
            self._session.execute(insert(RegressionCaseRow), rows[start : start + INSERT_CHUNK])
        return len(rows)

    def case(self, case_id: str) -> RegressionCase:
        row = self._session.get(RegressionCaseRow, case_id) if len(case_id) <= 36 else None
        if row is None:
            raise NotFound(f"the suite has no case {case_id}", field="case")
        return _case(row)

    def cases(
        self, *, retired: bool = False, suspect_only: bool = False, ids: Collection[str] | None = None
    ) -> list[RegressionCase]:
        """The suite's cases (``retired``: the retired ones instead), by split then id."""
        # Plain columns, not ORM rows: every evaluation reads the whole suite.
        columns = [col(getattr(RegressionCaseRow, name)) for name in CASE_COLUMNS]
        query = sa_select(*columns).order_by(col(RegressionCaseRow.split), col(RegressionCaseRow.id))
        query = query.where(
            col(RegressionCaseRow.retired_at).is_not(None)
            if retired
            else col(RegressionCaseRow.retired_at).is_(None)
        )
        if suspect_only:
            query = query.where(col(RegressionCaseRow.suspect).is_(True))
        found = [
            _case_of(dict(zip(CASE_COLUMNS, values, strict=True))) for values in self._session.execute(query)
        ]
        if ids is not None:
            wanted = set(ids)
            found = [c for c in found if c.id in wanted]
        return found

    def save_case(self, case: RegressionCase) -> None:
        self._session.execute(
            update(RegressionCaseRow)
            .where(col(RegressionCaseRow.id) == case.id)
            .values(
                retired_at=case.retired_at,
                retired_by=case.retired_by,
                retired_reason=case.retired_reason,
                suspect=case.suspect,
                confirmed=case.confirmed,
            )
        )

    def mark_suspect(self, case_ids: Collection[str]) -> int:
        """Mark these non-retired, unconfirmed cases suspect; how many were not before."""
        ids = list(case_ids)
        changed = 0
        for start in range(0, len(ids), INSERT_CHUNK):
            result = self._session.execute(
                update(RegressionCaseRow)
                .where(
                    col(RegressionCaseRow.id).in_(ids[start : start + INSERT_CHUNK]),
                    col(RegressionCaseRow.retired_at).is_(None),
                    col(RegressionCaseRow.suspect).is_(False),
                    # A re-validation confirmed its label: every model failing it is the models' fault.
                    col(RegressionCaseRow.confirmed).is_(False),
                )
                .values(suspect=True)
            )
            changed += int(getattr(result, "rowcount", 0) or 0)
        return changed

    def clear_suspects(self, still_suspect: Collection[str]) -> int:
        """Clear the mark of suspect cases no longer failed by every model (a later model got them
        right), except a case under re-validation, which its outcome settles; how many were cleared."""
        keep = set(still_suspect)
        under_revalidation = select(RevalidationRow.case_id).where(col(RevalidationRow.settled_at).is_(None))
        marked = self._session.exec(
            select(RegressionCaseRow.id).where(
                col(RegressionCaseRow.suspect).is_(True),
                col(RegressionCaseRow.id).not_in(under_revalidation),
            )
        ).all()
        ids = [case_id for case_id in marked if case_id not in keep]
        for start in range(0, len(ids), INSERT_CHUNK):
            self._session.execute(
                update(RegressionCaseRow)
                .where(col(RegressionCaseRow.id).in_(ids[start : start + INSERT_CHUNK]))
                .values(suspect=False)
            )
        return len(ids)

    # ----------------------------------------------------------------------------- results

    def start_run(self, model_hash: str, *, at: datetime) -> int:
        row = EvaluationRunRow(model_hash=model_hash, started_at=at)
        self._session.add(row)
        self._session.flush()
        assert row.id is not None
        return row.id

    def add_results(self, run_id: int, results: Sequence[CaseResult]) -> None:
        rows = [
            {
                "run_id": run_id,
                "case_id": r.case_id,
                "model_hash": r.model_hash,
                "prediction": r.prediction,
                "probabilities": dict(r.probabilities),
                "correct": r.correct,
            }
            for r in results
        ]
        for start in range(0, len(rows), INSERT_CHUNK):
            self._session.execute(insert(CaseResultRow), rows[start : start + INSERT_CHUNK])

    def finish_run(self, run_id: int, *, at: datetime, case_count: int) -> None:
        self._session.execute(
            update(EvaluationRunRow)
            .where(col(EvaluationRunRow.id) == run_id)
            .values(finished_at=at, case_count=case_count)
        )

    def results(
        self,
        *,
        model_hash: str | None = None,
        case_id: str | None = None,
        case_ids: Collection[str] | None = None,
    ) -> list[CaseResult]:
        """Results of finished runs in evaluation order (run start, then run id); ``case_ids``, a
        page's worth of cases, keeps the results on those."""
        query = (
            sa_select(
                col(CaseResultRow.case_id),
                col(CaseResultRow.model_hash),
                col(CaseResultRow.prediction),
                col(CaseResultRow.probabilities),
                col(CaseResultRow.correct),
                col(CaseResultRow.run_id),
                col(EvaluationRunRow.started_at),
            )
            .join(EvaluationRunRow, col(EvaluationRunRow.id) == col(CaseResultRow.run_id))
            .where(col(EvaluationRunRow.finished_at).is_not(None))
            .order_by(col(EvaluationRunRow.started_at), col(EvaluationRunRow.id))
        )
        if model_hash is not None:
            query = query.where(col(CaseResultRow.model_hash) == model_hash)
        if case_id is not None:
            query = query.where(col(CaseResultRow.case_id) == case_id)
        if case_ids is not None:
            query = query.where(col(CaseResultRow.case_id).in_(list(case_ids)))
        return [
            CaseResult(
                case_id=case,
                model_hash=model,
                prediction=prediction,
                probabilities=probabilities,
                correct=bool(correct),
                run_id=run_id,
                evaluated_at=as_utc(started),
            )
            for case, model, prediction, probabilities, correct, run_id, started in self._session.execute(
                query
            )
        ]

    def latest_outcomes(self) -> dict[str, dict[str, bool]]:
        """Case id -> model hash -> whether the model's latest finished result on it was right."""
        query = (
            sa_select(col(CaseResultRow.case_id), col(CaseResultRow.model_hash), col(CaseResultRow.correct))
            .join(EvaluationRunRow, col(EvaluationRunRow.id) == col(CaseResultRow.run_id))
            .where(col(EvaluationRunRow.finished_at).is_not(None))
            .order_by(col(EvaluationRunRow.started_at), col(EvaluationRunRow.id))
        )
        return latest_outcomes((c, m, bool(ok)) for c, m, ok in self._session.execute(query))

    def results_fingerprint(self) -> tuple[int, int | None, int]:
        """What every model's accuracy over the suite depends on: the finished evaluation runs (how
        many, the latest id) and the retired cases (how many). Two counts and a max."""
        finished = col(EvaluationRunRow.finished_at).is_not(None)
        runs, latest = self._session.execute(
            sa_select(func.count(), func.max(col(EvaluationRunRow.id))).where(finished)
        ).one()
        retired = self._session.execute(
            sa_select(func.count()).where(col(RegressionCaseRow.retired_at).is_not(None))
        ).scalar_one()
        return (int(runs), latest, int(retired))

    # ------------------------------------------------------------------------------- gates

    def add_gate_run(
        self, *, candidate_hash: str, baseline: str, result: GateResult, by: str, at: datetime
    ) -> int:
        data = result.to_dict()
        row = GateRunRow(
            candidate_hash=candidate_hash,
            baseline=baseline,
            max_flips=result.max_flips,
            passed=result.passed,
            negative_flips=data["negative_flips"],
            positive_flips=result.positive_flips,
            per_round=data["per_round"],
            mcnemar=data["mcnemar"],
            created_at=at,
            created_by=by,
        )
        self._session.add(row)
        self._session.flush()
        assert row.id is not None
        return row.id

    def gate_runs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest gate runs, newest first."""
        rows = self._session.exec(select(GateRunRow).order_by(col(GateRunRow.id).desc()).limit(limit)).all()
        return [_gate_run(row) for row in rows]

    def latest_gate_run_of_each(self) -> dict[str, dict[str, Any]]:
        newest = sa_select(func.max(GateRunRow.id)).group_by(GateRunRow.candidate_hash)
        rows = self._session.exec(select(GateRunRow).where(col(GateRunRow.id).in_(newest))).all()
        return {row.candidate_hash: _gate_run(row) for row in rows}


def _gate_run(row: GateRunRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "candidate": row.candidate_hash,
        "baseline": row.baseline,
        "max_flips": row.max_flips,
        "passed": row.passed,
        "negative_flips": row.negative_flips,
        "positive_flips": row.positive_flips,
        "per_round": row.per_round,
        "mcnemar": row.mcnemar,
        "created_at": as_utc(row.created_at).isoformat(),
        "created_by": row.created_by,
    }


def _suite_examples(*columns: Any) -> Any:
    """``columns`` of the released dev and test examples the suite lacks (a release's example
    joined to its release and its candidate): the one rule of which released examples become
    cases, for :meth:`SqlRegressionRepository.released_examples` and ``add_released_cases``."""
    known = select(RegressionCaseRow.id).where(col(RegressionCaseRow.id) == col(ReleaseExampleRow.example_id))
    return (
        sa_select(*columns)
        .join(ReleaseRow, col(ReleaseRow.id) == col(ReleaseExampleRow.release_id))
        .join(CandidateRow, col(CandidateRow.id) == col(ReleaseExampleRow.example_id))
        .where(or_(*(col(ReleaseExampleRow.split).startswith(p) for p in SUITE_SPLITS)))
        .where(~known.exists())
    )
