"""The kept round-dataset records read a page at a time, as bytes and Arrow columns: what an export
hands on, at the disk's speed.

An export reads a round's kept lines (``dataset_record``) or their packed Parquet values
(``dataset_record_columns``) in submission order. Python does a page's work in a few calls, none
per value (on SQLite, the page's ``bytes`` objects are still picked out of its rows one by one):

- **Reading.** One value per row: the line with its newline appended by the database
  (``record || x'0a'``), or the packed values. On SQLite, the standard library's ``sqlite3`` hands
  a page over as ``bytes`` objects, joined in one call; on PostgreSQL, ADBC's driver
  (``adbc-driver-postgresql``, ``COPY ... TO STDOUT`` in binary) hands it over as one Arrow
  binary array, whose data buffer is already the values one after another.
- **JSONL:** a page's lines are that buffer, as it is.
- **Parquet:** each packed value starts with its values' lengths
  (:data:`~dynaval.service_layer.dataset_records.stored_record.PACKED_HEADER`); numpy reads every
  row's header at once and makes the offsets of one binary array over the whole page, in which each
  row is its header and then its values; Arrow's ``take`` then picks each column's values out of
  it. The round's holes are filled by Arrow's ``replace_substring`` over a whole column, and the
  ``round`` column is one value repeated.

ADBC's SQLite driver is not used: it carries its own copy of SQLite, and two copies of SQLite in one
process release each other's POSIX locks on the same file (the service's own connections were seen
reading a "malformed" database beside it). ``sqlite3`` is the library the service writes with.

Pages are keyset pages (``(submitted_at, candidate_id)`` after the last one's), each read by a
query of its own: a slow reader (an HTTP download) never holds a read transaction open between
pages, which on SQLite would keep the write-ahead log from being checkpointed meanwhile.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dynaval.adapters.db.database import Database
from dynaval.domain.errors import Conflict
from dynaval.service_layer.dataset_records.dataset_port import ColumnPage, KeptLines
from dynaval.service_layer.dataset_records.stored_record import (
    JSON_COLUMNS,
    PACKED_HEADER,
    POLICY_HOLE,
    PROJECT_HOLE,
    SCALAR_COLUMNS,
    RoundValues,
)

PAGE_ROWS = 5000
"""Kept lines per page of a JSONL export: a page is about 11 MB."""
COLUMN_PAGE_ROWS = 2000
"""Kept records per page of a Parquet export, each page a row group: Parquet's writer holds a row
group's columns while it encodes them, so its pages are smaller."""

_VALUES = (*SCALAR_COLUMNS, *JSON_COLUMNS)
"""The packed values, in their order."""


@dataclass(frozen=True)
class _Page:
    """A page of one value per row, one after another in ``data``: row i's is
    ``data[offsets[i]:offsets[i + 1]]``."""

    data: Any
    """``bytes`` or an Arrow buffer."""
    offsets: Any
    """numpy int64, one more than the rows."""
    images: list[tuple[int, str]]


class DamagedRecords(Conflict):
    """A kept record's stored Parquet values are not what ``pack_columns`` writes (a hand edit, a
    damaged restore): the export stops with what to do rather than write wrong columns."""


_DAMAGED = (
    "a kept record's Parquet values do not add up to their stored length: run"
    " `dynaval dataset rebuild` to write the round's records again"
)


def _page_of(rows: list[Any], *, images: bool) -> _Page:
    """A page of ``sqlite3`` rows (the value first, then the image inputs when asked for)."""
    import numpy as np

    values = [row[0] for row in rows]
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    found = [(i, row[1]) for i, row in enumerate(rows) if row[1]] if images else []
    return _Page(data=b"".join(values), offsets=offsets, images=found)


def _quoted(value: str) -> str:
    """A SQL string literal (the page keys are the database's own values: stored times and ids)."""
    return "'" + value.replace("'", "''") + "'"


class KeptArrowReads:
    """The kept records of ``database``, a page at a time."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def _pages(
        self, table: str, value: str, round_id: int, *, images: bool, rows: int
    ) -> Generator[_Page, None, None]:
        if self._database.is_sqlite:
            return self._sqlite_pages(table, value, round_id, images=images, page_rows=rows)
        return self._postgresql_pages(table, value, round_id, images=images, page_rows=rows)

    def _sqlite_pages(
        self, table: str, value: str, round_id: int, *, images: bool, page_rows: int
    ) -> Generator[_Page, None, None]:
        where = f"FROM {table} WHERE round_id = ?"
        after = " AND (submitted_at, candidate_id) > (?, ?)"
        order = f" ORDER BY {table}.submitted_at, {table}.candidate_id"
        selected = f"SELECT {value}, image_inputs" if images else f"SELECT {value}"
        # The next page's key is read apart, from the index alone, in the same snapshot: a key's two
        # text values made for every row would cost a sixth of the page's read.
        last_key = f"SELECT submitted_at, candidate_id {where}{{after}}{order} LIMIT 1 OFFSET {page_rows - 1}"
        params: list[Any] = [int(round_id)]
        filter_ = ""
        while True:
            with self._database.reading() as session:
                raw = session.connection().connection.driver_connection
                if raw is None:
                    raise RuntimeError("the pooled SQLite connection has no sqlite3 connection")
                cursor = raw.cursor()
                try:
                    rows = cursor.execute(
                        f"{selected} {where}{filter_}{order} LIMIT {page_rows}", params
                    ).fetchall()
                    key = cursor.execute(last_key.format(after=filter_), params).fetchone()
                finally:
                    cursor.close()
            if not rows:
                return
            count = len(rows)
            page = _page_of(rows, images=images)
            del rows  # a page's rows are not held while the caller has the page
            yield page
            del page
            if count < page_rows or key is None:
                return
            params, filter_ = [int(round_id), key[0], key[1]], after

    def _postgresql_pages(
        self, table: str, value: str, round_id: int, *, images: bool, page_rows: int
    ) -> Generator[_Page, None, None]:
        import adbc_driver_manager
        import adbc_driver_postgresql
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        from sqlalchemy.engine import make_url

        url = make_url(self._database.url).set(drivername="postgresql")
        image_column = "COALESCE(image_inputs, '')" if images else "''"
        key = ""
        # ADBC's own API, not its DB-API module: that one imports pyarrow.dataset, and with it pandas
        # (44 MB and 0.2 s); a connection of this API commits each statement by itself.
        with (
            adbc_driver_postgresql.connect(url.render_as_string(hide_password=False)) as database,
            adbc_driver_manager.AdbcConnection(database) as connection,
            adbc_driver_manager.AdbcStatement(connection) as statement,
        ):
            # The page keys are written as literals, whose quoting assumes the standard's strings.
            statement.set_sql_query("SET standard_conforming_strings = on")
            statement.execute_update()
            while True:
                # Literals, not parameters: a query without them is read with COPY.
                statement.set_sql_query(
                    f"SELECT {value} AS value, {image_column} AS images, submitted_at, candidate_id"
                    f" FROM {table} WHERE round_id = {int(round_id)}{key}"
                    f" ORDER BY submitted_at, candidate_id LIMIT {page_rows}"
                )
                stream, _rows = statement.execute_query()
                page = pa.RecordBatchReader._import_from_c(stream.address).read_all()
                count = page.num_rows
                if count == 0:
                    return
                column = page.column("value").combine_chunks()
                _validity, offsets_buffer, data = column.buffers()
                wide = pa.types.is_large_binary(column.type)
                offsets = np.frombuffer(offsets_buffer, np.int64 if wide else np.int32)[
                    column.offset : column.offset + len(column) + 1
                ].astype(np.int64)
                found: list[tuple[int, str]] = []
                image_values = page.column("images").combine_chunks()
                if images and pc.max(pc.binary_length(image_values)).as_py():
                    found = [(i, v) for i, v in enumerate(image_values.to_pylist()) if v]
                time = page.column("submitted_at")[-1].as_py()
                if not isinstance(time, datetime):
                    raise RuntimeError(f"a kept record's submission time read as {time!r}")
                last_id = str(page.column("candidate_id")[-1].as_py())
                result = _Page(data=data, offsets=offsets, images=found)
                # Nothing of the page but what the caller has is held while the caller has it.
                del page, column, data, offsets_buffer, image_values
                yield result
                del result
                if count < page_rows:
                    return
                key = (
                    f" AND (submitted_at, candidate_id) > ({_quoted(time.isoformat())}::timestamptz,"
                    f" {_quoted(last_id)})"
                )

    def kept_lines(self, round_id: int) -> Generator[KeptLines, None, None]:
        return self._lines("dataset_record", "record", round_id, images=True)

    def kept_release_lines(self, round_id: int) -> Generator[KeptLines, None, None]:
        return self._lines("dataset_record_release", "line", round_id, images=False)

    def _lines(
        self, table: str, column: str, round_id: int, *, images: bool
    ) -> Generator[KeptLines, None, None]:
        line = (
            f"CAST({column} || x'0a' AS BLOB)"
            if self._database.is_sqlite
            else f"{column} || decode('0a', 'hex')"
        )
        for page in self._pages(table, line, round_id, images=images, rows=PAGE_ROWS):
            start, end = int(page.offsets[0]), int(page.offsets[-1])
            data = (
                page.data
                if isinstance(page.data, bytes)
                else page.data.slice(start, end - start).to_pybytes()
            )
            lines = KeptLines(lines=bytes(data), count=len(page.offsets) - 1, images=page.images)
            del page, data  # the page is not held beside the lines made of it
            yield lines

    def kept_columns(self, round_id: int, round_values: RoundValues) -> Generator[ColumnPage, None, None]:
        import pyarrow as pa
        import pyarrow.compute as pc

        fills = {
            "label_studio": (PROJECT_HOLE.decode(), round_values.project_id.decode()),
            "decision": (POLICY_HOLE.decode(), round_values.policy.decode()),
        }
        round_text = pa.scalar(round_values.round.decode(), pa.string())
        names = [*SCALAR_COLUMNS, "round", *JSON_COLUMNS]
        for page in self._pages(
            "dataset_record_columns", "columns", round_id, images=False, rows=COLUMN_PAGE_ROWS
        ):
            rows = len(page.offsets) - 1
            arrays = dict(zip(_VALUES, unpacked_columns(page.data, page.offsets), strict=True))
            for name, (hole, value) in fills.items():
                arrays[name] = pc.replace_substring(arrays[name], hole, value)
            arrays["round"] = pa.repeat(round_text, rows)
            batch = pa.RecordBatch.from_arrays([arrays[n] for n in names], names=names)
            del page, arrays  # the packed bytes are not held beside the columns made of them
            yield ColumnPage(batch=batch, count=rows)


def unpacked_columns(data: Any, offsets: Any) -> list[Any]:
    """The Arrow string columns of a page of packed values (``pack_columns``), row i's packed value
    being ``data[offsets[i]:offsets[i + 1]]``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(_VALUES)
    rows = len(offsets) - 1
    starts = np.asarray(offsets[:-1], np.int64)
    buffer = pa.py_buffer(data) if isinstance(data, bytes) else data
    if rows and int(np.diff(np.asarray(offsets, np.int64)).min()) < PACKED_HEADER.size:
        raise DamagedRecords(_DAMAGED)
    header_bytes = np.frombuffer(buffer, np.uint8)[starts[:, None] + np.arange(PACKED_HEADER.size)[None, :]]
    header = header_bytes.view("<i4").reshape(rows, count)
    if (header < -1).any():
        raise DamagedRecords(_DAMAGED)
    nulls = header == -1
    lengths = np.where(nulls, 0, header).astype(np.int64)
    if not np.array_equal(
        starts + PACKED_HEADER.size + lengths.sum(axis=1), np.asarray(offsets[1:], np.int64)
    ):
        raise DamagedRecords(_DAMAGED)
    # One binary array over the page, each row being (header, value 1, ..., value n): its offsets
    # are each row's start, then the start of each of its values; the last is the page's end.
    bounds = np.empty((rows, count + 1), np.int64)
    bounds[:, 0] = starts
    bounds[:, 1:] = starts[:, None] + PACKED_HEADER.size + np.cumsum(lengths, axis=1) - lengths
    flat_offsets = np.append(bounds.ravel(), offsets[-1])
    large = int(offsets[-1]) >= 2**31
    flat_type = pa.large_binary() if large else pa.binary()
    flat = pa.Array.from_buffers(
        flat_type,
        rows * (count + 1),
        [None, pa.py_buffer(flat_offsets.astype(np.int64 if large else np.int32)), buffer],
    )
    columns = []
    null = pa.scalar(None, flat_type)
    for k in range(count):
        column = pc.take(flat, pa.array(np.arange(k + 1, rows * (count + 1), count + 1)))
        if nulls[:, k].any():
            column = pc.if_else(pa.array(nulls[:, k]), null, column)
        # The values are UTF-8 (packed from str): a view, not a validating cast.
        columns.append(
            column.view(pa.large_string()).cast(pa.string()) if large else column.view(pa.string())
        )
    return columns
