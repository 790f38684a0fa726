"""The shared near-duplicate index at submission, kept in the database.

Every example (candidate or capture) has a row in ``near_duplicate_example``, with its MinHash LSH
band keys (:func:`dynaval.domain.health.minhash.band_keys`) and its vector, written in the unit of
work that stores it: every process sees them at once, and they survive restarts. A process holds
them in memory (:mod:`dynaval.domain.health.band_keys`, :mod:`dynaval.adapters.health.semantic_index`),
topped up by ``seq`` before each check; the round's Health reads the same keys for its repeated
patterns. What a check found for a candidate is kept in ``near_duplicate_check``.

Checks of one task type are serialised (:meth:`SqlNearDuplicateIndex.serialize_checks`): a check
reads only committed examples, so two submissions of one trick checked at the same moment would
otherwise both pass. On SQLite a write transaction holds the file's lock from its start (``BEGIN
IMMEDIATE``) and that is enough; on PostgreSQL the check takes a transaction-level advisory lock of
its task type.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, text
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from dynaval.adapters.db.orm import (
    CandidateRow,
    NearDuplicateCheckRow,
    NearDuplicateExampleRow,
    RoundRow,
)
from dynaval.domain.health.band_keys import keys_to_bytes
from dynaval.domain.health.near_duplicates import EarlierExample, NearDuplicateCheck, NearDuplicateMatch

CHECK_LOCK_CLASS = 74202
"""The first key of the PostgreSQL advisory locks that serialise the checks of a task type (the
second is the task type's CRC-32); the migration lock is the single key 74201."""


def _stored_keys(keys: Collection[int] | bytes) -> bytes:
    return keys if isinstance(keys, bytes) else keys_to_bytes(keys)


class SqlNearDuplicateIndex:
    def __init__(self, session: Session) -> None:
        self._session = session

    def serialize_checks(self, task_type: str) -> None:
        connection = self._session.connection()
        if connection.dialect.name == "postgresql":
            key = zlib.crc32(task_type.encode()) - (1 << 31)  # an int4, as the two-key form takes
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:lock_class, :key)"),
                {"lock_class": CHECK_LOCK_CLASS, "key": key},
            )

    def add(
        self, candidate_id: str, task_type: str, keys: Collection[int] | bytes, vector: bytes | None = None
    ) -> None:
        """Index a candidate (added in this unit of work, or stored earlier) under its band keys (an
        image: its fingerprint's bytes), with its vector (``None``: none computed)."""
        self._session.add(
            NearDuplicateExampleRow(
                candidate_id=candidate_id,
                task_type=task_type,
                band_keys=_stored_keys(keys),
                embedding=vector,
            )
        )

    def add_many(self, examples: Sequence[tuple[str, str, Collection[int] | bytes, bytes | None]]) -> None:
        """Index stored candidates in bulk ``(candidate id, task type, keys, vector)`` (the rebuild)."""
        if not examples:
            return
        connection = self._session.connection()
        connection.execute(
            insert(NearDuplicateExampleRow),
            [
                {"candidate_id": c, "task_type": t, "band_keys": _stored_keys(keys), "embedding": v}
                for c, t, keys, v in examples
            ],
        )

    def examples(self, candidate_ids: Collection[str]) -> dict[str, EarlierExample]:
        """The stored examples with these ids (a semantic match names only the id)."""
        if not candidate_ids:
            return {}
        # Up to 200 rows on every check: a Core statement on the session's connection, which skips
        # the ORM's loading (a fifth of this read's time).
        table: Any = CandidateRow.__table__  # type: ignore[attr-defined]
        statement = sa_select(table.c.id, table.c.round_id, table.c.inputs, table.c.submitted_by).where(
            table.c.id.in_(bindparam("ids", expanding=True))
        )
        rows = self._session.connection().execute(statement, {"ids": list(candidate_ids)}).all()
        return {i: EarlierExample(i, r, inputs, by) for i, r, inputs, by in rows}

    def vectors_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        """The examples of ``task_type`` indexed after ``seq``: ``(seq, candidate id, vector)``, in order."""
        return self._after(task_type, seq, NearDuplicateExampleRow.embedding, limit)

    def vectors_of(self, candidate_ids: Collection[str]) -> dict[str, bytes]:
        """The stored vectors of these candidates (those with none are left out)."""
        if not candidate_ids:
            return {}
        table: Any = NearDuplicateExampleRow.__table__  # type: ignore[attr-defined]
        statement = sa_select(table.c.candidate_id, table.c.embedding).where(
            table.c.candidate_id.in_(bindparam("ids", expanding=True)), table.c.embedding.is_not(None)
        )
        rows = self._session.connection().execute(statement, {"ids": list(candidate_ids)}).all()
        return {candidate_id: bytes(vector) for candidate_id, vector in rows}

    def keys_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        """The examples of ``task_type`` indexed after ``seq``: ``(seq, candidate id, band keys)``,
        in order."""
        return self._after(task_type, seq, NearDuplicateExampleRow.band_keys, limit)

    def _after(
        self, task_type: str, seq: int, stored: Any, limit: int | None
    ) -> list[tuple[int, str, bytes | None]]:
        """``(seq, candidate id, the stored column)`` of the task type's rows after ``seq``, in order."""
        statement = (
            select(NearDuplicateExampleRow.seq, NearDuplicateExampleRow.candidate_id, stored)
            .where(NearDuplicateExampleRow.task_type == task_type, col(NearDuplicateExampleRow.seq) > seq)
            .order_by(col(NearDuplicateExampleRow.seq))
        )
        if limit is not None:
            statement = statement.limit(limit)
        return [(int(q or 0), c, v) for q, c, v in self._session.exec(statement).all()]

    def without_vectors(
        self, limit: int, *, passing_over: Collection[str] = ()
    ) -> list[tuple[str, str, dict[str, str]]]:
        """Indexed examples with no vector ``(id, task type, inputs)`` (indexed while the semantic
        check was off), of task types other than ``passing_over`` (those of images have none)."""
        rows = self._session.exec(
            select(CandidateRow.id, NearDuplicateExampleRow.task_type, CandidateRow.inputs)
            .join(CandidateRow, col(CandidateRow.id) == col(NearDuplicateExampleRow.candidate_id))
            .where(
                col(NearDuplicateExampleRow.embedding).is_(None),
                col(NearDuplicateExampleRow.task_type).not_in(list(passing_over)),
            )
            .order_by(col(NearDuplicateExampleRow.seq))
            .limit(limit)
        ).all()
        return [(i, task, dict(inputs)) for i, task, inputs in rows]

    def set_vectors(self, vectors: Sequence[tuple[str, str, bytes]]) -> None:
        """Give indexed examples their vectors ``(id, task type, vector)``: each row is written
        again (its band keys kept), under a new ``seq``, so that running processes top up with it."""
        if not vectors:
            return
        ids = [c for c, _t, _v in vectors]
        connection = self._session.connection()
        keys: dict[str, bytes | None] = dict(
            connection.execute(
                select(NearDuplicateExampleRow.candidate_id, NearDuplicateExampleRow.band_keys).where(
                    col(NearDuplicateExampleRow.candidate_id).in_(ids)
                )
            ).all()
        )
        connection.execute(
            delete(NearDuplicateExampleRow).where(col(NearDuplicateExampleRow.candidate_id).in_(ids))
        )
        connection.execute(
            insert(NearDuplicateExampleRow),
            [
                {"candidate_id": c, "task_type": t, "band_keys": keys.get(c), "embedding": v}
                for c, t, v in vectors
            ],
        )

    def unindexed(self, limit: int) -> list[tuple[str, str, dict[str, str]]]:
        """Stored candidates missing from the index ``(id, task type, inputs)``, oldest first: what
        a rebuild adds."""
        rows = self._session.exec(
            select(CandidateRow.id, RoundRow.task_type, CandidateRow.inputs)
            .join(RoundRow, col(RoundRow.id) == col(CandidateRow.round_id))
            .outerjoin(
                NearDuplicateExampleRow, col(NearDuplicateExampleRow.candidate_id) == col(CandidateRow.id)
            )
            .where(col(NearDuplicateExampleRow.seq).is_(None))
            .order_by(col(CandidateRow.submitted_at), col(CandidateRow.id))
            .limit(limit)
        ).all()
        return [(i, task, dict(inputs)) for i, task, inputs in rows]

    def size(self) -> int:
        return int(self._session.exec(select(func.count()).select_from(NearDuplicateExampleRow)).one())

    def record(self, check: NearDuplicateCheck) -> None:
        self._session.add(
            NearDuplicateCheckRow(
                candidate_id=check.candidate_id,
                round_id=check.round_id,
                flagged=check.flagged,
                matches=[m.to_dict() for m in check.matches],
            )
        )

    def checks_of(self, candidate_ids: Collection[str]) -> dict[str, NearDuplicateCheck]:
        if not candidate_ids:
            return {}
        rows = self._session.exec(
            select(NearDuplicateCheckRow).where(
                col(NearDuplicateCheckRow.candidate_id).in_(list(candidate_ids))
            )
        ).all()
        return {row.candidate_id: _check_of(row) for row in rows}

    def round_band_keys(self, round_id: int) -> dict[str, bytes | None]:
        """The stored band keys of the round's indexed candidates, by candidate id."""
        rows = self._session.exec(
            select(NearDuplicateExampleRow.candidate_id, NearDuplicateExampleRow.band_keys)
            .join(CandidateRow, col(CandidateRow.id) == col(NearDuplicateExampleRow.candidate_id))
            .where(CandidateRow.round_id == round_id)
        ).all()
        return dict(rows)

    def flagged(self, round_id: int, *, limit: int | None = None) -> list[str]:
        """The ids of the round's flagged candidates, the earliest submitted first (the first
        ``limit`` of them, when given)."""
        statement = (
            select(NearDuplicateCheckRow.candidate_id)
            .join(CandidateRow, col(CandidateRow.id) == col(NearDuplicateCheckRow.candidate_id))
            .where(NearDuplicateCheckRow.round_id == round_id, col(NearDuplicateCheckRow.flagged))
            .order_by(col(CandidateRow.submitted_at), col(CandidateRow.id))
        )
        if limit is not None:
            statement = statement.limit(limit)
        return list(self._session.exec(statement).all())

    def flagged_count(self, round_id: int) -> int:
        """How many of the round's candidates are flagged."""
        return int(
            self._session.exec(
                select(func.count())
                .select_from(NearDuplicateCheckRow)
                .where(NearDuplicateCheckRow.round_id == round_id, col(NearDuplicateCheckRow.flagged))
            ).one()
        )


def _check_of(row: NearDuplicateCheckRow) -> NearDuplicateCheck:
    return NearDuplicateCheck(
        candidate_id=row.candidate_id,
        round_id=row.round_id,
        matches=tuple(NearDuplicateMatch.from_dict(m) for m in row.matches),
        flagged=row.flagged,
    )
