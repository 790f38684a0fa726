"""Writing a round dataset to JSONL or Parquet, streaming (constant memory per page)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

FORMATS = ("jsonl", "parquet")
_PARQUET_BATCH = 1000
# Nested provenance goes into JSON-text columns so every batch has the same flat schema.
_NESTED = ("round", "inputs", "model", "label_studio", "votes", "agreement", "decision")


def jsonl_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"


def write_dataset(
    records: Iterable[dict[str, Any]],
    path: Path,
    fmt: str,
    *,
    on_record: Callable[[], None] | None = None,
) -> int:
    """Write records to ``path`` (via a temporary file, renamed at the end). Returns the count."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    tmp = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    if fmt == "jsonl":
        with tmp.open("w", encoding="utf-8", newline="\n") as handle:
            for record in records:
                handle.write(jsonl_line(record))
                count += 1
                if on_record:
                    on_record()
    else:
        count = _write_parquet(records, tmp, on_record)
    tmp.replace(path)
    return count


def _flatten(record: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in record.items() if k not in _NESTED}
    for key in _NESTED:
        flat[key] = json.dumps(record.get(key), ensure_ascii=False, sort_keys=True)
    flat["text"] = (record.get("inputs") or {}).get("text")
    return flat


def _write_parquet(
    records: Iterable[dict[str, Any]], path: Path, on_record: Callable[[], None] | None
) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [
        "example_id", "task_type", "text", "writer_label", "writer", "collected_by", "submitted_at", *_NESTED
    ]  # fmt: skip
    schema = pa.schema([(c, pa.string()) for c in columns])
    count = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        batch: list[dict[str, Any]] = []
        for record in records:
            batch.append(_flatten(record))
            count += 1
            if on_record:
                on_record()
            if len(batch) >= _PARQUET_BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count
