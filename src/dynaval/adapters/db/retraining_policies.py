"""The retraining policies' storage: one row per task type that ever had one (``retraining_policy``),
and their audit log (``retraining_event``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from dynaval.adapters.db.identity_map import utc
from dynaval.adapters.db.orm import RetrainingEventRow, RetrainingPolicyRow, TrainedExampleRow, as_utc
from dynaval.domain.errors import StorageConflict
from dynaval.domain.retraining.audit import RetrainingEvent, RetrainingStep
from dynaval.domain.retraining.policy import RetrainingPolicy, ShipMode, TrainFrom, TrainingSettings


def _policy(row: RetrainingPolicyRow) -> RetrainingPolicy:
    return RetrainingPolicy(
        task_type=row.task_type,
        every=row.every,
        ship=ShipMode(row.ship),
        min_interval_s=row.min_interval_s,
        base=TrainFrom(row.base),
        max_flips=row.max_flips,
        training=TrainingSettings(**row.training),
        counted_from=row.counted_from,
        last_run_at=utc(row.last_run_at),
        updated_by=row.updated_by,
        updated_at=utc(row.updated_at),
    )


class SqlRetrainingPolicyRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def get(self, task_type: str, *, for_update: bool = False) -> RetrainingPolicy | None:
        statement = select(RetrainingPolicyRow).where(RetrainingPolicyRow.task_type == task_type)
        if for_update:
            statement = statement.with_for_update().execution_options(populate_existing=True)
        row = self._session.exec(statement).first()
        return None if row is None else _policy(row)

    def save(self, policy: RetrainingPolicy) -> None:
        row = self._session.get(RetrainingPolicyRow, policy.task_type)
        if row is None:
            row = RetrainingPolicyRow(
                task_type=policy.task_type, ship="", min_interval_s=0, base="", max_flips=0,
                training={}, counted_from=0, updated_by="",
            )  # fmt: skip
            self._session.add(row)
        settings = policy.settings()
        row.every = policy.every
        row.ship = policy.ship.value
        row.min_interval_s = policy.min_interval_s
        row.base = policy.base.value
        row.max_flips = policy.max_flips
        row.training = {name: settings[name] for name in TrainingSettings.__dataclass_fields__}
        row.counted_from = policy.counted_from
        row.last_run_at = policy.last_run_at
        row.updated_by = policy.updated_by
        row.updated_at = policy.updated_at
        try:
            self._session.flush()
        except IntegrityError:  # another request stored the task type's first policy meanwhile
            raise StorageConflict(
                f"the retraining policy of {policy.task_type} was set by another request meanwhile; try again"
            ) from None

    def turned_on(self) -> list[RetrainingPolicy]:
        rows = self._session.exec(
            select(RetrainingPolicyRow)
            .where(col(RetrainingPolicyRow.every).is_not(None))
            .order_by(col(RetrainingPolicyRow.task_type))
        ).all()
        return [_policy(row) for row in rows]

    def log(self, event: RetrainingEvent) -> None:
        self._session.add(
            RetrainingEventRow(
                task_type=event.task_type, step=event.step.value, by=event.by, job_id=event.job_id,
                detail=event.detail, at=event.at,
            )
        )  # fmt: skip
        self._session.flush()

    def record_trained(
        self,
        task_type: str,
        example_ids: Collection[str],
        *,
        job_id: int | None,
        model_hash: str,
        at: datetime,
    ) -> None:
        known = set(
            self._session.exec(
                select(TrainedExampleRow.example_id).where(TrainedExampleRow.task_type == task_type)
            ).all()
        )
        self._session.add_all(
            TrainedExampleRow(
                example_id=example_id,
                task_type=task_type,
                job_id=job_id,
                model_hash=model_hash,
                trained_at=at,
            )
            for example_id in sorted(set(example_ids) - known)
        )
        self._session.flush()

    def trained_ids(self, task_type: str) -> set[str]:
        rows = self._session.exec(
            select(TrainedExampleRow.example_id).where(TrainedExampleRow.task_type == task_type)
        ).all()
        return set(rows)

    def events(self, task_type: str, limit: int) -> list[RetrainingEvent]:
        rows = self._session.exec(
            select(RetrainingEventRow)
            .where(RetrainingEventRow.task_type == task_type)
            .order_by(col(RetrainingEventRow.id).desc())
            .limit(limit)
        ).all()
        return [
            RetrainingEvent(
                task_type=row.task_type,
                step=RetrainingStep(row.step),
                by=row.by,
                at=as_utc(row.at),
                detail=dict(row.detail),
                job_id=row.job_id,
                id=row.id,
            )
            for row in rows
        ]
