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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Insert, Select, Update, bindparam, literal, select, union_all
from sqlalchemy import delete as sa_delete
from sqlalchemy import insert as sa_insert
from sqlalchemy import update as sa_update
from sqlalchemy.engine import Connection

from dynaval.adapters.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    CandidateRow,
    DecisionRow,
    GoldItemRow,
    as_utc,
)

_IN_CHUNK = 500

ANNOTATION_FIELDS = (
    "annotator_id", "label", "flagged", "flag_reason", "was_cancelled", "lead_time_s",
    "created_at", "updated_at",
)  # fmt: skip


@dataclass
class StoredCandidate:
    """A candidate as a read of Label Studio needs it, with its stored annotations by id."""

    id: str
    task_id: int
    status: str
    writer_label: str
    decision: dict[str, Any] | None
    override_outcome: str | None
    wanted_votes: int
    label_studio_overlap: int
    read_at: datetime | None
    annotations: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Annotation id -> the columns of :data:`ANNOTATION_FIELDS` (times in UTC)."""


@dataclass
class VoteWrites:
    """What one chunk changes; :func:`write` applies it all."""

    inserted: list[dict[str, Any]] = field(default_factory=list)
    updated: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """Candidate columns of a changed decision (``candidate_id``, ``status``, ``decision``,
    ``wanted_votes``, ``decided_at``, ``read_at``)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    read_only: list[dict[str, Any]] = field(default_factory=list)
    """Candidates whose decision stands: only when their copy was read (``candidate_id``, ``read_at``)."""


@dataclass(frozen=True)
class _Statements:
    task_kinds: Any
    candidates: Select[Any]
    annotations: Select[Any]
    owners: Select[Any]
    excluded: Select[Any]
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
    status = _table(AnnotatorStatusRow)
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
        candidates=select(
            candidate.c.id,
            candidate.c.label_studio_task_id,
            candidate.c.status,
            candidate.c.writer_label,
            candidate.c.decision,
            candidate.c.override_outcome,
            candidate.c.wanted_votes,
            candidate.c.label_studio_overlap,
            candidate.c.label_studio_read_at,
        )
        .where(candidate.c.round_id == bindparam("round_id"), candidate.c.label_studio_task_id.in_(task_ids))
        .order_by(candidate.c.id)
        .with_for_update(),
        annotations=select(
            annotation.c.id, annotation.c.candidate_id, *(annotation.c[f] for f in ANNOTATION_FIELDS)
        ).where(annotation.c.candidate_id.in_(bindparam("candidate_ids", expanding=True))),
        owners=select(annotation.c.id, annotation.c.candidate_id).where(
            annotation.c.id.in_(bindparam("annotation_ids", expanding=True))
        ),
        excluded=select(status.c.annotator_id).where(
            status.c.round_id == bindparam("round_id"), status.c.excluded.is_(True)
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


def task_kinds(connection: Connection, round_id: int, task_ids: Collection[int]) -> dict[int, str]:
    """For each of these tasks linked to the round: ``"candidate"`` or ``"gold"``."""
    statement = _statements(_dialect(connection)).task_kinds
    found: dict[int, str] = {}
    for chunk in _chunks(sorted(set(task_ids))):
        for task_id, kind in connection.execute(statement, {"round_id": round_id, "task_ids": list(chunk)}):
            found[int(task_id)] = str(kind)
    return found


def lock_candidates(
    connection: Connection, round_id: int, task_ids: Collection[int]
) -> dict[int, StoredCandidate]:
    """The round's candidates of these tasks, row-locked, with their stored annotations, by task id."""
    statements = _statements(_dialect(connection))
    found: dict[int, StoredCandidate] = {}
    for chunk in _chunks(sorted(set(task_ids))):
        for row in connection.execute(statements.candidates, {"round_id": round_id, "task_ids": list(chunk)}):
            found[int(row.label_studio_task_id)] = StoredCandidate(
                id=row.id,
                task_id=int(row.label_studio_task_id),
                status=row.status,
                writer_label=row.writer_label,
                decision=row.decision,
                override_outcome=row.override_outcome,
                wanted_votes=int(row.wanted_votes),
                label_studio_overlap=int(row.label_studio_overlap),
                read_at=as_utc(row.label_studio_read_at) if row.label_studio_read_at else None,
            )
    by_id = {c.id: c for c in found.values()}
    for chunk in _chunks(sorted(by_id)):
        for row in connection.execute(statements.annotations, {"candidate_ids": list(chunk)}):
            values = {name: getattr(row, name) for name in ANNOTATION_FIELDS}
            values["created_at"] = as_utc(values["created_at"])
            values["updated_at"] = as_utc(values["updated_at"])
            by_id[row.candidate_id].annotations[int(row.id)] = values
    return found


def annotation_owners(connection: Connection, annotation_ids: Collection[int]) -> dict[int, str]:
    """The candidate each of these stored annotation ids belongs to."""
    statement = _statements(_dialect(connection)).owners
    owners: dict[int, str] = {}
    for chunk in _chunks(sorted(set(annotation_ids))):
        owners.update(
            (int(i), str(c)) for i, c in connection.execute(statement, {"annotation_ids": list(chunk)})
        )
    return owners


def excluded_annotators(connection: Connection, round_id: int) -> frozenset[str]:
    """Annotators whose votes do not count in the round."""
    statement = _statements(_dialect(connection)).excluded
    return frozenset(str(a) for (a,) in connection.execute(statement, {"round_id": round_id}))


def write(connection: Connection, writes: VoteWrites) -> None:
    """Apply one chunk's changes, each kind with one ``executemany``."""
    statements = _statements(_dialect(connection))
    if writes.deleted:
        for chunk in _chunks(writes.deleted):
            connection.execute(statements.delete_annotations, {"ids": list(chunk)})
    if writes.inserted:
        connection.execute(statements.insert_annotation, writes.inserted)
    if writes.updated:
        connection.execute(
            statements.update_annotation, [{f"b_{k}": v for k, v in u.items()} for u in writes.updated]
        )
    if writes.decisions:
        connection.execute(
            statements.update_decision, [{f"b_{k}": v for k, v in d.items()} for d in writes.decisions]
        )
    if writes.history:
        connection.execute(statements.insert_history, writes.history)
    if writes.read_only:
        connection.execute(
            statements.mark_read, [{f"b_{k}": v for k, v in r.items()} for r in writes.read_only]
        )
