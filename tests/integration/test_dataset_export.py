"""The round dataset, field by field, on SQLite and PostgreSQL.

A small round holds every case the provenance record has to get right: text that needs escaping
and non-ASCII text, context inputs, a collector's writer, re-annotations, cancelled and empty
annotations, flags, a lead's override, an unscored candidate with no votes, awkward floats,
timestamps in another zone and on a whole second, ties in the submission time, candidates that
are not accepted and one of another round. The expected records are written out here from what
was stored; the JSONL and Parquet files written by ``dynaval export``, and the HTTP downloads, must
hold exactly them (values and types), in submission order, however the pages fall.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flask import Flask
from sqlalchemy import null, update
from sqlmodel import col, select

from dynaval.adapters.db import dataset_query
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, RoundRow
from dynaval.domain.errors import Unavailable
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.dataset_records import round_dataset as dataset
from dynaval.service_layer.services import Services
from tests.fixtures.service import (
    EXPORTER_TOKEN,
    LEAD_TOKEN,
    PSEUDONYM_SECRET,
    cli_environment,
)
from tests.support.rows import candidate_row

PARQUET_COLUMNS = [
    "example_id", "task_type", "text", "writer_label", "rationale", "writer", "collected_by", "submitted_at",
    "round", "inputs", "model", "label_studio", "votes", "agreement", "decision",
]  # fmt: skip
NESTED = ("round", "inputs", "model", "label_studio", "votes", "agreement", "decision")
ROUND_NAME = "Export round ✓ «quoted»"
MODEL_HASH = "sha256:" + "ab" * 32
PROJECT_ID = 4242
PLUS_TWO = timezone(timedelta(hours=2))
T0 = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
AWKWARD_TEXT = 'Ünïcode ✓ "quoted" back\\slash\nnew line\ttab \x01 \x7f \u2028 😀 </script>'


def annotator(raw: str) -> str:
    return pseudonym(PSEUDONYM_SECRET, "annotator", raw)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


@dataclass
class Seeded:
    round_id: int
    other_round_id: int
    expected: list[dict[str, Any]]
    """The dataset's records, in submission order."""
    rejected_id: str
    rejected_record: dict[str, Any]


def stored_decision(figures: dict[str, Any], ballots: list[str]) -> dict[str, Any]:
    """A decision as the service stores it: the rule's figures with the ballots it counted."""
    return {
        "wanted_votes": 3,
        "votes_counted": len(ballots),
        "validators_label": None,
        "flags": 0,
        "excluded_annotators": [],
        **figures,
        "ballots": [{"annotator": a, "label": "positive", "flagged": False, "reason": None} for a in ballots],
    }


def seed(services: Services) -> Seeded:
    policy = DecisionPolicy(accept_share=0.7).to_dict()
    with services.database.unit_of_work() as session:
        main = RoundRow(
            name=ROUND_NAME,
            task_type="sentiment",
            model_dir="/models/export",
            model_name="sentiment-export",
            model_hash=MODEL_HASH,
            labels=["positive", "negative", "neutral"],
            policy=policy,
            label_studio_project_id=PROJECT_ID,
        )
        other = RoundRow(
            name="other round",
            task_type="sentiment",
            model_dir="/models/other",
            model_name="other",
            model_hash="sha256:0",
            labels=["positive", "negative", "neutral"],
            policy=policy,
        )
        session.add(main)
        session.add(other)
        session.commit()
        assert main.id is not None and other.id is not None
        rid, other_id = main.id, other.id

    round_info = {"id": rid, "name": ROUND_NAME, "state": "open"}
    candidates: list[CandidateRow] = []
    annotations: list[AnnotationRow] = []
    expected: dict[str, dict[str, Any]] = {}

    def add_candidate(**values: Any) -> CandidateRow:
        row = candidate_row(round_id=values.pop("round_id", rid), **values)
        candidates.append(row)
        return row

    def add_annotation(candidate_id: str, annotation_id: int, raw: str, **values: Any) -> AnnotationRow:
        at = values.pop("at", T0 + timedelta(minutes=5))
        row = AnnotationRow(
            id=annotation_id,
            candidate_id=candidate_id,
            round_id=rid,
            annotator_id=raw,
            created_at=values.pop("created_at", at),
            updated_at=at,
            **values,
        )
        annotations.append(row)
        return row

    def vote(row: AnnotationRow) -> dict[str, Any]:
        return {
            "annotator": annotator(row.annotator_id),
            "label": row.label,
            "flagged": row.flagged,
            "flag_reason": row.flag_reason,
            "annotation_id": row.id,
            "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at),
            "lead_time_s": row.lead_time_s,
        }

    def record(row: CandidateRow, votes: list[dict[str, Any]], **parts: Any) -> dict[str, Any]:
        decision = row.decision or {}
        return {
            "example_id": row.id,
            "round": round_info,
            "task_type": "sentiment",
            "inputs": row.inputs,
            "writer_label": row.writer_label,
            "rationale": row.rationale,
            "writer": writer_pseudonym(PSEUDONYM_SECRET, row.writer_id, row.collected_by),
            "collected_by": row.collected_by,
            "submitted_at": iso(row.submitted_at),
            "model": {
                "name": "sentiment-export",
                "hash": MODEL_HASH,
                "prediction": row.model_prediction,
                "probabilities": row.model_probabilities,
                "signature": row.model_signature,
                "fooled": row.fooled,
            },
            "label_studio": {"project_id": PROJECT_ID, "task_id": row.label_studio_task_id},
            "votes": votes,
            "agreement": {
                "item_agreement": decision.get("item_agreement"),
                "majority_label": decision.get("majority_label"),
                "majority_share": decision.get("majority_share"),
                "writer_label_share": decision.get("writer_label_share"),
                "label_counts": decision.get("label_counts"),
            },
            "decision": {
                "outcome": decision.get("outcome"),
                "reason": decision.get("reason"),
                "rule_version": decision.get("rule_version"),
                "policy": policy,
                "decided_at": iso(row.decided_at) if row.decided_at else None,
                "override": parts.get("override"),
            },
        }

    unanimous = {
        "outcome": "accepted",
        "reason": "all 3 votes for the writer's label",
        "rule_version": "dynaval-majority/1",
        "label_counts": {"positive": 3},
        "majority_label": "positive",
        "majority_share": 1.0,
        "writer_label_share": 1.0,
        "item_agreement": 1.0,
    }

    # Plain: three annotators whose raw ids sort as text ("12" < "3" < "7").
    plain = add_candidate(
        id="c-0001-plain",
        inputs={"text": "plain text"},
        writer_label="positive",
        writer_id="writer-ana",
        submitted_by="writer-ana",
        model_prediction="negative",
        model_probabilities={"positive": 0.1, "negative": 0.7, "neutral": 0.2},
        model_signature="f" * 64,
        submitted_at=T0,
        label_studio_task_id=9001,
        decision=stored_decision(unanimous, ["7", "12", "3"]),
        decided_at=T0 + timedelta(minutes=6),
    )
    plain_votes = [
        add_annotation(plain.id, 103, "7", label="positive", lead_time_s=12.5),
        add_annotation(plain.id, 101, "12", label="positive", lead_time_s=3.25),
        add_annotation(plain.id, 102, "3", label="positive", lead_time_s=40.0),
    ]
    expected[plain.id] = record(plain, [vote(plain_votes[1]), vote(plain_votes[2]), vote(plain_votes[0])])

    # Submitted at the same instant as the plain one, with an id that sorts first; a collector's
    # writer; text that needs escaping; a context field; times given in another zone.
    awkward = add_candidate(
        id="c-0000-awkward",
        inputs={"text": AWKWARD_TEXT, "context": "Kontext: «ja»"},
        writer_label="positive",
        rationale='The model misses the irony: «nicht» and "quotes"\nover two lines.',
        writer_id="ana",
        submitted_by="collector-form",
        collected_by="collector-form",
        model_prediction="neutral",
        model_probabilities={"neutral": 0.5, "positive": 0.25, "negative": 0.25},
        model_signature="e" * 64,
        submitted_at=T0.astimezone(PLUS_TWO),
        label_studio_task_id=9002,
        decision=stored_decision(unanimous, ["1", "2"]),
        decided_at=datetime(2026, 3, 1, 12, 0, 0, tzinfo=PLUS_TWO),
    )
    awkward_votes = [
        add_annotation(
            awkward.id,
            201,
            "1",
            label="positive",
            lead_time_s=None,
            at=datetime(2026, 3, 1, 11, 0, 0, 500, tzinfo=PLUS_TWO),
        ),
        add_annotation(awkward.id, 202, "2", label="positive", lead_time_s=1e-07),
    ]
    expected[awkward.id] = record(awkward, [vote(v) for v in awkward_votes])

    # Re-annotations, a cancelled and an empty annotation, a flag with its reason, and two
    # annotations of one annotator updated at the same instant (the higher id counts).
    revised = add_candidate(
        id="c-0002-revised",
        inputs={"text": "revised"},
        writer_label="negative",
        writer_id="writer-bo",
        submitted_by="writer-bo",
        model_prediction="positive",
        model_probabilities={"positive": 0.9, "negative": 0.05, "neutral": 0.05},
        model_signature="d" * 64,
        submitted_at=T0 + timedelta(seconds=1),
        label_studio_task_id=9003,
        decision=stored_decision(
            {
                "outcome": "accepted",
                "reason": "2 of 3 votes for the writer's label",
                "rule_version": "dynaval-majority/1",
                "label_counts": {"positive": 1, "negative": 2},
                "majority_label": "negative",
                "majority_share": 2 / 3,
                "writer_label_share": 2 / 3,
                "item_agreement": 1 / 3,
            },
            ["5", "9", "10"],
        ),
        decided_at=T0 + timedelta(minutes=9),
    )
    early = T0 + timedelta(minutes=1)
    late = T0 + timedelta(minutes=2)
    add_annotation(revised.id, 301, "5", label="positive", lead_time_s=2.0, at=early)
    later = add_annotation(
        revised.id, 302, "5", label="negative", lead_time_s=12.0, at=late, created_at=early
    )
    add_annotation(revised.id, 303, "6", label="negative", was_cancelled=True, at=late)
    add_annotation(revised.id, 304, "8", label=None, at=late)
    flagged = add_annotation(
        revised.id, 305, "9", label=None, flagged=True, flag_reason='offensive ✗ "x"', lead_time_s=7.75
    )
    add_annotation(revised.id, 311, "10", label="positive", lead_time_s=1.5, at=late)
    tied = add_annotation(revised.id, 312, "10", label="negative", lead_time_s=2.5, at=late)
    expected[revised.id] = record(revised, [vote(tied), vote(later), vote(flagged)])

    # A lead's override: the rule had rejected it; the override is recorded beside the rule's outcome.
    overridden = add_candidate(
        id="c-0003-override",
        inputs={"text": "overridden"},
        writer_label="positive",
        writer_id="writer-ana",
        model_prediction="negative",
        model_probabilities={"positive": 0.2, "negative": 0.8},
        model_signature="c" * 64,
        submitted_at=T0 + timedelta(seconds=2),
        label_studio_task_id=9004,
        decision=stored_decision(
            {
                "outcome": "rejected",
                "reason": "only 1 of 3 votes for the writer's label",
                "rule_version": "dynaval-majority/1",
                "label_counts": {"negative": 2, "positive": 1},
                "majority_label": "negative",
                "majority_share": 2 / 3,
                "writer_label_share": 1 / 3,
                "item_agreement": 1 / 3,
                "validators_label": "negative",
            },
            ["1"],
        ),
        decided_at=T0 + timedelta(minutes=7),
        override_outcome="accepted",
        override_reason="the validators misread it ✓",
        override_by="lead-maria",
        override_at=datetime(2026, 3, 2, 8, 0, 0, tzinfo=UTC),
    )
    override_votes = [add_annotation(overridden.id, 401, "1", label="negative", lead_time_s=5.0)]
    expected[overridden.id] = record(
        overridden,
        [vote(v) for v in override_votes],
        override={
            "outcome": "accepted",
            "reason": "the validators misread it ✓",
            "by": "lead-maria",
            "at": "2026-03-02T08:00:00+00:00",
        },
    )

    # Accepted by a lead before it was ever scored or pushed: no model answer, no task, no votes.
    unscored = add_candidate(
        id="c-0004-unscored",
        inputs={"text": "never scored"},
        writer_label="neutral",
        writer_id="writer-bo",
        submitted_at=T0 + timedelta(seconds=3),
        decision=None,
        override_outcome="accepted",
        override_reason="kept",
        override_by="lead-maria",
        override_at=T0 + timedelta(hours=1, microseconds=1),
    )
    expected[unscored.id] = record(
        unscored,
        [],
        override={
            "outcome": "accepted",
            "reason": "kept",
            "by": "lead-maria",
            "at": iso(T0 + timedelta(hours=1, microseconds=1)),
        },
    )

    # The same with a decision stored as JSON null (SQL NULL above).
    json_null = add_candidate(
        id="c-0004-unscored-json-null",
        inputs={"text": "never scored either"},
        writer_label="neutral",
        writer_id="writer-bo",
        submitted_at=T0 + timedelta(seconds=3),
        decision=None,
        override_outcome="accepted",
        override_reason="kept too",
        override_by="lead-maria",
        override_at=T0 + timedelta(hours=1),
    )
    expected[json_null.id] = record(
        json_null,
        [],
        override={
            "outcome": "accepted",
            "reason": "kept too",
            "by": "lead-maria",
            "at": iso(T0 + timedelta(hours=1)),
        },
    )

    # Floats that print differently from their shortest form in some encoders; submitted before
    # the others although stored after them.
    floats = add_candidate(
        id="c-0005-floats",
        inputs={"text": "floats"},
        writer_label="positive",
        writer_id="writer-ana",
        model_prediction="negative",
        model_probabilities={"z": 1e-05, "y": 0.1 + 0.2, "x": 2 / 3, "w": 1e16, "v": 0.0, "u": 123456789.125},
        model_signature="b" * 64,
        submitted_at=T0 - timedelta(days=1),
        label_studio_task_id=9006,
        decision=stored_decision(
            {**unanimous, "item_agreement": 0.30000000000000004, "label_counts": {"positive": 3, "a": 0}},
            ["3"],
        ),
        decided_at=T0 - timedelta(hours=20),
    )
    float_votes = [add_annotation(floats.id, 601, "3", label="positive", lead_time_s=1e-05)]
    expected[floats.id] = record(floats, [vote(v) for v in float_votes])

    # Not in the dataset: rejected, still in validation, and accepted in another round.
    rejected = add_candidate(
        id="c-0006-rejected",
        inputs={"text": "rejected"},
        writer_label="positive",
        writer_id="writer-ana",
        status="rejected",
        model_prediction="negative",
        model_probabilities={"positive": 0.4, "negative": 0.6},
        model_signature="a" * 64,
        submitted_at=T0 + timedelta(seconds=4),
        label_studio_task_id=9007,
        decision=stored_decision({**unanimous, "outcome": "rejected", "reason": "no"}, ["4"]),
        decided_at=T0 + timedelta(minutes=8),
    )
    rejected_votes = [add_annotation(rejected.id, 701, "4", label="negative", lead_time_s=4.0)]
    rejected_record = record(rejected, [vote(v) for v in rejected_votes])
    add_candidate(
        id="c-0007-waiting",
        inputs={"text": "waiting"},
        writer_label="positive",
        writer_id="writer-ana",
        status="in_validation",
        submitted_at=T0 + timedelta(seconds=5),
        label_studio_task_id=9008,
    )
    add_candidate(
        id="c-0008-elsewhere",
        round_id=other_id,
        inputs={"text": "another round"},
        writer_label="positive",
        writer_id="writer-ana",
        submitted_at=T0 + timedelta(seconds=6),
        label_studio_task_id=9009,
    )

    with services.database.unit_of_work() as session:
        session.add_all(candidates)
        session.flush()
        session.add_all(annotations)
        session.commit()
    # A decision that is SQL NULL rather than JSON null reads the same.
    with services.database.unit_of_work() as session:
        unscored_row = col(CandidateRow.id) == unscored.id
        session.execute(update(CandidateRow).where(unscored_row).values(decision=null()))
        session.commit()
        sql_null = select(col(CandidateRow.id), col(CandidateRow.decision).is_(None)).where(
            col(CandidateRow.id).in_([unscored.id, json_null.id])
        )
        assert dict(session.execute(sql_null).tuples().all()) == {unscored.id: True, json_null.id: False}

    order = [floats, awkward, plain, revised, overridden, unscored, json_null]
    return Seeded(
        round_id=rid,
        other_round_id=other_id,
        expected=[expected[c.id] for c in order],
        rejected_id=rejected.id,
        rejected_record=rejected_record,
    )


def same(got: Any, want: Any, where: str = "record") -> None:
    """Equal values of equal JSON types (``1``, ``1.0`` and ``True`` differ), dict keys included."""
    assert type(got) is type(want), f"{where}: {got!r} is not {want!r}"
    if isinstance(want, dict):
        assert list(sorted(got)) == list(sorted(want)), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: {len(got)} items, not {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == want or (math.isnan(got) and math.isnan(want)), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def check_jsonl(data: bytes, expected: list[dict[str, Any]]) -> None:
    text = data.decode("utf-8")
    assert text.endswith("\n") or not expected
    # One record per line, split at "\n" only (text may hold U+2028, which splitlines() splits at).
    lines = text.split("\n")[:-1] if text else []
    assert len(lines) == len(expected)
    for i, (line, want) in enumerate(zip(lines, expected, strict=True)):
        assert line.startswith("{") and line.endswith("}")
        same(json.loads(line), want, f"line {i + 1}")
    # Non-ASCII text is written as itself (UTF-8), not as \u escapes.
    if expected:
        assert "Ünïcode ✓" in text and ROUND_NAME in text


def check_parquet(data: bytes, expected: list[dict[str, Any]]) -> None:
    table = pq.read_table(io.BytesIO(data))
    assert table.schema.names == PARQUET_COLUMNS
    assert all(field.type == pa.string() for field in table.schema)
    rows = table.to_pylist()
    assert len(rows) == len(expected)
    for i, (row, want) in enumerate(zip(rows, expected, strict=True)):
        for column in PARQUET_COLUMNS:
            if column in NESTED:
                assert isinstance(row[column], str)
                same(json.loads(row[column]), want[column], f"row {i}.{column}")
            elif column == "text":
                same(row[column], want["inputs"].get("text"), f"row {i}.text")
            else:
                same(row[column], want[column], f"row {i}.{column}")


@pytest.fixture
def seeded(services: Services) -> Seeded:
    return seed(services)


@pytest.fixture(params=[2, None], ids=["pages-of-2", "default-pages"])
def page_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int | None]:
    """Small pages put page boundaries between tied submission times and inside the round."""
    if request.param is not None:
        monkeypatch.setattr(dataset_query, "PAGE_SIZE", request.param)
    yield request.param


def test_the_records_are_the_expected_provenance(seeded: Seeded, services: Services, page_size: Any) -> None:
    records = list(dataset.iter_round_dataset(services, seeded.round_id))
    same(records, seeded.expected, "dataset")
    assert dataset.count_accepted(services, seeded.round_id) == len(seeded.expected)


def test_a_candidate_outside_the_dataset_has_the_same_record(seeded: Seeded, services: Services) -> None:
    same(dataset.provenance_record(services, seeded.rejected_id), seeded.rejected_record, "rejected")
    for want in seeded.expected:
        same(dataset.provenance_record(services, want["example_id"]), want, want["example_id"])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_export_command_writes_the_expected_records(
    seeded: Seeded,
    services: Services,
    page_size: Any,
    fmt: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_environment(services, monkeypatch)
    out = tmp_path / f"round.{fmt}"
    assert cli.main(["export", "--round", str(seeded.round_id), "--format", fmt, "--out", str(out)]) == 0
    assert f"wrote {len(seeded.expected)} accepted examples to {out}" in capsys.readouterr().out
    assert not out.with_name(out.name + ".partial").exists()
    (check_jsonl if fmt == "jsonl" else check_parquet)(out.read_bytes(), seeded.expected)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_download_holds_the_expected_records(
    seeded: Seeded, app: Flask, page_size: Any, fmt: str
) -> None:
    client = app.test_client()
    headers = {"Authorization": f"Bearer {EXPORTER_TOKEN}"}
    for path in (
        f"/api/rounds/{seeded.round_id}/dataset?format={fmt}",
        f"/dashboard/rounds/{seeded.round_id}/export/dataset.{fmt}",
    ):
        if path.startswith("/dashboard"):
            headers = {"Authorization": f"Bearer {LEAD_TOKEN}"}
        response = client.get(path, headers=headers)
        assert response.status_code == 200, response.get_data()[:300]
        disposition = response.headers["Content-Disposition"]
        assert disposition.startswith("attachment") and f"round-{seeded.round_id}.{fmt}" in disposition
        if fmt == "jsonl":
            assert response.mimetype == "application/x-ndjson"
            check_jsonl(response.get_data(), seeded.expected)
        else:
            assert response.mimetype == "application/vnd.apache.parquet"
            check_parquet(response.get_data(), seeded.expected)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_empty_round_exports_no_record(
    seeded: Seeded, services: Services, app: Flask, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with services.database.unit_of_work() as session:
        other_round = col(CandidateRow.round_id) == seeded.other_round_id
        session.execute(update(CandidateRow).where(other_round).values(status="rejected"))
        session.commit()
    cli_environment(services, monkeypatch)
    out = tmp_path / f"empty.{fmt}"
    command = ["export", "--round", str(seeded.other_round_id), "--format", fmt, "--out", str(out)]
    assert cli.main(command) == 0
    response = app.test_client().get(
        f"/api/rounds/{seeded.other_round_id}/dataset?format={fmt}",
        headers={"Authorization": f"Bearer {EXPORTER_TOKEN}"},
    )
    assert response.status_code == 200
    for data in (out.read_bytes(), response.get_data()):
        if fmt == "jsonl":
            assert data == b""
        else:
            table = pq.read_table(io.BytesIO(data))
            assert table.num_rows == 0 and table.schema.names == PARQUET_COLUMNS


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_export_with_nothing_to_catch_up_takes_no_write_lock(seeded: Seeded, services: Services) -> None:
    """Once a round's records are written, its export only reads: another process may hold
    SQLite's write lock (a worker applying votes) meanwhile, and the export neither waits for it nor
    fails; a round with marks left does wait, and then writes them."""
    import sqlite3

    from sqlalchemy.engine import make_url

    from dynaval.adapters.db import database as database_module

    same(list(dataset.iter_round_dataset(services, seeded.round_id)), seeded.expected, "first export")
    path = str(make_url(services.database.url).database)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        same(list(dataset.iter_round_dataset(services, seeded.round_id)), seeded.expected, "while locked")
        # A mark left (a write outside the service): the export must write it, so it waits for
        # the lock, and here gives up (the limit made short), leaving the mark for the next one.
        other.execute(
            "UPDATE candidate SET rationale = rationale WHERE id = ?", (seeded.expected[0]["example_id"],)
        )
        other.commit()
        other.execute("BEGIN IMMEDIATE")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(database_module, "SQLITE_WRITER_WAIT_S", 0.2)
            with pytest.raises(Unavailable, match="stayed busy"):
                list(dataset.iter_round_dataset(services, seeded.round_id))
    finally:
        other.rollback()
        other.close()
    same(list(dataset.iter_round_dataset(services, seeded.round_id)), seeded.expected, "after")
