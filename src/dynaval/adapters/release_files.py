"""A release directory, in the Hugging Face dataset layout, so that ``datasets.load_dataset(DIR)``
loads it with no other argument:

```
README.md                                 the dataset card, with its YAML metadata (configs, features)
manifest.json                             versions, rounds, splits, files and hashes, the split rule
data/<split>-00000-of-0000N.parquet       the rows, typed by ``datasets.Features`` (label: ClassLabel)
jsonl/<split>.jsonl                       the same rows as JSON lines (label as its name), for grep
```

Parquet files carry the features in their schema metadata, as ``datasets`` writes them; the card's
``configs`` name every split's files. The JSONL rows are the canonical rows: keys sorted, UTF-8,
compact (what the content hash is computed over).
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from dynaval.domain.release_rows import row_columns

SHARD_ROWS = 250_000
"""Rows per Parquet shard."""
BATCH_ROWS = 2_000
MANIFEST = "manifest.json"
CARD = "README.md"
_LINE = orjson.OPT_SORT_KEYS


def canonical_line(row: Mapping[str, Any]) -> bytes:
    """One row as its JSONL line, without the newline: sorted keys, UTF-8, compact."""
    return orjson.dumps(row, option=_LINE)


def release_features(fields: Sequence[str], labels: Sequence[str]) -> Any:
    """The rows' ``datasets.Features``: the label a ClassLabel with the task's names."""
    from datasets import ClassLabel, Features, List, Value

    string, integer, real, boolean = Value("string"), Value("int64"), Value("float64"), Value("bool")
    vote = {
        "annotator": string, "label": string, "flagged": boolean, "flag_reason": string,
        "annotation_id": integer, "created_at": string, "updated_at": string, "lead_time_s": real,
        "counted": boolean,
    }  # fmt: skip
    types: dict[str, Any] = {
        "example_id": string, "round": Value("int32"), "round_id": integer, "round_name": string,
        **{name: string for name in fields},
        "label": ClassLabel(names=list(labels)),
        "rationale": string, "writer": string, "writer_annotator": string, "collected_by": string,
        "submitted_at": string, "model_name": string, "model_hash": string, "model_prediction": string,
        "model_probabilities": {label: real for label in labels}, "model_signature": string,
        "model_fooled": boolean, "label_studio_project_id": integer, "label_studio_task_id": integer,
        "votes": List(vote), "validators_agreeing": Value("int32"), "item_agreement": real,
        "majority_label": string, "majority_share": real, "decision_outcome": string,
        "decision_reason": string, "rule_version": string, "decided_at": string,
        "override": {"outcome": string, "reason": string, "by": string, "at": string},
    }  # fmt: skip
    assert tuple(types) == row_columns(fields)
    return Features(types)


def features_yaml(fields: Sequence[str], labels: Sequence[str]) -> list[dict[str, Any]]:
    """The features as a card's ``dataset_info.features`` (``datasets``' own YAML form)."""
    from datasets import DatasetInfo

    features: list[dict[str, Any]] = DatasetInfo(features=release_features(fields, labels))._to_yaml_dict()[
        "features"
    ]
    return features


def shard_paths(split: str, rows: int) -> list[str]:
    count = max(1, -(-rows // SHARD_ROWS))
    return [f"data/{split}-{i:05d}-of-{count:05d}.parquet" for i in range(count)]


@dataclass(frozen=True)
class WrittenFile:
    path: str
    split: str
    rows: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "split": self.split, "rows": self.rows, "sha256": self.sha256}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _SplitWriter:
    """One split's Parquet shards and JSONL file, written a batch at a time."""

    def __init__(self, root: Path, split: str, rows: int, schema: Any, labels: Sequence[str]) -> None:
        self.root = root
        self.split = split
        self.schema = schema
        self.label_index = {label: i for i, label in enumerate(labels)}
        self.shards = shard_paths(split, rows)
        self.shard = -1
        self.in_shard = 0
        self.shard_rows: list[int] = []
        self.writer: Any = None
        self.batch: list[dict[str, Any]] = []
        self.jsonl_path = f"jsonl/{split}.jsonl"
        self.jsonl = (root / self.jsonl_path).open("wb")
        self.jsonl_rows = 0

    def add(self, row: dict[str, Any], line: bytes) -> None:
        self.jsonl.write(line + b"\n")
        self.jsonl_rows += 1
        self.batch.append({**row, "label": self.label_index[row["label"]]})
        if len(self.batch) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        while self.batch:
            if self.writer is None or self.in_shard >= SHARD_ROWS:
                self._next_shard(pq)
            room = SHARD_ROWS - self.in_shard
            part, self.batch = self.batch[:room], self.batch[room:]
            self.writer.write_table(pa.Table.from_pylist(part, schema=self.schema))
            self.in_shard += len(part)
            self.shard_rows[-1] += len(part)

    def _next_shard(self, pq: Any) -> None:
        if self.writer is not None:
            self.writer.close()
        self.shard += 1
        self.in_shard = 0
        self.shard_rows.append(0)
        self.writer = pq.ParquetWriter(self.root / self.shards[self.shard], self.schema)

    def close(self) -> list[WrittenFile]:
        import pyarrow.parquet as pq

        self._flush()
        if self.writer is None:  # an empty split still gets its (one, empty) shard
            self._next_shard(pq)
        self.writer.close()
        self.jsonl.close()
        files = [
            WrittenFile(path, self.split, rows, file_sha256(self.root / path))
            for path, rows in zip(self.shards, self.shard_rows, strict=False)
        ]
        files.append(
            WrittenFile(
                self.jsonl_path, self.split, self.jsonl_rows, file_sha256(self.root / self.jsonl_path)
            )
        )
        return files


class ReleaseWriter:
    """Writes the rows of a release into ``root`` (which must not exist yet)."""

    def __init__(
        self, root: Path, *, fields: Sequence[str], labels: Sequence[str], split_rows: Mapping[str, int]
    ) -> None:
        root.mkdir(parents=True)
        (root / "data").mkdir()
        (root / "jsonl").mkdir()
        self.root = root
        schema = release_features(fields, labels).arrow_schema
        self.splits = {
            split: _SplitWriter(root, split, rows, schema, labels)
            for split, rows in sorted(split_rows.items())
        }

    def add(self, split: str, row: dict[str, Any], line: bytes) -> None:
        self.splits[split].add(row, line)

    def close(self) -> list[WrittenFile]:
        files: list[WrittenFile] = []
        for writer in self.splits.values():
            files.extend(writer.close())
        return files

    def abort(self) -> None:
        for writer in self.splits.values():
            writer.jsonl.close()
            if writer.writer is not None:
                writer.writer.close()


def write_text(root: Path, name: str, text: str) -> None:
    path = root / name
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def manifest_text(manifest: Mapping[str, Any]) -> str:
    return orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


# ----------------------------------------------------------------------------- reading


class ReleaseUnreadable(Exception):
    """The directory is not a release (no or a broken manifest); the message says which."""


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not root.is_dir():
        raise ReleaseUnreadable(f"{root} is not a directory")
    if not path.is_file():
        raise ReleaseUnreadable(f"{root} holds no {MANIFEST}: not a release directory")
    try:
        manifest = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ReleaseUnreadable(f"{MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise ReleaseUnreadable(f"{MANIFEST} has no list of files")
    return manifest


def iter_jsonl(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """Each line of a JSONL file (without its newline) and its row."""
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.rstrip(b"\n")
            if line:
                yield line, orjson.loads(line)


def parquet_column(path: Path, column: str) -> list[Any]:
    import pyarrow.parquet as pq

    values: list[Any] = pq.read_table(path, columns=[column]).column(column).to_pylist()
    return values


def parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    rows: int = pq.ParquetFile(path).metadata.num_rows
    return rows


# ---------------------------------------------------------------------------- archive


def archive_chunks(root: Path, prefix: str) -> Iterator[bytes]:
    """The release directory as one uncompressed tar (under ``prefix/``), a piece at a time: the
    Parquet files are compressed already, and nothing is built or held ahead of the download."""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".partial")):
        info = tarfile.TarInfo(f"{prefix}/{path.relative_to(root).as_posix()}")
        stat = path.stat()
        info.size = stat.st_size
        info.mtime = int(stat.st_mtime)
        info.mode = 0o644
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                yield chunk
        if info.size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - info.size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)
