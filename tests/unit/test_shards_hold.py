"""``release verify`` compares a split's Parquet files with its JSONL ids a batch of rows at a
time (no copy of a million ids): the answer is the whole comparison's, across batches and shards."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dynaval.adapters.files import release_files
from dynaval.adapters.files.release_files import ReleaseFolders
from dynaval.service_layer.releases.verification import _shards_hold, _Slice

IDS = [f"ex-{i:05d}" for i in range(2_500)]


def _shards(root: Path, parts: list[list[str]]) -> list[str]:
    names = []
    for number, ids in enumerate(parts):
        name = f"train_r1-{number:05d}-of-{len(parts):05d}.parquet"
        pq.write_table(pa.table({"example_id": ids, "text": ["t"] * len(ids)}), root / name)
        names.append(name)
    return names


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release_files, "PARQUET_BATCH_ROWS", 300)  # several batches a shard


@pytest.mark.parametrize(
    ("parts", "held"),
    [
        ([IDS[:1_000], IDS[1_000:]], True),
        ([IDS[:1_000], [*IDS[1_000:1_700], "ex-other", *IDS[1_701:]]], False),  # one id changed, mid-shard
        ([IDS[:1_000], IDS[1_001:]], False),  # one row missing
        ([IDS[:1_000], [*IDS[1_000:], "ex-extra"]], False),  # one row more
        ([IDS[1_000:], IDS[:1_000]], False),  # the shards' order
    ],
    ids=["the same", "one changed", "one missing", "one more", "shards swapped"],
)
def test_the_shards_hold_the_ids_in_order_or_not(tmp_path: Path, parts: list[list[str]], held: bool) -> None:
    shards = _shards(tmp_path, parts)
    findings: list[str] = []
    # The split's ids among the tally's (the rows of other splits before and after them).
    tally_ids = ["dev-1", "dev-2", *IDS, "test-1"]
    expected = _Slice(tally_ids, 2, 2 + len(IDS))
    assert _shards_hold(ReleaseFolders(), tmp_path, shards, "example_id", expected, findings) is held
    assert findings == []


def test_a_shard_that_is_not_parquet_is_named(tmp_path: Path) -> None:
    shards = _shards(tmp_path, [IDS[:1_000], IDS[1_000:]])
    (tmp_path / shards[1]).write_bytes(b"not parquet at all")
    findings: list[str] = []
    assert _shards_hold(ReleaseFolders(), tmp_path, shards, "example_id", _Slice(IDS), findings) is None
    assert findings == [f"rows: {shards[1]} cannot be read as Parquet (ArrowInvalid)"]
