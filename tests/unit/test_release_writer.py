"""The release writer makes each split's Parquet shards from its JSONL lines in a thread of its own,
with Arrow's JSON reader: the shards must hold exactly the rows (typed by the release's features,
the label as its class index), in row groups that do not depend on how the lines were chunked, and
a failure in the thread must reach the caller."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dynaval.adapters.files import background_writes, release_files
from dynaval.adapters.files.release_files import ReleaseWriter, canonical_line, release_features
from dynaval.domain.releases.rows import row_columns

FIELDS = ["premise", "hypothesis"]
LABELS = ["entailment", "neutral", "contradiction"]


def _row(rng: random.Random, i: int, *, text: str | None = None) -> dict[str, Any]:
    label = rng.choice(LABELS)
    probabilities = None if i % 7 == 0 else {name: rng.random() for name in LABELS}
    row: dict[str, Any] = {
        "example_id": f"ex-{i:05d}",
        "round": 1 + i % 2,
        "round_id": 10 + i % 2,
        "round_name": "r",
        "premise": text if text is not None else f"premise {i} é ✓",
        "hypothesis": None if i % 11 == 0 else f"hypothesis {rng.random()}",
        "label": label,
        "rationale": None,
        "writer": f"w{i % 5}",
        "writer_annotator": None,
        "collected_by": None,
        "submitted_at": "2026-12-05T07:00:00+00:00",
        "model_name": "m",
        "model_hash": "sha256:00",
        "model_prediction": rng.choice(LABELS),
        "model_probabilities": probabilities,
        "model_signature": "sig",
        "model_fooled": True,
        "label_studio_project_id": 3,
        "label_studio_task_id": 1000 + i,
        "votes": [
            {
                "annotator": f"a{j}",
                "label": rng.choice([*LABELS, None]),
                "flagged": j == 2,
                "flag_reason": "unclear" if j == 2 else None,
                "annotation_id": 5000 + 3 * i + j,
                "created_at": "2026-12-05T07:01:00+00:00",
                "updated_at": "2026-12-05T07:01:00+00:00",
                "lead_time_s": None if j == 1 else rng.random() * 60,
                "counted": j != 0,
            }
            for j in range(i % 4)
        ],
        "validators_agreeing": i % 4,
        "item_agreement": rng.random(),
        "majority_label": label,
        "majority_share": 1.0,
        "decision_outcome": "accepted",
        "decision_reason": "majority",
        "rule_version": "v1",
        "decided_at": "2026-12-05T07:02:00+00:00",
        "override": None if i % 3 else {"outcome": "accepted", "reason": "ok", "by": "lead", "at": "t"},
    }
    assert tuple(row) == row_columns(FIELDS)
    return row


def _rows(count: int, seed: int = 5) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    rows = [_row(rng, i) for i in range(count)]
    return {"train_r1": rows[: count - 9], "dev_r1": rows[count - 9 :], "test_r1": []}


def _write(root: Path, splits: dict[str, list[dict[str, Any]]]) -> list[release_files.WrittenFile]:
    writer = ReleaseWriter(
        root, fields=FIELDS, labels=LABELS, split_rows={s: len(rows) for s, rows in splits.items()}
    )
    for i in range(max(len(rows) for rows in splits.values())):
        for split, rows in splits.items():  # the splits' rows interleaved, as a build adds them
            if i < len(rows):
                writer.add(split, canonical_line(rows[i]))
    return writer.close()


def _expected(rows: list[dict[str, Any]]) -> pa.Table:
    schema = release_features(FIELDS, LABELS).arrow_schema
    return pa.Table.from_pylist([{**r, "label": LABELS.index(r["label"])} for r in rows], schema=schema)


def test_shards_hold_the_rows_in_row_groups_whatever_the_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release_files, "SHARD_ROWS", 45)  # three row groups a shard, as in a release
    monkeypatch.setattr(release_files, "ROW_GROUP_ROWS", 15)
    splits = _rows(109)
    monkeypatch.setattr(background_writes, "CHUNK_BYTES", 700)  # about a row a chunk
    small = _write(tmp_path / "small", splits)
    monkeypatch.setattr(background_writes, "CHUNK_BYTES", 1 << 20)  # every row in one chunk
    large = _write(tmp_path / "large", splits)

    # The same bytes, whatever the chunks.
    assert [f.to_dict() for f in small] == [f.to_dict() for f in large]
    paths = {f.path: f for f in small}
    assert sorted(paths) == [
        "data/dev_r1-00000-of-00001.parquet",
        "data/test_r1-00000-of-00001.parquet",
        "data/train_r1-00000-of-00003.parquet",
        "data/train_r1-00001-of-00003.parquet",
        "data/train_r1-00002-of-00003.parquet",
        "jsonl/dev_r1.jsonl",
        "jsonl/test_r1.jsonl",
        "jsonl/train_r1.jsonl",
    ]
    for split, rows in splits.items():
        shards = sorted(p for p in paths if p.startswith(f"data/{split}-"))
        tables = [pq.read_table(tmp_path / "small" / p) for p in shards]
        assert [t.num_rows for t in tables] == [paths[p].rows for p in shards]
        whole = pa.concat_tables(tables)
        # The rows as they were given, typed as the features say, with the features' metadata.
        assert whole.equals(_expected(rows))
        assert whole.schema.metadata == _expected(rows).schema.metadata  # the features, for `datasets`
        for shard in shards:
            groups = [
                pq.ParquetFile(tmp_path / "small" / shard).metadata.row_group(g).num_rows
                for g in range(pq.ParquetFile(tmp_path / "small" / shard).metadata.num_row_groups)
            ]
            assert groups[:-1] == [15] * (len(groups) - 1)
            assert groups[-1] <= 15 if groups else not rows
        lines = (tmp_path / "small" / f"jsonl/{split}.jsonl").read_bytes().splitlines()
        assert lines == [canonical_line(r) for r in rows]
    assert [len(r) for r in splits.values()] == [100, 9, 0]
    assert paths["data/train_r1-00002-of-00003.parquet"].rows == 10


def test_a_row_longer_than_a_chunk_is_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_writes, "CHUNK_BYTES", 1024)
    rng = random.Random(2)
    rows = [_row(rng, 0), _row(rng, 1, text="word " * 200_000), _row(rng, 2)]
    _write(tmp_path / "r", {"train_r1": rows})
    table = pq.read_table(tmp_path / "r" / "data/train_r1-00000-of-00001.parquet")
    assert table.equals(_expected(rows))


def test_a_failure_in_the_parquet_thread_reaches_the_caller(tmp_path: Path) -> None:
    rng = random.Random(3)
    rows = [_row(rng, i) for i in range(5)]
    rows[3]["label"] = "maybe"
    writer = ReleaseWriter(tmp_path / "r", fields=FIELDS, labels=LABELS, split_rows={"train_r1": 5})
    for row in rows:
        writer.add("train_r1", canonical_line(row))
    with pytest.raises(ValueError, match="the label maybe, not one of the task's"):
        writer.close()
    writer.abort()  # after the failure, as a build does: nothing left open or running
    assert not writer.work.running


def test_a_writer_that_cannot_open_its_files_leaves_no_thread(tmp_path: Path) -> None:
    import threading

    before = {t for t in threading.enumerate() if t.name == "release-files"}
    with pytest.raises(FileNotFoundError):
        # A split whose JSONL file cannot be made (its folder does not exist), after one that can.
        ReleaseWriter(tmp_path / "r", fields=FIELDS, labels=LABELS, split_rows={"a_r1": 1, "z/z_r1": 1})
    assert {t for t in threading.enumerate() if t.name == "release-files" and t.is_alive()} <= before
