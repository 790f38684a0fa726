"""The kept round-dataset records, inside one write transaction (Core statements on its connection).

The marks come from the triggers of migration 0024: every change to an accepted candidate (or one
that leaves ``accepted``), its annotations or its capture adds a ``dataset_record_stale`` row,
whatever wrote it. On PostgreSQL each mark carries its transaction's id, so a unit of work takes
only its own (two transactions never wait on each other's marks) and locks its candidates before it
reads them: of two transactions that change one candidate, the later reads after the earlier
committed, and its record is the one that stays.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, delete, func, insert, or_, select, text, tuple_, type_coerce
from sqlalchemy.engine import Connection

from dynaval.adapters.db.orm import (
    CandidateRow,
    DatasetRecordColumnsRow,
    DatasetRecordReleaseRow,
    DatasetRecordRow,
    DatasetRecordStaleRow,
    RoundRow,
    utcnow,
)
from dynaval.service_layer.dataset_records.dataset_port import (
    DatasetPage,
    KeptRecord,
    RoundHeader,
)

_IN_CHUNK = 500


def _table(row: type) -> Any:
    return row.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Statements:
    take_own: Any
    take_of_round: Any
    any_of_round: Any
    clear: Any
    lock: Any
    kept: Any
    remove: Any
    remove_columns: Any
    remove_release: Any
    write: Any
    write_columns: Any
    write_release: Any
    round_ids: Any
    first_accepted: Any
    next_accepted: Any
    kept_not_accepted: Any


@functools.cache
def _statements(dialect: str) -> _Statements:
    stale = _table(DatasetRecordStaleRow)
    record = _table(DatasetRecordRow)
    columns = _table(DatasetRecordColumnsRow)
    release = _table(DatasetRecordReleaseRow)
    candidate = _table(CandidateRow)
    ids: Any = bindparam("candidate_ids", expanding=True)
    # SQLite has one writer at a time: the marks without a transaction id are this transaction's
    # (or were left by a write outside any unit of work, which the next one takes).
    own = stale.c.xact.is_(None) if dialect == "sqlite" else stale.c.xact == func.txid_current_if_assigned()
    # The round's marks: those of its candidates, of candidates whose kept record is in the round
    # (one moved to another round by hand), and of candidates no longer stored (deleted by hand),
    # each found by primary key: a statement stops after ``limit`` of them. Catch-ups of a round
    # take turns (see ``hold_round``), so none skips marks another is still writing.
    of_round = (
        select(stale.c.id)
        .select_from(
            stale.outerjoin(candidate, candidate.c.id == stale.c.candidate_id).outerjoin(
                record, record.c.candidate_id == stale.c.candidate_id
            )
        )
        .where(
            or_(
                candidate.c.round_id == bindparam("round_id"),
                record.c.round_id == bindparam("round_id"),
                candidate.c.id.is_(None),
            )
        )
    )
    # A round's accepted candidates in the decision queue's order, by its index
    # (round, status, submitted_at, id), in keyset chunks: each chunk costs the same, however far
    # into the round it starts (the key is the stored time as the driver reads it).
    key_time: Any = (
        type_coerce(candidate.c.submitted_at, String) if dialect == "sqlite" else candidate.c.submitted_at
    )
    accepted = select(candidate.c.id, key_time).where(
        candidate.c.round_id == bindparam("round_id"), candidate.c.status == "accepted"
    )
    after_key = tuple_(key_time, candidate.c.id) > tuple_(
        bindparam("key_time", type_=String if dialect == "sqlite" else candidate.c.submitted_at.type),
        bindparam("key_id"),
    )
    limit: Any = bindparam("limit")
    return _Statements(
        take_own=delete(stale).where(own).returning(stale.c.candidate_id),
        take_of_round=delete(stale)
        .where(stale.c.id.in_(of_round.limit(bindparam("limit")).scalar_subquery()))
        .returning(stale.c.candidate_id),
        any_of_round=of_round.limit(1),
        clear=delete(stale).where(stale.c.candidate_id.in_(ids)),
        lock=select(candidate.c.id).where(candidate.c.id.in_(ids)).order_by(candidate.c.id).with_for_update(),
        # A record kept without its columns or release line (by an earlier version) reads with
        # none: it differs from the one built now, and is written again.
        kept=select(
            record.c.candidate_id,
            record.c.round_id,
            record.c.record,
            record.c.image_inputs,
            columns.c.columns,
            release.c.line,
        )
        .select_from(
            record.outerjoin(columns, columns.c.candidate_id == record.c.candidate_id).outerjoin(
                release, release.c.candidate_id == record.c.candidate_id
            )
        )
        .where(record.c.candidate_id.in_(ids)),
        remove=delete(record).where(record.c.candidate_id.in_(ids)),
        remove_columns=delete(columns).where(columns.c.candidate_id.in_(ids)),
        remove_release=delete(release).where(release.c.candidate_id.in_(ids)),
        # The order key is the candidate's own stored value, copied by the database as it is.
        write=_written_beside(
            record, candidate, b_record="record", b_image_inputs="image_inputs", b_stored_at="stored_at"
        ),
        write_columns=_written_beside(columns, candidate, b_columns="columns"),
        write_release=_written_beside(release, candidate, b_line="line"),
        round_ids=select(_table(RoundRow).c.id).order_by(_table(RoundRow).c.id),
        first_accepted=accepted.order_by(candidate.c.submitted_at, candidate.c.id).limit(limit),
        next_accepted=accepted.where(after_key)
        .order_by(candidate.c.submitted_at, candidate.c.id)
        .limit(limit),
        kept_not_accepted=select(record.c.candidate_id)
        .select_from(record.outerjoin(candidate, candidate.c.id == record.c.candidate_id))
        .where(
            record.c.round_id == bindparam("round_id"),
            or_(candidate.c.id.is_(None), candidate.c.status != "accepted"),
        ),
    )


def _written_beside(table: Any, candidate: Any, **values: str) -> Any:
    """An insert into ``table`` of a kept row per bound ``b_candidate_id``: the candidate's id, round
    and order key copied by the database as they are stored, then ``values`` (bind parameter ->
    column)."""
    return insert(table).from_select(
        ["candidate_id", "round_id", "submitted_at", *values.values()],
        select(
            candidate.c.id,
            candidate.c.round_id,
            candidate.c.submitted_at,
            *(bindparam(bind, type_=table.c[column].type) for bind, column in values.items()),
        ).where(candidate.c.id == bindparam("b_candidate_id")),
    )


_HOLD_ROUND = text("SELECT pg_advisory_xact_lock(74202, :round_id)")
"""A transaction-long lock of one round's catch-up and rebuild (74201 is the migrations')."""


def dialect_of(connection: Connection) -> str:
    return "sqlite" if connection.dialect.name == "sqlite" else "postgresql"


def _chunks(values: Sequence[str]) -> list[Sequence[str]]:
    return [values[i : i + _IN_CHUNK] for i in range(0, len(values), _IN_CHUNK)]


class SqlRecordStore:
    """:class:`~dynaval.service_layer.dataset_records.dataset_port.RecordStore` on one connection."""

    def __init__(self, connection: Connection, reads: Any) -> None:
        """``reads``: the dataset query's statements for this connection's database
        (:func:`dynaval.adapters.db.dataset_query.statements_for`)."""
        self._connection = connection
        self._dialect = dialect_of(connection)
        self._statements = _statements(self._dialect)
        self._reads = reads

    def take_own_stale(self) -> list[str]:
        return sorted({str(i) for (i,) in self._connection.execute(self._statements.take_own)})

    def hold_round(self, round_id: int) -> None:
        if self._dialect != "sqlite":  # SQLite's one writer at a time holds it already
            self._connection.execute(_HOLD_ROUND, {"round_id": round_id})

    def take_stale_of_round(self, round_id: int, limit: int) -> list[str]:
        rows = self._connection.execute(
            self._statements.take_of_round, {"round_id": round_id, "limit": limit}
        )
        return sorted({str(i) for (i,) in rows})

    def any_stale_of_round(self, round_id: int) -> bool:
        """Whether any of the round's marks is there (a read: it takes none)."""
        return (
            self._connection.execute(self._statements.any_of_round, {"round_id": round_id}).first()
            is not None
        )

    def clear_stale(self, candidate_ids: Sequence[str]) -> None:
        for chunk in _chunks(candidate_ids):
            self._connection.execute(self._statements.clear, {"candidate_ids": list(chunk)})

    def lock(self, candidate_ids: Sequence[str]) -> None:
        if self._dialect == "sqlite":
            return  # the transaction holds the database's one write lock already
        for chunk in _chunks(sorted(candidate_ids)):
            self._connection.execute(self._statements.lock, {"candidate_ids": list(chunk)}).all()

    def accepted_pages(self, candidate_ids: Sequence[str]) -> list[tuple[RoundHeader, DatasetPage]]:
        by_round: dict[int, list[Sequence[Any]]] = {}
        for chunk in _chunks(candidate_ids):
            read = self._connection.execute(self._reads.accepted_by_ids, {"candidate_ids": list(chunk)})
            for row in read:
                by_round.setdefault(int(row.round_id), []).append(row[:-1])
        pages = []
        for round_id, rows in sorted(by_round.items()):
            header = self._connection.execute(self._reads.round, {"round_id": round_id}).one()
            votes: list[Sequence[Any]] = []
            for chunk in _chunks([str(row[0]) for row in rows]):
                votes.extend(
                    self._connection.execute(self._reads.votes, {"candidate_ids": list(chunk)}).all()
                )
            pages.append((RoundHeader(*header), DatasetPage(candidates=rows, votes=votes)))
        return pages

    def kept(self, candidate_ids: Sequence[str]) -> dict[str, KeptRecord]:
        found: dict[str, KeptRecord] = {}
        for chunk in _chunks(candidate_ids):
            for candidate_id, round_id, record, images, columns, line in self._connection.execute(
                self._statements.kept, {"candidate_ids": list(chunk)}
            ):
                found[candidate_id] = KeptRecord(
                    candidate_id,
                    int(round_id),
                    bytes(record),
                    images,
                    b"" if columns is None else bytes(columns),
                    b"" if line is None else bytes(line),
                )
        return found

    def replace(self, removed: Sequence[str], written: Sequence[KeptRecord]) -> None:
        for chunk in _chunks([*removed, *(r.candidate_id for r in written)]):
            self._connection.execute(self._statements.remove, {"candidate_ids": list(chunk)})
            self._connection.execute(self._statements.remove_columns, {"candidate_ids": list(chunk)})
            self._connection.execute(self._statements.remove_release, {"candidate_ids": list(chunk)})
        if written:
            now = utcnow()
            self._connection.execute(
                self._statements.write,
                [
                    {
                        "b_candidate_id": r.candidate_id,
                        "b_record": r.record,
                        "b_image_inputs": r.image_inputs,
                        "b_stored_at": now,
                    }
                    for r in written
                ],
            )
            self._connection.execute(
                self._statements.write_columns,
                [{"b_candidate_id": r.candidate_id, "b_columns": r.columns} for r in written],
            )
            self._connection.execute(
                self._statements.write_release,
                [{"b_candidate_id": r.candidate_id, "b_line": r.release_line} for r in written],
            )

    def round_ids(self) -> list[int]:
        return [int(i) for (i,) in self._connection.execute(self._statements.round_ids)]

    def accepted_ids(self, round_id: int, *, after: object | None, limit: int) -> tuple[list[str], object]:
        if after is None:
            rows = self._connection.execute(
                self._statements.first_accepted, {"round_id": round_id, "limit": limit}
            ).all()
        else:
            key: tuple[Any, Any] = after  # type: ignore[assignment]
            key_time, key_id = key
            rows = self._connection.execute(
                self._statements.next_accepted,
                {"round_id": round_id, "limit": limit, "key_time": key_time, "key_id": key_id},
            ).all()
        return [str(row[0]) for row in rows], ((rows[-1][1], rows[-1][0]) if rows else after)

    def kept_not_accepted(self, round_id: int) -> list[str]:
        rows = self._connection.execute(self._statements.kept_not_accepted, {"round_id": round_id})
        return sorted(str(i) for (i,) in rows)
