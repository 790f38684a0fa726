"""Writing a round dataset as JSONL or Parquet, a page of records at a time (memory bounded by a page).

The records come as their JSON lines, as kept (keys sorted, non-ASCII text as itself (UTF-8),
compact separators: :mod:`dynaval.service_layer.dataset_records.stored_record`): a JSONL file is
those lines as they are.
A Parquet file has flat string columns: the record's scalar fields, the input ``text``, and each
nested part as JSON text, so that every row group has the same schema; each page of records is
one row group, built column by column.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from dynaval.adapters.files.background_writes import BackgroundWork

FORMATS = ("jsonl", "parquet")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}

Page = Sequence[dict[str, Any]]
Chunk = tuple[bytes, int]
"""A page of records as JSON lines, each ending in a newline (no JSON line holds another), and
the number of lines."""

_OPTIONS = orjson.OPT_SORT_KEYS
# Nested provenance goes into JSON-text columns so every batch has the same flat schema.
_NESTED = ("round", "inputs", "model", "label_studio", "votes", "agreement", "decision")
_SCALARS = ("example_id", "task_type")
_SCALARS_AFTER_TEXT = ("writer_label", "rationale", "writer", "collected_by", "submitted_at")
_COLUMNS = (
    "example_id", "task_type", "text", "writer_label", "rationale", "writer", "collected_by", "submitted_at",
    *_NESTED,
)  # fmt: skip


def json_text(value: Any) -> bytes:
    """One value as the dataset writes JSON: sorted keys, UTF-8."""
    return orjson.dumps(value, option=_OPTIONS)


def write_dataset(
    pages: Iterable[Chunk],
    path: Path,
    fmt: str,
    *,
    on_page: Callable[[int], None] | None = None,
) -> int:
    """Write the pages' records to ``path`` (via a temporary file, renamed at the end).

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
        writes = BackgroundWork("dataset-file")

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


def encode_dataset(pages: Iterable[Chunk], fmt: str) -> Iterator[tuple[bytes, int]]:
    """The file's bytes, a piece per page of JSON lines: (bytes, number of records in them).
    Nothing is held beyond a page, so this streams a download as well as it writes a file."""
    if fmt == "jsonl":
        yield from pages
    elif fmt == "parquet":
        yield from _parquet_pieces(_decoded(pages))
    else:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")


PARQUET_ROW_GROUP = 2000
"""Records decoded at a time for a Parquet row group: a page of dicts is the Parquet path's memory."""


def _decoded(pages: Iterable[Chunk]) -> Iterator[Page]:
    loads = orjson.loads
    for page, _count in pages:
        lines = page.split(b"\n")[:-1]
        for start in range(0, len(lines), PARQUET_ROW_GROUP):
            yield [loads(line) for line in lines[start : start + PARQUET_ROW_GROUP]]


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


def _string_array(values: Sequence[bytes | None]) -> Any:
    """A string column from UTF-8 values (None: null), built from its buffers. pyarrow's conversion
    of Python lists would do as well, but the first one maps some 50 MB of its code into memory."""
    import pyarrow as pa

    validity = None
    present: Sequence[bytes | None] = values
    if None in values:
        # Arrow's validity bitmap: bit i (least significant first) set when value i is not null.
        bits = sum(1 << i for i, v in enumerate(values) if v is not None)
        validity = pa.py_buffer(bits.to_bytes((len(values) + 7) // 8, "little"))
        present = [b"" if v is None else v for v in values]
    offsets = array.array("i", itertools.accumulate(map(len, present), initial=0))  # type: ignore[arg-type]
    data = b"".join(present)  # type: ignore[arg-type]
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(data), validity)


def _utf8(values: Iterable[str | None]) -> list[bytes | None]:
    return [None if v is None else v.encode() for v in values]


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
            # Column by column, each turned into an array before the next is encoded: orjson's
            # bytes objects hold about 4 KB each whatever their length, so a page's worth of
            # them at once (14 columns x 2,000 rows) would take some 100 MB.
            arrays = [_string_array(_utf8([r[name] for r in page])) for name in _SCALARS]
            arrays.append(_string_array(_utf8([(r["inputs"] or {}).get("text") for r in page])))
            arrays.extend(_string_array(_utf8([r[name] for r in page])) for name in _SCALARS_AFTER_TEXT)
            arrays.extend(_string_array([dumps(r[name], None, _OPTIONS) for r in page]) for name in _NESTED)
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            writer.write_batch(batch)
            count += len(page)
            yield sink.take(), len(page)
        if count == 0:  # an empty dataset is a file with the schema and no rows
            writer.write_table(schema.empty_table())
    yield sink.take(), 0
