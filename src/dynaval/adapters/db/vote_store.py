"""Storage of the votes read back from Label Studio, many tasks at a time (Core statements).

Applying a read of Label Studio is the busiest write the service does: every webhook's task, and
every task of a round at each reconcile. One chunk of tasks is applied in one transaction with a
handful of statements, whatever its size: the candidates locked together (``SELECT ... FOR UPDATE``
on PostgreSQL, in id order so that two chunks never wait for each other in a circle), their stored
annotations read together, and the changes written with ``executemany``.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Delete, Insert, Select, Update, bindparam, literal, select, union_all
from sqlalchemy import delete as sa_delete
from sqlalchemy import insert as sa_insert
from sqlalchemy import update as sa_update
from sqlalchemy.engine import Connection
from sqlmodel import Session

from dynaval.adapters.db.candidates import candidate_of
from dynaval.adapters.db.orm import (
    AnnotationRow,
    CandidateRow,
    DecisionRow,
    GoldItemRow,
    as_utc,
)
from dynaval.service_layer.validation.storage import ANNOTATION_FIELDS, StoredCandidate, VoteWrites

_IN_CHUNK = 500


@dataclass(frozen=True)
class _Statements:
    task_kinds: Any
    candidates: Select[Any]
    annotations: Select[Any]
    owners: Select[Any]
    insert_annotation: Insert
    update_annotation: Update
    delete_annotations: Delete
    update_decision: Update
    mark_read: Update
    insert_history: Insert


def _table(row: type) -> Any:
    return row.__table__  # type: ignore[attr-defined]


@functools.cache
def _statements(dialect: str) -> _Statements:
    candidate = _table(CandidateRow)
    gold_item = _table(GoldItemRow)
    annotation = _table(AnnotationRow)
    task_ids: Any = bindparam("task_ids", expanding=True)
    return _Statements(
        task_kinds=union_all(
            select(candidate.c.label_studio_task_id, literal("candidate").label("kind")).where(
                candidate.c.round_id == bindparam("round_id"), candidate.c.label_studio_task_id.in_(task_ids)
            ),
            select(gold_item.c.label_studio_task_id, literal("gold").label("kind")).where(
                gold_item.c.round_id == bindparam("round_id"), gold_item.c.label_studio_task_id.in_(task_ids)
            ),
        ),
        candidates=select(candidate)
        .where(candidate.c.round_id == bindparam("round_id"), candidate.c.label_studio_task_id.in_(task_ids))
        .order_by(candidate.c.id)
        .with_for_update(),
        annotations=select(
            annotation.c.id,
            annotation.c.candidate_id,
            annotation.c.late,
            *(annotation.c[f] for f in ANNOTATION_FIELDS),
        ).where(annotation.c.candidate_id.in_(bindparam("candidate_ids", expanding=True))),
        owners=select(annotation.c.id, annotation.c.candidate_id).where(
            annotation.c.id.in_(bindparam("annotation_ids", expanding=True))
        ),
        insert_annotation=sa_insert(annotation),
        update_annotation=sa_update(annotation)
        .where(annotation.c.id == bindparam("b_id"))
        .values({name: bindparam(f"b_{name}") for name in (*ANNOTATION_FIELDS, "received_at", "source")}),
        delete_annotations=sa_delete(annotation).where(annotation.c.id.in_(bindparam("ids", expanding=True))),
        update_decision=sa_update(candidate)
        .where(candidate.c.id == bindparam("b_candidate_id"))
        .values(
            status=bindparam("b_status"),
            decision=bindparam("b_decision"),
            wanted_votes=bindparam("b_wanted_votes"),
            decided_at=bindparam("b_decided_at"),
            label_studio_read_at=bindparam("b_read_at"),
            version=candidate.c.version + 1,
        ),
        mark_read=sa_update(candidate)
        .where(candidate.c.id == bindparam("b_candidate_id"))
        .values(label_studio_read_at=bindparam("b_read_at")),
        insert_history=sa_insert(_table(DecisionRow)),
    )


def _dialect(connection: Connection) -> str:
    return "sqlite" if connection.dialect.name == "sqlite" else "postgresql"


def _chunks(values: Sequence[Any]) -> list[Sequence[Any]]:
    return [values[i : i + _IN_CHUNK] for i in range(0, len(values), _IN_CHUNK)]


class SqlVoteStore:
    """The votes read back from Label Studio, inside one unit of work (Core statements on its
    connection)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    @property
    def _connection(self) -> Connection:
        return self._session.connection()

    def task_kinds(self, round_id: int, task_ids: Collection[int]) -> dict[int, str]:
        """For each of these tasks linked to the round: ``"candidate"`` or ``"gold"``."""
        connection = self._connection
        statement = _statements(_dialect(connection)).task_kinds
        found: dict[int, str] = {}
        for chunk in _chunks(sorted(set(task_ids))):
            for task_id, kind in connection.execute(
                statement, {"round_id": round_id, "task_ids": list(chunk)}
            ):
                found[int(task_id)] = str(kind)
        return found

    def lock_candidates(self, round_id: int, task_ids: Collection[int]) -> dict[int, StoredCandidate]:
        """The round's candidates of these tasks, row-locked, with their stored annotations, by task id."""
        connection = self._connection
        statements = _statements(_dialect(connection))
        found: dict[int, StoredCandidate] = {}
        for chunk in _chunks(sorted(set(task_ids))):
            for row in connection.execute(
                statements.candidates, {"round_id": round_id, "task_ids": list(chunk)}
            ):
                # The row's columns carry the ORM row's names: no ORM object is made (building one
                # per candidate cost as much as the rest of the read).
                stored = StoredCandidate(candidate_of(cast(CandidateRow, row)))
                found[int(row.label_studio_task_id)] = stored
        by_id = {c.candidate.id: c for c in found.values()}
        for chunk in _chunks(sorted(by_id)):
            for row in connection.execute(statements.annotations, {"candidate_ids": list(chunk)}):
                values = {name: getattr(row, name) for name in ANNOTATION_FIELDS}
                values["created_at"] = as_utc(values["created_at"])
                values["updated_at"] = as_utc(values["updated_at"])
                by_id[row.candidate_id].annotations[int(row.id)] = values
                if row.late:
                    by_id[row.candidate_id].late.add(int(row.id))
        return found

    def annotation_owners(self, annotation_ids: Collection[int]) -> dict[int, str]:
        """The candidate each of these stored annotation ids belongs to."""
        connection = self._connection
        statement = _statements(_dialect(connection)).owners
        owners: dict[int, str] = {}
        for chunk in _chunks(sorted(set(annotation_ids))):
            rows = connection.execute(statement, {"annotation_ids": list(chunk)})
            owners.update((int(i), str(c)) for i, c in rows)
        return owners

    def write(self, writes: VoteWrites) -> None:
        """Apply one chunk's changes, each kind with one ``executemany``."""
        connection = self._connection
        statements = _statements(_dialect(connection))
        if writes.deleted:
            for chunk in _chunks(writes.deleted):
                connection.execute(statements.delete_annotations, {"ids": list(chunk)})
        if writes.inserted:
            connection.execute(statements.insert_annotation, writes.inserted)
        if writes.updated:
            connection.execute(statements.update_annotation, [_prefixed(u) for u in writes.updated])
        if writes.decisions:
            connection.execute(statements.update_decision, [_prefixed(d) for d in writes.decisions])
        if writes.history:
            connection.execute(statements.insert_history, writes.history)
        if writes.read_only:
            connection.execute(statements.mark_read, [_prefixed(r) for r in writes.read_only])


def _prefixed(values: dict[str, Any]) -> dict[str, Any]:
    """Bound parameters of an UPDATE may not share a column's name: they carry a ``b_`` prefix."""
    return {f"b_{k}": v for k, v in values.items()}
