"""Storage of the tasks that wait to be read back from Label Studio (``task_check``).

A webhook names a task (or, for a deletion, annotation ids that lead to tasks); the task waits here
until the service reads it from Label Studio with its own key. One row per task, whatever the
number of webhooks: a webhook for a task already waiting only moves its ``requested_at`` on. The
rows of a round are bounded by the round's tasks, so no stream of webhooks can grow this table
without end.

The webhook's statements run on a Core connection (the webhook is the one route that sees a steady
stream); they are built once per SQL dialect.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Delete,
    Insert,
    Select,
    bindparam,
    case,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy import delete as sa_delete
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlmodel import Session

from dynaval.adapters.db.orm import (
    AnnotationRow,
    CandidateRow,
    GoldAnswerRow,
    GoldItemRow,
    RoundRow,
    TaskCheckRow,
    as_utc,
)

# Ids per IN (...) list: well under SQLite's and PostgreSQL's limits on bound parameters.
_IN_CHUNK = 500


@dataclass(frozen=True)
class _Statements:
    round_by_project: Select[Any]
    task_in_round: CompoundSelect[Any]
    request_check: Insert
    tasks_of_annotations: CompoundSelect[Any]
    pending: Select[Any]
    settle: Delete


def _table(row: type) -> Any:
    return row.__table__  # type: ignore[attr-defined]


@functools.cache
def _statements(dialect: str) -> _Statements:
    round_table = _table(RoundRow)
    candidate = _table(CandidateRow)
    gold_item = _table(GoldItemRow)
    annotation = _table(AnnotationRow)
    gold_answer = _table(GoldAnswerRow)
    check = _table(TaskCheckRow)
    insert_into = sqlite_insert if dialect == "sqlite" else postgresql_insert
    upsert = insert_into(check)
    return _Statements(
        round_by_project=select(round_table.c.id).where(
            round_table.c.label_studio_project_id == bindparam("project_id")
        ),
        task_in_round=union_all(
            select(literal(1)).where(
                candidate.c.label_studio_task_id == bindparam("task_id"),
                candidate.c.round_id == bindparam("round_id"),
            ),
            select(literal(1)).where(
                gold_item.c.label_studio_task_id == bindparam("task_id"),
                gold_item.c.round_id == bindparam("round_id"),
            ),
        ).limit(1),
        # A request keeps its latest time: a hint the task queue recorded late (it carries its
        # webhook's time) never moves an earlier read's boundary past a newer request.
        request_check=upsert.on_conflict_do_update(
            index_elements=[check.c.task_id],
            set_={
                "requested_at": case(
                    (check.c.requested_at > upsert.excluded.requested_at, check.c.requested_at),
                    else_=upsert.excluded.requested_at,
                )
            },
            # A task id is one round's: a row of another round is never taken over.
            where=check.c.round_id == upsert.excluded.round_id,
        ),
        tasks_of_annotations=union_all(
            select(candidate.c.label_studio_task_id.label("task_id"))
            .select_from(annotation.join(candidate, candidate.c.id == annotation.c.candidate_id))
            .where(
                annotation.c.id.in_(bindparam("annotation_ids", expanding=True)),
                annotation.c.round_id == bindparam("round_id"),
            ),
            select(gold_item.c.label_studio_task_id.label("task_id"))
            .select_from(gold_answer.join(gold_item, gold_item.c.id == gold_answer.c.gold_item_id))
            .where(
                gold_answer.c.id.in_(bindparam("annotation_ids", expanding=True)),
                gold_answer.c.round_id == bindparam("round_id"),
            ),
        ),
        pending=select(check.c.task_id)
        .where(check.c.round_id == bindparam("round_id"), check.c.requested_at <= bindparam("until"))
        .order_by(check.c.requested_at, check.c.task_id)
        .limit(bindparam("limit")),
        settle=sa_delete(check).where(
            check.c.round_id == bindparam("round_id"),
            check.c.task_id.in_(bindparam("task_ids", expanding=True)),
            check.c.requested_at <= bindparam("read_at"),
        ),
    )


def _dialect(connection: Connection) -> str:
    return "sqlite" if connection.dialect.name == "sqlite" else "postgresql"


class SqlTaskChecks:
    """The tasks waiting to be read back, inside one unit of work."""

    def __init__(self, session: Session) -> None:
        self._session = session

    @property
    def _connection(self) -> Connection:
        return self._session.connection()

    def round_of_project(self, project_id: int) -> int | None:
        """The id of the round whose Label Studio project this is, or None."""
        connection = self._connection
        value = connection.execute(
            _statements(_dialect(connection)).round_by_project, {"project_id": project_id}
        )
        found = value.scalar()
        return int(found) if found is not None else None

    def is_task_of_round(self, round_id: int, task_id: int) -> bool:
        """Whether the task is a candidate's or a gold item's of the round."""
        connection = self._connection
        statement = _statements(_dialect(connection)).task_in_round
        return connection.execute(statement, {"task_id": task_id, "round_id": round_id}).first() is not None

    def tasks_of_annotations(self, round_id: int, annotation_ids: Collection[int]) -> set[int]:
        """The tasks of the round that hold any of these stored annotations (or gold answers). Ids
        the service never stored for this round lead nowhere."""
        connection = self._connection
        statement = _statements(_dialect(connection)).tasks_of_annotations
        ids = sorted(set(annotation_ids))
        found: set[int] = set()
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            rows = connection.execute(statement, {"annotation_ids": chunk, "round_id": round_id})
            found.update(int(task_id) for (task_id,) in rows if task_id is not None)
        return found

    def request(self, round_id: int, task_ids: Iterable[int], at: datetime) -> None:
        """Ask for these tasks of the round to be read back from Label Studio (again, if waiting). A
        request already waiting keeps the later of the two times."""
        self.request_each(round_id, dict.fromkeys(task_ids, at))

    def last_read(self, round_id: int, task_ids: Collection[int]) -> dict[int, datetime]:
        """When the stored copy of each of these candidates' tasks of the round was read from Label
        Studio (the read's start); a task never read, or a gold item's, is absent."""
        candidate = _table(CandidateRow)
        statement = select(candidate.c.label_studio_task_id, candidate.c.label_studio_read_at).where(
            candidate.c.round_id == round_id,
            candidate.c.label_studio_task_id.in_(bindparam("task_ids", expanding=True)),
            candidate.c.label_studio_read_at.is_not(None),
        )
        ids = sorted(set(task_ids))
        found: dict[int, datetime] = {}
        for start in range(0, len(ids), _IN_CHUNK):
            rows = self._connection.execute(statement, {"task_ids": ids[start : start + _IN_CHUNK]})
            found.update((int(task_id), as_utc(read_at)) for task_id, read_at in rows)
        return found

    def request_each(self, round_id: int, times: Mapping[int, datetime]) -> None:
        """:meth:`request` for many tasks of the round at once, each at its own time (task -> time):
        one statement for them all."""
        rows = [
            {"task_id": task_id, "round_id": round_id, "requested_at": times[task_id]}
            for task_id in sorted(times)
        ]
        if rows:
            connection = self._connection
            connection.execute(_statements(_dialect(connection)).request_check, rows)

    def pending(self, round_id: int, *, until: datetime, limit: int) -> list[int]:
        """Tasks of the round asked for at or before ``until``, the longest-waiting first."""
        connection = self._connection
        statement = _statements(_dialect(connection)).pending
        found = connection.execute(statement, {"round_id": round_id, "until": until, "limit": limit})
        return [int(task_id) for (task_id,) in found]

    def settle(self, round_id: int, task_ids: Collection[int], read_at: datetime) -> int:
        """Forget the requests that a read of Label Studio started at ``read_at`` answered. A request
        that came during the read stays: what it announced may be missing from the read."""
        connection = self._connection
        statement = _statements(_dialect(connection)).settle
        ids = sorted(set(task_ids))
        settled = 0
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            result = connection.execute(
                statement, {"round_id": round_id, "task_ids": chunk, "read_at": read_at}
            )
            settled += int(result.rowcount or 0)
        return settled

    def settle_round(self, round_id: int, read_at: datetime) -> int:
        """Forget every request of the round that a read of all its tasks, started at ``read_at``,
        answered."""
        check = _table(TaskCheckRow)
        result = self._connection.execute(
            sa_delete(check).where(check.c.round_id == round_id, check.c.requested_at <= read_at)
        )
        return int(result.rowcount or 0)

    def rounds_waiting(self) -> list[int]:
        """Rounds that have tasks waiting to be read back."""
        check = _table(TaskCheckRow)
        rows = self._connection.execute(select(check.c.round_id).distinct().order_by(check.c.round_id))
        return [int(r) for (r,) in rows]

    def waiting(self, round_id: int) -> tuple[int, datetime | None]:
        """How many of the round's tasks wait to be read back, and since when the longest has waited."""
        check = _table(TaskCheckRow)
        count, oldest = self._connection.execute(
            select(func.count(), func.min(check.c.requested_at)).where(check.c.round_id == round_id)
        ).one()
        return int(count), as_utc(oldest) if oldest is not None else None
