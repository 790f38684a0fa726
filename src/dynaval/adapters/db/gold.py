"""The gold items' storage, and the annotators' answers to them.

A repository of the SQL unit of work (:mod:`dynaval.adapters.db.unit_of_work`); its rows are kept
by an :class:`~dynaval.adapters.db.identity_map.IdentityMap`.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, col, select

from dynaval.adapters.db.identity_map import IdentityMap, utc
from dynaval.adapters.db.orm import (
    GoldAnswerRow,
    GoldItemRow,
    as_utc,
)
from dynaval.domain.validation.gold import GoldAnswer, GoldItem


def _gold_of(row: GoldItemRow) -> GoldItem:
    return GoldItem(
        id=row.id,
        round_id=row.round_id,
        inputs=dict(row.inputs),
        label=row.label,
        created_at=utc(row.created_at),
        push_attempted_at=utc(row.push_attempted_at),
        pushed_at=utc(row.pushed_at),
        label_studio_task_id=row.label_studio_task_id,
        label_studio_read_at=utc(row.label_studio_read_at),
    )


class SqlGoldRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._map = IdentityMap(session, GoldItemRow, _gold_of, key=lambda row: row.id)

    def add(self, item: GoldItem) -> None:
        row = GoldItemRow(id=item.id, round_id=item.round_id, inputs=dict(item.inputs), label=item.label)
        self._session.add(row)
        self._map.remember(row)

    def get(self, item_id: str, *, for_update: bool = False) -> GoldItem | None:
        return self._map.first(select(GoldItemRow).where(GoldItemRow.id == item_id), for_update=for_update)

    def by_task(self, round_id: int, task_id: int) -> GoldItem | None:
        return self._map.first(
            select(GoldItemRow).where(
                GoldItemRow.round_id == round_id, GoldItemRow.label_studio_task_id == task_id
            )
        )

    def to_push(self, round_id: int, limit: int) -> list[GoldItem]:
        if limit <= 0:
            return []
        rows = self._session.exec(
            select(GoldItemRow)
            .where(GoldItemRow.round_id == round_id, col(GoldItemRow.label_studio_task_id).is_(None))
            .order_by(col(GoldItemRow.created_at), col(GoldItemRow.id))
            .limit(limit)
        ).all()
        return self._map.keep(rows)

    def save(self, item: GoldItem) -> None:
        row = self._map.row(item.id)
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
