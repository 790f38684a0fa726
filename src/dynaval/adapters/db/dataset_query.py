"""Reading a round dataset: the accepted candidates of a round with their votes, in keyset pages.

An export reads every accepted candidate of a round, a million and more, with three or more
annotations each. Loading ORM objects for them cost more than everything else the export does, so
this query object reads with Core statements and hands rows over already shaped for the provenance
record, with the per-value work done by the database or in C:

- times come as the ISO-8601 text that ``datetime.isoformat()`` gives for the stored UTC value
  (``2026-03-01T09:30:15.123456+00:00``; no fraction on a whole second), formatted in SQL;
- JSON columns come decoded (by orjson, called directly as the column's result processor);
- of a candidate's annotations only those that may be votes come (not cancelled, with a label or a
  flag), ordered by the annotator's raw id as Python orders text, then latest first (by update
  time, then id): each annotator's first row is their vote. This is
  :func:`dynaval.domain.validation.votes.current_votes` with the database's help;
  ``tests/integration/test_dataset_export.py`` checks that both agree.

Pages follow the lead's decision queue order, (``submitted_at``, ``id``), with the index
``ix_candidate_round_status_submitted``. Each page is read in a read transaction of its own, so a
slow reader (an HTTP download) never holds one open between pages.
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import (
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    tuple_,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from dynaval.adapters.db.database import MAX_SERIAL_ID, Database
from dynaval.adapters.db.dataset_arrow import KeptArrowReads
from dynaval.adapters.db.dataset_records import SqlRecordStore
from dynaval.adapters.db.orm import (
    AnnotationRow,
    CandidateRow,
    CaptureRow,
    DatasetRecordReleaseRow,
    DatasetRecordRow,
    RoundRow,
)
from dynaval.adapters.db.read_ahead import read_ahead as _read_ahead
from dynaval.service_layer.dataset_records.dataset_port import (
    ColumnPage,
    DatasetPage,
    KeptLines,
    RoundHeader,
)
from dynaval.service_layer.dataset_records.stored_record import RoundValues

PAGE_SIZE = 2000
"""Candidates per page: large enough that a query's fixed cost does not count, small enough that a
page's records (a few MB) stay far below the memory a whole round would take."""


class _JsonText(TypeDecorator[Any]):
    """A JSON column read as its text and decoded by orjson: the result processor is orjson's C
    function itself, with no Python call around it (the column is never NULL: see :func:`_json`)."""

    impl = Text
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        return orjson.loads


class _RepeatedJsonText(_JsonText):
    """A JSON column whose texts repeat (the rule's figures of a decision): equal texts decode to
    one shared object, which readers must not change."""

    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        return _decode_repeated


# Decisions without their ballots: a round has a few hundred distinct ones among a million.
_decode_repeated = functools.lru_cache(maxsize=4096)(orjson.loads)


def _table(row: type) -> Any:
    return row.__table__  # type: ignore[attr-defined]


def _json(column: Any, kind: _JsonText | None = None) -> ColumnElement[Any]:
    # SQL NULL reads as JSON null, so that orjson never sees None.
    return type_coerce(func.coalesce(cast(column, Text), literal("null", Text)), kind or _JsonText())


def _rule_figures(decision: Any, dialect: str) -> ColumnElement[Any]:
    """A stored decision without the ballots and excluded annotators, which the record leaves out
    and which would make every candidate's decision different."""
    if dialect == "sqlite":
        figures: ColumnElement[Any] = func.json_remove(
            decision, "$.ballots", "$.excluded_annotators", "$.own_vote_ignored", type_=Text
        )
    else:
        # One conversion to jsonb per row (each costs the server a parse of the whole decision);
        # JSON null (no decision yet) has no keys to remove.
        figures = case(
            (
                func.json_typeof(decision) == "object",
                cast(
                    cast(decision, JSONB)
                    .op("-")(literal("ballots"))
                    .op("-")(literal("excluded_annotators"))
                    .op("-")(literal("own_vote_ignored")),
                    Text,
                ),
            ),
            else_=cast(decision, Text),
        )
    return _json(figures, _RepeatedJsonText())


def _iso(column: Any, dialect: str) -> ColumnElement[str]:
    """A stored UTC time as ``datetime.isoformat()`` writes it, or NULL."""
    if dialect == "sqlite":
        # SQLAlchemy stores a SQLite DATETIME as "YYYY-MM-DD HH:MM:SS.ffffff" (naive UTC here);
        # tests/integration/test_dataset_export.py checks that it still does.
        fraction = func.substr(column, 20, 7, type_=String)
        return (
            func.substr(column, 1, 10, type_=String)
            + literal("T", String)
            + func.substr(column, 12, 8, type_=String)
            + case((fraction == ".000000", literal("", String)), else_=fraction)
            + literal("+00:00", String)
        )
    utc = func.timezone("UTC", column)
    return (
        func.to_char(utc, 'YYYY-MM-DD"T"HH24:MI:SS', type_=String)
        + case(
            (func.date_trunc("second", utc) == utc, literal("", String)),
            else_=func.to_char(utc, ".US", type_=String),
        )
        + literal("+00:00", String)
    )


@dataclass(frozen=True)
class _Statements:
    round: Any
    count: Any
    first_page: Any
    next_page: Any
    one: Any
    accepted_by_ids: Any
    votes: Any
    kept_count: Any
    release_line_count: Any


def statements_for(dialect: str) -> _Statements:
    """The dataset's statements for ``"sqlite"`` or ``"postgresql"`` (built once each)."""
    return _statements(dialect)


@functools.cache
def _statements(dialect: str) -> _Statements:
    candidate = _table(CandidateRow)
    capture = _table(CaptureRow)
    annotation = _table(AnnotationRow)
    round_table = _table(RoundRow)
    iso = functools.partial(_iso, dialect=dialect)
    columns = (
        candidate.c.id,
        _json(candidate.c.inputs),
        candidate.c.writer_label,
        candidate.c.rationale,
        candidate.c.writer_id,
        candidate.c.collected_by,
        iso(candidate.c.submitted_at),
        candidate.c.model_prediction,
        _json(candidate.c.model_probabilities),
        candidate.c.model_signature,
        candidate.c.model_name,
        candidate.c.model_hash,
        candidate.c.fooled,
        candidate.c.label_studio_task_id,
        _rule_figures(candidate.c.decision, dialect),
        iso(candidate.c.decided_at),
        candidate.c.override_outcome,
        candidate.c.override_reason,
        candidate.c.override_by,
        iso(candidate.c.override_at),
        # A failure capture's provenance (NULL for a writer's candidate), from the outer join below.
        capture.c.source,
        capture.c.reference,
        capture.c.observed_output,
        capture.c.model_name,
        capture.c.model_version,
        iso(capture.c.observed_at),
        # The page's key as the driver reads it (text on SQLite, a datetime on PostgreSQL), without
        # the column type's conversion: only the last row's is used, to start the next page.
        type_coerce(candidate.c.submitted_at, String).label("key_time"),
    )
    accepted = and_(candidate.c.round_id == bindparam("round_id"), candidate.c.status == "accepted")
    # One row per candidate: a capture's provenance is keyed by its candidate's id.
    candidates = candidate.outerjoin(capture, capture.c.candidate_id == candidate.c.id)
    order = (candidate.c.submitted_at, candidate.c.id)
    if dialect == "sqlite":
        stored_time: Any = type_coerce(candidate.c.submitted_at, String)
        key_time = bindparam("key_time", type_=String)
    else:
        stored_time = candidate.c.submitted_at
        key_time = bindparam("key_time", type_=candidate.c.submitted_at.type)
    # A row value, not "time > t OR (time = t AND id > i)": with the OR, SQLite reads the index
    # from the round's first entry on every page, which made an export quadratic in its length.
    after_key = tuple_(stored_time, candidate.c.id) > tuple_(key_time, bindparam("key_id"))
    limit = bindparam("limit", type_=Integer())

    # The annotations that are votes, each annotator's latest first (see the module's docstring):
    # the caller keeps the first row of each (candidate, annotator). Python orders text by code
    # point: SQLite's BINARY collation does too (UTF-8 bytes), and PostgreSQL's "C" collation; the
    # database's default collation may not.
    by_annotator = (
        annotation.c.annotator_id if dialect == "sqlite" else annotation.c.annotator_id.collate("C")
    )
    votes = (
        select(
            annotation.c.candidate_id,
            annotation.c.id,
            annotation.c.annotator_id,
            annotation.c.label,
            annotation.c.flagged,
            annotation.c.flag_reason,
            annotation.c.lead_time_s,
            iso(annotation.c.created_at),
            iso(annotation.c.updated_at),
        )
        .where(
            annotation.c.candidate_id.in_(bindparam("candidate_ids", expanding=True)),
            annotation.c.was_cancelled.is_(False),
            annotation.c.late.is_(False),
            or_(annotation.c.label.is_not(None), annotation.c.flagged.is_(True)),
        )
        .order_by(
            annotation.c.candidate_id, by_annotator, annotation.c.updated_at.desc(), annotation.c.id.desc()
        )
    )
    return _Statements(
        round=select(
            round_table.c.id,
            round_table.c.name,
            round_table.c.state,
            round_table.c.task_type,
            round_table.c.model_name,
            round_table.c.model_hash,
            _json(round_table.c.policy),
            round_table.c.label_studio_project_id,
        ).where(round_table.c.id == bindparam("round_id")),
        count=select(func.count()).select_from(candidate).where(accepted),
        first_page=select(*columns).select_from(candidates).where(accepted).order_by(*order).limit(limit),
        next_page=select(*columns)
        .select_from(candidates)
        .where(accepted, after_key)
        .order_by(*order)
        .limit(limit),
        one=select(*columns, candidate.c.round_id)
        .select_from(candidates)
        .where(candidate.c.id == bindparam("candidate_id")),
        accepted_by_ids=select(*columns, candidate.c.round_id)
        .select_from(candidates)
        .where(
            candidate.c.id.in_(bindparam("candidate_ids", expanding=True)), candidate.c.status == "accepted"
        )
        .order_by(candidate.c.round_id, *order),
        votes=votes,
        kept_count=_round_count(_table(DatasetRecordRow)),
        release_line_count=_round_count(_table(DatasetRecordReleaseRow)),
    )


def _round_count(table: Any) -> Any:
    return select(func.count()).select_from(table).where(table.c.round_id == bindparam("round_id"))


class DatasetQuery:
    """The round dataset's reads, on the service's database."""

    def __init__(self, database: Database, *, page_size: int | None = None) -> None:
        self.database = database
        self._page_size = page_size
        self._statements = _statements("sqlite" if database.is_sqlite else "postgresql")
        self._arrow = KeptArrowReads(database)

    @property
    def page_size(self) -> int:
        """Candidates per page: as given, else :data:`PAGE_SIZE` as it is when the page is read."""
        return self._page_size or PAGE_SIZE

    def round(self, round_id: int) -> RoundHeader | None:
        """The round, or None when there is none with this id."""
        if not 0 < round_id <= MAX_SERIAL_ID:  # a larger id names no row (and overflows PostgreSQL)
            return None
        with self._connection() as connection:
            row = connection.execute(self._statements.round, {"round_id": round_id}).first()
        return RoundHeader(*row) if row is not None else None

    def count_accepted(self, round_id: int) -> int:
        with self._connection() as connection:
            return int(connection.execute(self._statements.count, {"round_id": round_id}).scalar_one())

    def accepted_pages(self, round_id: int, *, read_ahead: bool = True) -> Iterator[DatasetPage]:
        """The round's accepted candidates with their votes, a page at a time, in submission order.

        With ``read_ahead``, a thread of its own reads each page while the caller handles the one
        before (see :func:`~dynaval.adapters.db.read_ahead.read_ahead`).
        """
        pages = self._pages(round_id)
        return _read_ahead(pages) if read_ahead else pages

    def _pages(self, round_id: int) -> Generator[DatasetPage, None, None]:
        statements = self._statements
        params: dict[str, Any] = {"round_id": round_id, "limit": self.page_size}
        statement = statements.first_page
        while True:
            with self._connection() as connection:
                rows = connection.execute(statement, params).all()
                if not rows:
                    return
                votes = self._votes(connection, [row[0] for row in rows])
            last = rows[-1]
            yield DatasetPage(candidates=rows, votes=votes)
            if len(rows) < self.page_size:
                return
            statement = statements.next_page
            params = {**params, "key_time": last.key_time, "key_id": last.id}

    def candidate(self, candidate_id: str) -> tuple[int, DatasetPage] | None:
        """One candidate, whatever its status, with its votes, and its round's id; None when unknown."""
        with self._connection() as connection:
            row = connection.execute(self._statements.one, {"candidate_id": candidate_id}).first()
            if row is None:
                return None
            votes = self._votes(connection, [candidate_id])
        return int(row.round_id), DatasetPage(candidates=[row[:-1]], votes=votes)

    def kept_lines(self, round_id: int) -> Iterator[KeptLines]:
        """The round's kept records in submission order, a page at a time (read one page ahead)."""
        return _read_ahead(self._arrow.kept_lines(round_id))

    def kept_columns(self, round_id: int, round_values: RoundValues) -> Iterator[ColumnPage]:
        """The round's kept records as Parquet columns, a page at a time (read one page ahead)."""
        return _read_ahead(self._arrow.kept_columns(round_id, round_values))

    def kept_release_lines(self, round_id: int) -> Iterator[KeptLines] | None:
        """The round's kept release lines, a page at a time (read one page ahead); None when fewer
        are kept than records (the two are written and removed together, so then some record was
        kept without one, by an earlier version)."""
        with self._connection() as connection:
            params = {"round_id": round_id}
            records = connection.execute(self._statements.kept_count, params).scalar_one()
            lines = connection.execute(self._statements.release_line_count, params).scalar_one()
        if records != lines:
            return None
        return _read_ahead(self._arrow.kept_release_lines(round_id))

    def any_stale(self, round_id: int) -> bool:
        with self._connection() as connection:
            return SqlRecordStore(connection, self._statements).any_stale_of_round(round_id)

    @contextmanager
    def record_writes(self) -> Iterator[SqlRecordStore]:
        """A write transaction on the kept records, committed when the block ends without error."""
        with self.database.transaction() as connection:
            yield SqlRecordStore(connection, self._statements)

    def _votes(self, connection: Connection, candidate_ids: list[str]) -> Sequence[Sequence[Any]]:
        return connection.execute(self._statements.votes, {"candidate_ids": candidate_ids}).all()

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A Core connection in a read transaction of its own (see ``Database.reading``)."""
        with self.database.reading() as session:
            yield session.connection()
