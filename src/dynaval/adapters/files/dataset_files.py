"""Writing a round dataset as JSONL or Parquet, a page of records at a time (memory bounded by a page).

A JSONL file is the kept records' JSON lines as they come (keys sorted, non-ASCII text as itself
(UTF-8), compact separators: :mod:`dynaval.service_layer.dataset_records.stored_record`). A Parquet
file has flat string columns (:data:`~dynaval.service_layer.dataset_records.stored_record.PARQUET_COLUMNS`):
the record's scalar fields, the input ``text``, and each nested part as JSON text, so that every row
group has the same schema; they come as Arrow record batches (the kept columns), each page one row
group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from dynaval.adapters.files.background_writes import BackgroundWork
from dynaval.service_layer.dataset_records.dataset_port import ColumnPage
from dynaval.service_layer.dataset_records.stored_record import PARQUET_COLUMNS

FORMATS = ("jsonl", "parquet")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}

Chunk = tuple[bytes, int]
"""A page of records as JSON lines, each ending in a newline (no JSON line holds another), and
the number of lines."""

_OPTIONS = orjson.OPT_SORT_KEYS
_DICTIONARY_COLUMNS = ["task_type", "round", "writer_label", "collected_by"]
"""The columns with few distinct values, which Parquet's dictionary encoding shrinks; the others
(ids, texts, JSON) are written plain, which costs less time and no more space."""


def json_text(value: Any) -> bytes:
    """One value as the dataset writes JSON: sorted keys, UTF-8."""
    return orjson.dumps(value, option=_OPTIONS)


def write_dataset(
    pages: Iterable[Any],
    path: Path,
    fmt: str,
    *,
    on_page: Callable[[int], None] | None = None,
) -> int:
    """Write the pages' records to ``path`` (via a temporary file, renamed at the end): JSONL from
    :data:`Chunk` pages, Parquet from :class:`ColumnPage` pages.

    The file is written by a thread of its own (a write runs without the GIL), so the disk's time
    overlaps the reading and filling of the next pages. ``on_page`` is called with the number of
    records of each page handed to it. Returns the count.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    tmp = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tmp.open("wb") as handle:
        # One page waits while another is written: a JSONL page is 11 MB, and more waiting pages
        # would only hold memory (the writer keeps up, or the disk is the bound either way).
        writes = BackgroundWork("dataset-file", queued=1)

        def write(chunk: bytes) -> None:
            handle.write(chunk)

        try:
            for chunk, records in encode_dataset(pages, fmt):
                writes.submit(write, chunk)
                count += records
                if on_page and records:
                    on_page(records)
        except BaseException:
            writes.stop()
            raise
        writes.close()
    tmp.replace(path)
    return count


def encode_dataset(pages: Iterable[Any], fmt: str) -> Iterator[tuple[bytes, int]]:
    """The file's bytes, a piece per page: (bytes, number of records in them). JSONL from
    :data:`Chunk` pages, Parquet from :class:`ColumnPage` pages. Nothing is held beyond a page, so
    this streams a download as well as it writes a file."""
    if fmt == "jsonl":
        yield from pages
    elif fmt == "parquet":
        yield from _parquet_pieces(pages)
    else:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")


class _Sink:
    """Where the Parquet writer writes: bytes kept until the next page takes them."""

    closed = False

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def write(self, data: Any) -> int:
        self.pieces.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self.pieces)
        self.pieces = []
        return data


def parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema([(c, pa.string()) for c in PARQUET_COLUMNS])


def _parquet_pieces(pages: Iterable[ColumnPage]) -> Iterator[tuple[bytes, int]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    sink = _Sink()
    count = 0
    with pq.ParquetWriter(
        pa.PythonFile(sink, mode="w"), schema, use_dictionary=_DICTIONARY_COLUMNS
    ) as writer:
        for page in pages:
            if not page.count:
                continue
            writer.write_batch(page.batch)
            count += page.count
            yield sink.take(), page.count
        if count == 0:  # an empty dataset is a file with the schema and no rows
            writer.write_table(schema.empty_table())
    yield sink.take(), 0
