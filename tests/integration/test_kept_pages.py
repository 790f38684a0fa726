"""The kept records read a page at a time, on SQLite and PostgreSQL: every record once, in submission
order (ties broken by id) across page boundaries, the lines as stored with their newlines, the
image inputs of the lines that have them at their place in the page, and the Parquet values as
columns with the round's holes filled."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from flask import Flask
from sqlalchemy import insert

from dynaval.adapters.db import dataset_arrow
from dynaval.adapters.db.dataset_arrow import KeptArrowReads
from dynaval.adapters.db.orm import DatasetRecordColumnsRow, DatasetRecordRow
from dynaval.service_layer.dataset_records.stored_record import (
    JSON_COLUMNS,
    POLICY_HOLE,
    PROJECT_HOLE,
    ROUND_HOLE,
    SCALAR_COLUMNS,
    RoundValues,
    pack_columns,
)
from dynaval.service_layer.services import Services
from tests.fixtures.service import EXPORTER_TOKEN
from tests.integration.test_kept_records import add_round
from tests.support.label_studio_copy import T0

VALUES = (*SCALAR_COLUMNS, *JSON_COLUMNS)


def seed_kept(services: Services, round_id: int, count: int) -> list[tuple[str, bytes, str | None, tuple]]:
    """``count`` kept records (a third of them with image inputs, five at a time sharing a submission time),
    written straight into the tables; returned in the order an export reads them."""
    rng = random.Random(round_id)
    rows = []
    for i in range(count):
        candidate_id = f"{rng.randrange(16**8):08x}-0000-4000-8000-{i:012d}"
        submitted_at = T0 + timedelta(seconds=i // 5)  # ties across the pages' boundaries
        record = b'{"decision":{"policy":' + POLICY_HOLE + b'},"n":%d,"round":' % i + ROUND_HOLE + b"}"
        images = f'{{"image":"sha256:{i:064x}"}}' if i % 3 == 1 else None
        values = tuple(
            None if (name == "rationale" and i % 2) else f"{name}-{i}-é"
            for name in SCALAR_COLUMNS
        ) + tuple(
            f'{{"project_id":{PROJECT_HOLE.decode()}}}' if name == "label_studio"
            else f'{{"policy":{POLICY_HOLE.decode()},"i":{i}}}' if name == "decision"
            else f'{{"{name}":{i}}}'
            for name in JSON_COLUMNS
        )  # fmt: skip
        rows.append((candidate_id, submitted_at, record, images, values))
    with services.database.engine.begin() as connection:
        connection.execute(
            insert(DatasetRecordRow.__table__),  # type: ignore[attr-defined]
            [
                {"candidate_id": c, "round_id": round_id, "submitted_at": t, "record": r,
                 "image_inputs": im, "stored_at": T0}
                for c, t, r, im, _v in rows
            ],
        )  # fmt: skip
        connection.execute(
            insert(DatasetRecordColumnsRow.__table__),  # type: ignore[attr-defined]
            [
                {"candidate_id": c, "round_id": round_id, "submitted_at": t, "columns": pack_columns(v)}
                for c, t, _r, _im, v in rows
            ],
        )
    rows.sort(key=lambda row: (row[1], row[0]))
    return [(c, r, im, v) for c, _t, r, im, v in rows]


@pytest.mark.parametrize("page_rows", [3, 5000])
def test_kept_pages_hand_over_every_record_in_order(
    services: Services, page_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dataset_arrow, "PAGE_ROWS", page_rows)
    monkeypatch.setattr(dataset_arrow, "COLUMN_PAGE_ROWS", page_rows)
    round_id, other_round = add_round(services), add_round(services)
    expected = seed_kept(services, round_id, 11)
    seed_kept(services, other_round, 4)
    reads = KeptArrowReads(services.database)

    pages = list(reads.kept_lines(round_id))
    assert [p.count for p in pages] == ([3, 3, 3, 2] if page_rows == 3 else [11])
    assert b"".join(p.lines for p in pages) == b"".join(r + b"\n" for _c, r, _im, _v in expected)
    images = [
        (start + i, v) for start, p in zip(range(0, 11, page_rows), pages, strict=False) for i, v in p.images
    ]
    assert images == [(i, im) for i, (_c, _r, im, _v) in enumerate(expected) if im]

    values = RoundValues.of(
        round_info={"id": round_id, "name": "r", "state": "open"}, policy={"min_votes": 3}, project_id=42
    )
    column_pages = list(reads.kept_columns(round_id, values))
    assert [p.count for p in column_pages] == [p.count for p in pages]
    got = [row for p in column_pages for row in p.batch.to_pylist()]
    assert [list(row) for row in got] == [[*SCALAR_COLUMNS, "round", *JSON_COLUMNS]] * 11
    for row, (_c, _r, _im, stored) in zip(got, expected, strict=True):
        want = dict(zip(VALUES, stored, strict=True))
        want["label_studio"] = '{"project_id":42}'
        want["decision"] = want["decision"].replace(POLICY_HOLE.decode(), '{"min_votes":3}')
        want["round"] = f'{{"id":{round_id},"name":"r","state":"open"}}'
        assert row == want


def test_an_empty_round_has_no_page(services: Services) -> None:
    round_id = add_round(services)
    reads = KeptArrowReads(services.database)
    values = RoundValues.of(round_info={"id": round_id}, policy={}, project_id=None)
    assert list(reads.kept_lines(round_id)) == [] and list(reads.kept_columns(round_id, values)) == []


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_download_cut_off_stops_its_reads(
    services: Services, app: Flask, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client gone after the first piece: closing the response stops the thread that reads the
    pages (and, on PostgreSQL, closes its connection) at once."""
    monkeypatch.setattr(dataset_arrow, "PAGE_ROWS", 2)
    monkeypatch.setattr(dataset_arrow, "COLUMN_PAGE_ROWS", 2)
    round_id = add_round(services)
    seed_kept(services, round_id, 11)
    response = app.test_client().get(
        f"/api/rounds/{round_id}/dataset?format={fmt}",
        headers={"Authorization": f"Bearer {EXPORTER_TOKEN}"},
        buffered=False,
    )
    assert response.status_code == 200
    assert next(iter(response.response))  # the first piece
    assert any(t.name == "dataset-read-ahead" for t in threading.enumerate())
    response.close()
    assert not any(t.name == "dataset-read-ahead" for t in threading.enumerate())
