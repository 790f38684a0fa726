"""Writing a round dataset as JSONL or Parquet, a page of records at a time (memory bounded by a page).

JSON is encoded by orjson: keys sorted, non-ASCII text as itself (UTF-8), compact separators.
A Parquet file has flat string columns: the record's scalar fields, the input ``text``, and each
nested part as JSON text, so that every row group has the same schema; each page of records is
one row group, built column by column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

FORMATS = ("jsonl", "parquet")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}

Page = Sequence[dict[str, Any]]

_OPTIONS = orjson.OPT_SORT_KEYS
_LINE_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
# Nested provenance goes into JSON-text columns so every batch has the same flat schema.
_NESTED = ("round", "inputs", "model", "label_studio", "votes", "agreement", "decision")
_SCALARS = ("example_id", "task_type")
_COLUMNS = (
    "example_id", "task_type", "text", "writer_label", "writer", "collected_by", "submitted_at", *_NESTED,
)  # fmt: skip


def json_text(value: Any) -> bytes:
    """One value as the dataset writes JSON: sorted keys, UTF-8."""
    return orjson.dumps(value, option=_OPTIONS)


def jsonl_chunk(records: Page) -> bytes:
    """Records as JSON lines, one per record, each ending in a newline."""
    dumps = orjson.dumps
    return b"".join([dumps(record, None, _LINE_OPTIONS) for record in records])


def write_dataset(
    pages: Iterable[Page],
    path: Path,
    fmt: str,
    *,
    on_page: Callable[[int], None] | None = None,
) -> int:
    """Write the pages' records to ``path`` (via a temporary file, renamed at the end).

    ``on_page`` is called with the number of records of each page written. Returns the count.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    tmp = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tmp.open("wb") as handle:
        for chunk, records in encode_dataset(pages, fmt):
            handle.write(chunk)
            count += records
            if on_page and records:
                on_page(records)
    tmp.replace(path)
    return count


def encode_dataset(pages: Iterable[Page], fmt: str) -> Iterator[tuple[bytes, int]]:
    """The file's bytes, a piece per page: (bytes, number of records in them). Nothing is held
    beyond a page, so this streams a download as well as it writes a file."""
    if fmt == "jsonl":
        for page in pages:
            yield jsonl_chunk(page), len(page)
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

    return pa.schema([(c, pa.string()) for c in _COLUMNS])


def _parquet_pieces(pages: Iterable[Page]) -> Iterator[tuple[bytes, int]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    sink = _Sink()
    dumps = orjson.dumps
    count = 0
    with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema) as writer:
        for page in pages:
            if not page:
                continue
            columns: list[list[Any]] = [[r[name] for r in page] for name in _SCALARS]
            columns.append([(r["inputs"] or {}).get("text") for r in page])
            columns.extend([r[name] for r in page] for name in ("writer_label", "writer", "collected_by"))
            columns.append([r["submitted_at"] for r in page])
            columns.extend([dumps(r[name], None, _OPTIONS) for r in page] for name in _NESTED)
            arrays = [pa.array(values, type=pa.string()) for values in columns]
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
            count += len(page)
            yield sink.take(), len(page)
        if count == 0:  # an empty dataset is a file with the schema and no rows
            writer.write_table(schema.empty_table())
    yield sink.take(), 0
