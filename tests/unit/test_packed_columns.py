"""A page of packed Parquet values read as Arrow columns at once equals each row unpacked alone."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from dynaval.adapters.db.dataset_arrow import DamagedRecords, unpacked_columns
from dynaval.service_layer.dataset_records.stored_record import (
    JSON_COLUMNS,
    PACKED_HEADER,
    SCALAR_COLUMNS,
    pack_columns,
    unpack_columns,
)

COUNT = len(SCALAR_COLUMNS) + len(JSON_COLUMNS)
ODD_TEXTS = [
    "",
    "a",
    "é",
    "日本語のテキスト",
    "tab\tnew\nline",
    "\x00nul",
    '"quoted" \\ back',
    "🙂" * 40,
    "x" * 5000,
]


def random_values(rng: random.Random) -> tuple[str | None, ...]:
    return tuple(
        None if rng.random() < 0.2 else rng.choice(ODD_TEXTS) + str(rng.random()) for _ in range(COUNT)
    )


def page(rows: list[bytes]) -> tuple[bytes, np.ndarray]:
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return b"".join(rows), offsets


def test_pack_and_unpack_are_inverse() -> None:
    rng = random.Random(1)
    for _ in range(200):
        values = random_values(rng)
        packed = pack_columns(values)
        assert unpack_columns(packed) == values
        assert PACKED_HEADER.unpack_from(packed) == tuple(
            -1 if v is None else len(v.encode()) for v in values
        )


@pytest.mark.parametrize("rows", [1, 7, 3000])
def test_a_page_unpacked_as_columns_equals_each_row_unpacked(rows: int) -> None:
    rng = random.Random(rows)
    values = [random_values(rng) for _ in range(rows)]
    values[0] = (None,) * COUNT  # a row of NULLs only
    data, offsets = page([pack_columns(v) for v in values])
    columns = unpacked_columns(data, offsets)
    assert [c.type for c in columns] == [pa.string()] * COUNT
    assert [tuple(c[i].as_py() for c in columns) for i in range(rows)] == values


def test_a_page_read_from_inside_a_larger_buffer_with_offsets_not_from_zero() -> None:
    """PostgreSQL's pages come as an Arrow binary array whose offsets need not start at 0."""
    rng = random.Random(3)
    values = [random_values(rng) for _ in range(50)]
    packed = [pack_columns(v) for v in values]
    array = pa.array([b"before", *packed], pa.binary()).slice(1)
    _validity, offsets_buffer, data = array.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[array.offset : array.offset + len(array) + 1].astype(
        np.int64
    )
    columns = unpacked_columns(data, offsets)
    assert [tuple(c[i].as_py() for c in columns) for i in range(50)] == values


@pytest.mark.parametrize(
    "damage", ["a byte short", "shorter than its header", "the last one cut", "a negative length"]
)
def test_a_damaged_packed_value_stops_the_page_with_what_to_do(damage: str) -> None:
    rng = random.Random(4)
    rows = [pack_columns(random_values(rng)) for _ in range(5)]
    if damage == "a byte short":
        rows[2] = rows[2][:-1]
    elif damage == "shorter than its header":
        rows[2] = rows[2][:10]
    elif damage == "the last one cut":
        rows[4] = rows[4][:3]
    else:  # -2 in the first length, the rest adding up
        header = list(PACKED_HEADER.unpack_from(rows[1]))
        header[0] = -2
        rows[1] = PACKED_HEADER.pack(*header) + rows[1][PACKED_HEADER.size :]
    data, offsets = page(rows)
    with pytest.raises(DamagedRecords, match="dynaval dataset rebuild"):
        unpacked_columns(data, offsets)
