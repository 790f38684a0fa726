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
import shutil
import tarfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from dynaval.adapters.files.background_writes import BackgroundWork, LineWriter
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.images.image import RELEASE_FOLDER, sha_of_release_path
from dynaval.domain.releases.release import CARD, MANIFEST
from dynaval.domain.releases.rows import canonical_line, row_columns
from dynaval.service_layer.files import ReleaseStaging, ReleaseUnreadable, RowSink, SplitFiles, WrittenFile

__all__ = ["CARD", "MANIFEST", "ReleaseFolders", "ReleaseUnreadable", "WrittenFile", "canonical_line"]

SHARD_ROWS = 250_000
"""Rows per Parquet shard."""
ROW_GROUP_ROWS = 2_000
"""Rows per Parquet row group."""


def release_features(fields: Sequence[str], labels: Sequence[str], image_fields: Sequence[str] = ()) -> Any:
    """The rows' ``datasets.Features``: the label a ClassLabel with the task's names, an image field
    an ``Image`` (its bytes in the Parquet files: ``load_dataset`` gives PIL images)."""
    from datasets import ClassLabel, Features, Image, List, Value

    string, integer, real, boolean = Value("string"), Value("int64"), Value("float64"), Value("bool")
    vote = {
        "annotator": string, "label": string, "flagged": boolean, "flag_reason": string,
        "annotation_id": integer, "created_at": string, "updated_at": string, "lead_time_s": real,
        "counted": boolean,
    }  # fmt: skip
    types: dict[str, Any] = {
        "example_id": string, "round": Value("int32"), "round_id": integer, "round_name": string,
        **{name: Image() if name in image_fields else string for name in fields},
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


def features_yaml(
    fields: Sequence[str], labels: Sequence[str], image_fields: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The features as a card's ``dataset_info.features`` (``datasets``' own YAML form)."""
    from datasets import DatasetInfo

    info = DatasetInfo(features=release_features(fields, labels, image_fields))
    features: list[dict[str, Any]] = info._to_yaml_dict()["features"]
    return features


def shard_paths(split: str, rows: int) -> list[str]:
    count = max(1, -(-rows // SHARD_ROWS))
    return [f"data/{split}-{i:05d}-of-{count:05d}.parquet" for i in range(count)]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _ParquetSplit:
    """One split's Parquet shards, made from its JSONL lines a chunk at a time by Arrow's JSON
    reader, typed by the release's schema: no Python object per row. Row groups hold
    ``ROW_GROUP_ROWS`` rows each, whatever the chunks, so the files are the same however the lines
    were chunked. Used by the background work only, until it is closed."""

    def __init__(
        self, root: Path, split: str, rows: int, schema: Any, labels: Sequence[str], images: _ReleaseImages
    ) -> None:
        import pyarrow as pa

        self.root = root
        self.split = split
        self.schema = schema
        self.paths = shard_paths(split, rows)
        self.rows = [0] * len(self.paths)
        self.writer: Any = None
        self._shard = 0
        self.label_at = schema.get_field_index("label")
        as_read = schema.remove_metadata().set(self.label_at, pa.field("label", pa.string()))
        self.images = images
        self.image_at = [schema.get_field_index(name) for name in images.fields]
        for at in self.image_at:  # the JSONL holds the image's path in the release
            as_read = as_read.set(at, pa.field(schema.field(at).name, pa.string()))
        self.as_read = as_read
        self.names = pa.array(list(labels), pa.string())
        self.pending = pa.Table.from_batches([], schema=schema)

    def write(self, chunk: bytes) -> None:
        """Whole JSONL lines of the split, after those written before."""
        import pyarrow as pa

        self.pending = pa.concat_tables([self.pending, self._typed(chunk)], memory_pool=_pool())
        while self.pending.num_rows >= ROW_GROUP_ROWS:
            self._write_group(self.pending.slice(0, ROW_GROUP_ROWS))
            self.pending = self.pending.slice(ROW_GROUP_ROWS)

    def close(self) -> list[int]:
        """Write what is left: each shard's row count."""
        if self.pending.num_rows:
            self._write_group(self.pending)
        if self.writer is None:  # an empty split still gets its (one, empty) shard
            self._next_shard(0)
        self.writer.close()
        self.writer = None
        return self.rows

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _typed(self, chunk: bytes) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        pool = _pool()
        table = pj.read_json(
            pa.py_buffer(chunk),
            # One block: the chunk ends with a whole line, however long its rows.
            read_options=pj.ReadOptions(use_threads=False, block_size=len(chunk)),
            parse_options=pj.ParseOptions(explicit_schema=self.as_read, unexpected_field_behavior="error"),
            memory_pool=pool,
        )
        label = table.column(self.label_at)
        codes = pc.index_in(label, value_set=self.names, memory_pool=pool)
        if codes.null_count:
            unknown = pc.filter(label, pc.is_null(codes))[0]
            raise ValueError(f"a row of split {self.split} has the label {unknown}, not one of the task's")
        columns = table.columns
        columns[self.label_at] = pc.cast(codes, pa.int64(), memory_pool=pool)
        for at in self.image_at:
            columns[at] = self.images.column(columns[at].to_pylist(), self.schema.field(at).type)
        return pa.Table.from_arrays(columns, schema=self.schema)

    def _write_group(self, group: Any) -> None:
        if self.writer is None:
            self._next_shard(0)
        while group.num_rows:
            if self.rows[self._shard] == SHARD_ROWS:
                self._next_shard(self._shard + 1)
            part = group.slice(0, SHARD_ROWS - self.rows[self._shard])
            self.writer.write_table(part, row_group_size=ROW_GROUP_ROWS)
            self.rows[self._shard] += part.num_rows
            group = group.slice(part.num_rows)

    def _next_shard(self, shard: int) -> None:
        import pyarrow.parquet as pq

        if self.writer is not None:
            self.writer.close()
        self._shard = shard
        self.writer = pq.ParquetWriter(self.root / self.paths[shard], self.schema, memory_pool=_pool())


def _pool() -> Any:
    """The memory pool the Parquet conversion allocates from: the system allocator, which gives
    parsed chunks back as they are written; Arrow's default pool kept about ten megabytes more at
    the build's peak (docs/benchmarks.md, "The second core")."""
    import pyarrow as pa

    return pa.system_memory_pool()


class _ReleaseImages:
    """An image task type's images: each row's image put in the Parquet files (its bytes) and, once,
    in the release's ``images/`` folder, from the image store (``image_bytes``: a SHA-256's PNG)."""

    def __init__(self, root: Path, fields: Sequence[str], image_bytes: Callable[[str], bytes] | None) -> None:
        self.root = root
        self.fields = tuple(fields)
        self.image_bytes = image_bytes
        self.written: dict[str, str] = {}
        """Each image's path in the release -> its file's SHA-256."""
        if self.fields:
            (root / RELEASE_FOLDER).mkdir()

    def column(self, paths: Sequence[str | None], arrow_type: Any) -> Any:
        import pyarrow as pa

        values: list[dict[str, Any] | None] = []
        for path in paths:
            if path is None:
                values.append(None)
                continue
            sha = sha_of_release_path(path)
            data = self._bytes(sha)
            if path not in self.written:
                (self.root / path).write_bytes(data)
                self.written[path] = hashlib.sha256(data).hexdigest()
            values.append({"bytes": data, "path": path})
        return pa.array(values, type=arrow_type)

    def _bytes(self, sha: str) -> bytes:
        if self.image_bytes is None:
            raise ValueError("an image task type's release needs the image store")
        return self.image_bytes(sha)

    def files(self) -> list[WrittenFile]:
        return [WrittenFile(path, RELEASE_FOLDER, 1, sha) for path, sha in sorted(self.written.items())]


class _SplitWriter:
    """One split's JSONL file and Parquet shards: its lines are written, hashed and turned into
    Parquet rows by the release's background work, a chunk at a time."""

    def __init__(self, root: Path, split: str, parquet: _ParquetSplit, work: BackgroundWork) -> None:
        self.root = root
        self.split = split
        self.parquet = parquet
        self.jsonl_path = f"jsonl/{split}.jsonl"
        self.jsonl = LineWriter(root / self.jsonl_path, work, hashed=True, then=parquet.write)

    def files(self) -> list[WrittenFile]:
        """Once the work is closed: the split's files."""
        files = [
            WrittenFile(path, self.split, rows, file_sha256(self.root / path))
            for path, rows in zip(self.parquet.paths, self.parquet.close(), strict=True)
        ]
        files.append(WrittenFile(self.jsonl_path, self.split, self.jsonl.lines, self.jsonl.sha256))
        return files

    def abort(self) -> None:
        self.jsonl.abort()
        self.parquet.abort()


class ReleaseWriter:
    """Writes the rows of a release into ``root`` (which must not exist yet): each split's JSONL
    lines, and its Parquet shards made from them, on a thread beside the caller
    (:mod:`dynaval.adapters.files.background_writes`)."""

    def __init__(
        self,
        root: Path,
        *,
        fields: Sequence[str],
        labels: Sequence[str],
        split_rows: Mapping[str, int],
        image_fields: Sequence[str] = (),
        image_bytes: Callable[[str], bytes] | None = None,
    ) -> None:
        root.mkdir(parents=True)
        (root / "data").mkdir()
        (root / "jsonl").mkdir()
        self.root = root
        schema = release_features(fields, labels, image_fields).arrow_schema
        self.images = _ReleaseImages(root, image_fields, image_bytes)
        self.work = BackgroundWork("release-files")
        self.splits: dict[str, _SplitWriter] = {}
        try:
            for split, rows in sorted(split_rows.items()):
                parquet = _ParquetSplit(root, split, rows, schema, labels, self.images)
                self.splits[split] = _SplitWriter(root, split, parquet, self.work)
        except BaseException:
            self.abort()  # no thread left waiting, no file left open
            raise

    def add(self, split: str, line: bytes) -> None:
        """One canonical row (its JSONL line, without the newline) into ``split``."""
        self.splits[split].jsonl.add(line)

    def close(self) -> list[WrittenFile]:
        for writer in self.splits.values():
            writer.jsonl.close()
        self.work.close()
        files: list[WrittenFile] = []
        for writer in self.splits.values():
            files.extend(writer.files())
        return files

    def image_files(self) -> list[WrittenFile]:
        """Once closed: the images the release holds (``images/<sha256>.png``), each once."""
        return self.images.files()

    def abort(self) -> None:
        self.work.stop()
        for writer in self.splits.values():
            writer.abort()


def write_text(root: Path, name: str, text: str) -> None:
    path = root / name
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def manifest_text(manifest: Mapping[str, Any]) -> str:
    return orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


# ----------------------------------------------------------------------------- reading


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


READ_CHUNK_BYTES = 1 << 22
"""What :class:`HashedJsonl` reads at a time (4 MiB)."""


class HashedJsonl:
    """The rows of a JSONL file (as :func:`iter_jsonl`) and, once all are iterated, the file's
    SHA-256 and number of rows: the file read once, a chunk at a time, for ``release verify``,
    which needs all three and read every file twice before (once for its rows, then again for its
    hash and its count)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sha256: str | None = None
        self.rows = 0

    def __iter__(self) -> Iterator[tuple[bytes, dict[str, Any]]]:
        digest = hashlib.sha256()
        rest = b""
        with self.path.open("rb") as handle:
            while chunk := handle.read(READ_CHUNK_BYTES):
                digest.update(chunk)
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line:
                        row = orjson.loads(line)
                        self.rows += 1
                        yield line, row
        if rest:
            row = orjson.loads(rest)
            self.rows += 1
            yield rest, row
        self.sha256 = digest.hexdigest()


def iter_lines(path: Path) -> Iterator[bytes]:
    """Each line of a file of lines (one :class:`LineWriter` wrote), without its newline."""
    with path.open("rb") as handle:
        for raw in handle:
            yield raw[:-1] if raw.endswith(b"\n") else raw


PARQUET_BATCH_ROWS = 32_768
"""Rows read from a Parquet file at a time, when its columns are compared with what is expected."""


def parquet_column_batches(path: Path, columns: Sequence[str]) -> Iterator[list[list[Any]]]:
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as file:
        for batch in file.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(columns)):
            yield [batch.column(name).to_pylist() for name in columns]


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


class _Staging:
    """A release built in a scratch folder of the releases folder, then renamed into place."""

    def __init__(self, store: Path, name: str) -> None:
        store.mkdir(parents=True, exist_ok=True)
        self.final = store / name
        self.scratch = store / f".building-{uuid.uuid4().hex}"
        self.scratch.mkdir()
        self.out = self.scratch / "release"

    def publish(self) -> Path:
        if self.final.exists():
            raise Conflict(f"{self.final.name} exists already in the releases folder", field="version")
        self.out.rename(self.final)
        return self.final

    def clean_up(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def withdraw(self) -> None:
        shutil.rmtree(self.final, ignore_errors=True)


class ReleaseFolders:
    """The use cases' :class:`~dynaval.service_layer.files.ReleaseFiles`: the functions above."""

    def read_manifest(self, root: Path) -> dict[str, Any]:
        return read_manifest(root)

    def iter_rows(self, path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
        return iter_jsonl(path)

    def hashed_rows(self, path: Path) -> HashedJsonl:
        return HashedJsonl(path)

    def file_sha256(self, path: Path) -> str:
        return file_sha256(path)

    def parquet_column_batches(self, path: Path, columns: Sequence[str]) -> Iterator[list[list[Any]]]:
        return parquet_column_batches(path, columns)

    def parquet_rows(self, path: Path) -> int:
        return parquet_rows(path)

    def stage(self, store: Path, name: str) -> ReleaseStaging:
        return _Staging(store, name)

    def scratch_rows(self, path: Path) -> RowSink:
        return LineWriter(path)

    def iter_lines(self, path: Path) -> Iterator[bytes]:
        return iter_lines(path)

    def remove(self, path: Path) -> None:
        path.unlink()

    def split_files(
        self,
        root: Path,
        *,
        fields: Sequence[str],
        labels: Sequence[str],
        split_rows: Mapping[str, int],
        image_fields: Sequence[str] = (),
        image_bytes: Callable[[str], bytes] | None = None,
    ) -> SplitFiles:
        return ReleaseWriter(
            root,
            fields=fields,
            labels=labels,
            split_rows=split_rows,
            image_fields=image_fields,
            image_bytes=image_bytes,
        )

    def features(
        self, fields: Sequence[str], labels: Sequence[str], image_fields: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        return features_yaml(fields, labels, image_fields)

    def write_manifest(self, root: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
        text = manifest_text(manifest)
        write_text(root, MANIFEST, text)
        stored: dict[str, Any] = orjson.loads(text)
        return stored

    def write_card(self, root: Path, text: str) -> None:
        write_text(root, CARD, text)

    def archive(self, root: Path, prefix: str) -> Iterator[bytes]:
        return archive_chunks(root, prefix)

    def is_file(self, path: Path) -> bool:
        return path.is_file()

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def file_names(self, folder: Path) -> list[str]:
        return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []

    def holds_release(self, root: Path) -> bool:
        return (root / MANIFEST).is_file()

    def read_card(self, root: Path) -> str | None:
        path = root / CARD
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None

    def check_copy_target(self, out: Path) -> None:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InvalidInput(f"{out} exists and is not an empty folder; name a new folder", field="out")

    def copy(self, root: Path, out: Path) -> Path:
        self.check_copy_target(out)
        if out.exists():
            out.rmdir()
        shutil.copytree(root, out)
        return out
