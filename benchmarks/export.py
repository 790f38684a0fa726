"""Exporting a large round dataset: rows per second and peak memory, JSONL and Parquet, CLI and HTTP.

One round of ``--rows`` accepted candidates (1,000,000 by default) is seeded in bulk, with the
provenance the service stores: text (some of it non-ASCII), the model's prediction, probabilities
and signature, three votes each from a pool of pseudonymous annotators (some candidates with a
superseded or cancelled annotation besides), a collector's writers beside writers with tokens, a
few lead overrides, and the decision JSON as the rule stores it. About one candidate in twenty of
the round is not accepted, so the export has to skip them. SQLite by default (core ``executemany``),
PostgreSQL with ``--database-url`` (``COPY``).

The seed writes candidates and votes straight into the tables, as a restore would, so the kept
records are then written by ``dynaval dataset rebuild`` (timed: the service otherwise writes each
record as its decision is made). Then the real export path runs in a subprocess of its own, so that
its peak RSS (``ru_maxrss`` of that child, from ``os.wait4``) is the export's alone: ``dynaval
export`` (the CLI's ``main``), once per format and ``--repeats`` times. rows/s counts from the
command's start (settings, database, migration check, count, export) to its end, without the
interpreter's start and imports, which are printed beside it. The HTTP download (``GET
/api/rounds/<id>/dataset?format=...``) is timed through the app on a local werkzeug server in a
subprocess of its own, read by this process over a socket. Every file and download is checked for
its number of records. The floors, measured in the same run, are the plain driver handing over
what an export reads (the kept lines for JSONL, the packed Parquet values for Parquet: ``sqlite3``
on SQLite, ADBC's ``COPY`` on PostgreSQL), the disk taking the JSONL file's bytes, and on SQLite,
for comparison, the candidates and votes the export built its records from before they were kept.

    .venv/bin/python benchmarks/export.py                    # 1,000,000 rows, SQLite
    .venv/bin/python benchmarks/export.py --rows 100000      # a quick run
    .venv/bin/python benchmarks/export.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    .venv/bin/python benchmarks/export.py --data-dir DIR          # keep the seeded SQLite
    .venv/bin/python benchmarks/export.py --data-dir DIR --reuse  # and export it again
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert, text

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, RoundRow
from dynaval.domain.validation.decision import Ballot, decide
from dynaval.domain.validation.policy import DecisionPolicy

GOAL_ROWS_PER_S = 200_000
GOAL_PEAK_RSS_MB = 300
LABELS = ["positive", "negative", "neutral"]
LEAD_TOKEN = "benchmark-lead-token-0123456789"
EXPORTER_TOKEN = "benchmark-exporter-token-012345"
CHUNK = 20_000
WORDS = (
    "the",
    "movie",
    "plot",
    "actor",
    "service",
    "food",
    "room",
    "staff",
    "price",
    "phone",
    "battery",
    "screen",
    "was",
    "not",
    "bad",
    "at",
    "all",
    "really",
    "quite",
    "good",
    "though",
    "ending",
    "dragged",
    "little",
    "too",
    "long",
    "for",
    "my",
    "taste",
    "but",
    "would",
    "watch",
    "again",
    "never",
    "expected",
    "such",
    "great",
    "value",
    "honestly",
    "terrible",
    "support",
    "slow",
    "delivery",
    "broken",
    "box",
)
ACCENTED = ["café", "naïve", "déjà vu", "Grüße", "señor", "😀", "✓", "«très bien»", "日本語"]
MARKER = "seeded.json"

CHILD_EXPORT = """
import json, os, sys, time
started = time.perf_counter()
from dynaval.entrypoints.cli.main import main
imported = time.perf_counter()
code = main(sys.argv[1:])
done = time.perf_counter()
with open(os.environ["BENCH_RESULT"], "w") as handle:
    json.dump({"code": code, "import_s": imported - started, "run_s": done - imported}, handle)
"""

CHILD_SERVER = """
import resource, sys
from werkzeug.serving import make_server
from dynaval.entrypoints.app import create_app, prepare_long_running_process, shutdown
app = create_app(start_background=False)
prepare_long_running_process(app)  # as each gunicorn worker does (service/gunicorn.conf.py)
server = make_server("127.0.0.1", 0, app, threaded=False)
idle_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(server.server_port, idle_mb, flush=True)
for _ in range(int(sys.argv[1])):
    server.handle_request()
shutdown(app)
"""


@dataclass
class Run:
    seconds: float
    import_s: float
    cpu_s: float
    peak_rss_mb: float
    size_bytes: int


def environment(url: str, data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DYNAVAL_DATABASE_URL": url,
        "DYNAVAL_DATA_DIR": str(data_dir),
        "DYNAVAL_PSEUDONYM_SECRET": "benchmark-pseudonym-secret-01234",
        "DYNAVAL_SIGNING_SECRET": "benchmark-signing-secret-0123456",
        "DYNAVAL_WEBHOOK_SECRET": "benchmark-webhook-secret-0123456",
        "DYNAVAL_WRITER_TOKENS": "bench-writer=benchmark-writer-token-0123456789",
        "DYNAVAL_LEAD_TOKENS": f"bench={LEAD_TOKEN}",
        "DYNAVAL_EXPORTER_TOKENS": EXPORTER_TOKEN,
        "DYNAVAL_LABEL_STUDIO_URL": "http://127.0.0.1:9",
        "DYNAVAL_EMBEDDED_WORKER": "false",
        "DYNAVAL_RECONCILE_INTERVAL_S": "0",
        "DYNAVAL_RATE_LIMIT": "",
        "DYNAVAL_ANONYMOUS_RATE_LIMIT": "",
    }


# ------------------------------------------------------------------------------------- seeding


def _softmax(rng: random.Random) -> dict[str, float]:
    logits = [rng.gauss(0, 2) for _ in LABELS]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    total = sum(weights)
    return {label: w / total for label, w in zip(LABELS, weights, strict=True)}


def _text(rng: random.Random, i: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randrange(10, 40))]
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), rng.choice(ACCENTED))
    return " ".join(words).capitalize() + f". (#{i})"


def generate(
    round_id: int, rows: int, rng: random.Random, start: datetime
) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Chunks of (candidate rows, annotation rows) as the service stores them."""
    policy = DecisionPolicy()
    annotators = [str(rng.randrange(1, 10**6)) for _ in range(60)]
    writers = [f"writer-{i:04d}" for i in range(300)]
    decisions: dict[tuple[str, tuple[str | None, ...], tuple[bool, ...]], dict[str, Any]] = {}
    others = rows // 19  # about one candidate in twenty is not accepted
    total = rows + others
    annotation_id = 1
    kept = 0
    for first in range(0, total, CHUNK):
        candidates: list[dict[str, Any]] = []
        annotations: list[dict[str, Any]] = []
        for i in range(first, min(first + CHUNK, total)):
            accepted = kept < rows and (i % 20 != 19 or i - kept >= others)
            kept += accepted
            cid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            writer_label = rng.choice(LABELS)
            probabilities = _softmax(rng)
            prediction = max(probabilities, key=probabilities.__getitem__)
            submitted = start + timedelta(seconds=i * 0.7, microseconds=rng.randrange(10**6))
            voters = rng.sample(annotators, 3)
            if accepted:
                labels: list[str | None] = [writer_label] * 3
                if rng.random() < 0.1:
                    labels[rng.randrange(3)] = rng.choice([x for x in LABELS if x != writer_label])
            else:
                labels = [rng.choice([x for x in LABELS if x != writer_label]) for _ in range(3)]
            flags = [rng.random() < 0.01 for _ in range(3)]
            key = (writer_label, tuple(labels), tuple(flags))
            figures = decisions.get(key)
            if figures is None:
                ballots = [
                    Ballot(f"a{n}", label, flag)
                    for n, (label, flag) in enumerate(zip(labels, flags, strict=True))
                ]
                figures = decisions[key] = decide(ballots, writer_label, policy).to_dict()
            status = figures["outcome"] if not accepted or figures["outcome"] == "accepted" else "accepted"
            overridden = accepted and figures["outcome"] != "accepted"
            at = submitted + timedelta(minutes=3)
            for n, (annotator, label, flag) in enumerate(zip(voters, labels, flags, strict=True)):
                vote_at = at + timedelta(seconds=n * 41, microseconds=rng.randrange(10**6))
                if rng.random() < 0.02:  # a superseded annotation by the same annotator
                    annotations.append(
                        _annotation(
                            annotation_id, cid, round_id, annotator, rng.choice(LABELS), False, vote_at
                        )
                    )
                    annotation_id += 1
                    vote_at += timedelta(seconds=30)
                if rng.random() < 0.01:  # a skipped task
                    annotations.append(
                        _annotation(annotation_id, cid, round_id, "9" + annotator, None, False, vote_at, True)
                    )
                    annotation_id += 1
                annotations.append(
                    _annotation(annotation_id, cid, round_id, annotator, label, flag, vote_at, lead=rng)
                )
                annotation_id += 1
            collector = "collector-form" if rng.random() < 0.1 else None
            writer = f"ana-{rng.randrange(1000)}" if collector else rng.choice(writers)
            candidates.append(
                {
                    "id": cid,
                    "round_id": round_id,
                    "inputs": {"text": _text(rng, i)},
                    "writer_label": writer_label,
                    "writer_id": writer,
                    "submitted_by": collector or writer,
                    "collected_by": collector,
                    "status": status,
                    "model_prediction": prediction,
                    "model_probabilities": probabilities,
                    "model_signature": hashlib.sha256(cid.encode()).hexdigest(),
                    "fooled": prediction != writer_label,
                    "submitted_at": submitted,
                    "scored_at": submitted,
                    "pushed_at": submitted + timedelta(seconds=2),
                    "label_studio_task_id": 10**6 + i,
                    "wanted_votes": figures["wanted_votes"],
                    "label_studio_overlap": 3,
                    "decision": {
                        **figures,
                        "ballots": [
                            {"annotator": a, "label": label, "flagged": flag, "reason": None}
                            for a, label, flag in sorted(zip(voters, labels, flags, strict=True))
                        ],
                    },
                    "decided_at": at + timedelta(minutes=2),
                    "version": 3,
                    "override_outcome": "accepted" if overridden else None,
                    "override_reason": "the validators misread the sarcasm" if overridden else None,
                    "override_by": "bench" if overridden else None,
                    "override_at": at + timedelta(hours=1) if overridden else None,
                }
            )
        yield candidates, annotations


def _annotation(
    annotation_id: int,
    candidate_id: str,
    round_id: int,
    annotator: str,
    label: str | None,
    flagged: bool,
    at: datetime,
    cancelled: bool = False,
    lead: random.Random | None = None,
) -> dict[str, Any]:
    return {
        "id": annotation_id,
        "candidate_id": candidate_id,
        "round_id": round_id,
        "annotator_id": annotator,
        "label": label,
        "flagged": flagged,
        "flag_reason": "looks like spam" if flagged else None,
        "was_cancelled": cancelled,
        "lead_time_s": round(lead.uniform(2, 90), 3) if lead else None,
        "created_at": at - timedelta(seconds=20),
        "updated_at": at,
        "received_at": at + timedelta(seconds=1),
        "source": "verification",
    }


def seed(database: Database, rows: int) -> tuple[int, int, int]:
    """A round with ``rows`` accepted candidates; returns (round id, candidates, annotations)."""
    rng = random.Random(2026)
    with database.unit_of_work() as session:
        row = RoundRow(
            name="Benchmark round «export»",
            task_type="sentiment",
            state="closed",
            model_dir="/nonexistent/benchmark-model",
            model_name="sentiment-default",
            model_hash="sha256:" + hashlib.sha256(b"benchmark model").hexdigest(),
            labels=LABELS,
            policy=DecisionPolicy().to_dict(),
            label_studio_project_id=31337,
        )
        session.add(row)
        session.commit()
        assert row.id is not None
        round_id = row.id
    with database.engine.connect() as connection:  # ids must be new when the database holds rounds
        highest = connection.execute(text("SELECT max(id) FROM annotation")).scalar() or 0
        task = connection.execute(text("SELECT max(label_studio_task_id) FROM candidate")).scalar() or 0
    offset_ids = int(highest)
    offset_tasks = int(task)
    counts = [0, 0]
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    for candidate_rows, annotation_rows in generate(round_id, rows, rng, start):
        for a in annotation_rows:
            a["id"] += offset_ids
        for c in candidate_rows:
            c["label_studio_task_id"] += offset_tasks
        if database.is_sqlite:
            with database.transaction() as connection:
                connection.execute(insert(CandidateRow), candidate_rows)
                connection.execute(insert(AnnotationRow), annotation_rows)
        else:
            _copy(database, "candidate", candidate_rows)
            _copy(database, "annotation", annotation_rows)
        counts[0] += len(candidate_rows)
        counts[1] += len(annotation_rows)
        print(f"\r  seeded {counts[0]:,} candidates", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    if not database.is_sqlite:
        with database.engine.connect() as connection:
            connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            connection.exec_driver_sql("ANALYZE candidate")
            connection.exec_driver_sql("ANALYZE annotation")
    return round_id, counts[0], counts[1]


_JSON_COLUMNS = {"inputs", "model_probabilities", "decision"}


def _copy(database: Database, table: str, rows: list[dict[str, Any]]) -> None:
    """PostgreSQL's bulk load; JSON columns as the text the service's JSON type would store."""
    columns = list(rows[0])
    raw = database.engine.raw_connection()
    try:
        statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        with raw.cursor() as cursor, cursor.copy(statement) as copy:  # type: ignore[attr-defined]
            for row in rows:
                copy.write_row(
                    [
                        json.dumps(row[c]) if c in _JSON_COLUMNS and row[c] is not None else row[c]
                        for c in columns
                    ]
                )
        raw.commit()
    finally:
        raw.close()


# ----------------------------------------------------------------------------------- measuring


def run_export(env: dict[str, str], round_id: int, fmt: str, out: Path) -> Run:
    command = ["export", "--round", str(round_id), "--format", fmt, "--out", str(out)]
    return run_command(env, command, out.with_suffix(".result.json"), out)


def run_rebuild(env: dict[str, str], round_id: int, folder: Path) -> Run:
    """``dynaval dataset rebuild --round N``: every kept record written from the candidates and
    votes (what the service otherwise does a decision at a time, as each is made)."""
    return run_command(env, ["dataset", "rebuild", "--round", str(round_id)], folder / "rebuild.result.json")


def run_command(env: dict[str, str], command: list[str], result: Path, out: Path | None = None) -> Run:
    """A ``dynaval`` command in a child process of its own: its time without the interpreter's
    start and imports, its CPU time and its peak RSS."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD_EXPORT, *command],
        env={**env, "BENCH_RESULT": str(result)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"dynaval {command[0]} failed ({process.returncode}); run it by hand to see why")
    measured = json.loads(result.read_text())
    assert measured["code"] == 0, measured
    cpu = usage.ru_utime + usage.ru_stime
    size = out.stat().st_size if out is not None else 0
    return Run(measured["run_s"], measured["import_s"], cpu, usage.ru_maxrss / 1024, size)


@dataclass
class Downloads:
    seconds: list[float]
    cpu_s: float
    """The server's CPU time over all the downloads."""
    idle_rss_mb: float
    """The server's RSS once the app is loaded, before any request."""
    peak_rss_mb: float
    size_bytes: int


def run_downloads(env: dict[str, str], round_id: int, fmt: str, repeats: int, out: Path) -> Downloads:
    """``repeats`` downloads from one server process."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD_SERVER, str(repeats)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    port_text, idle_text = process.stdout.readline().split()
    port = int(port_text)
    times = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        connection.request(
            "GET",
            f"/api/rounds/{round_id}/dataset?format={fmt}",
            headers={"Authorization": f"Bearer {EXPORTER_TOKEN}"},
        )
        response = connection.getresponse()
        assert response.status == 200, (response.status, response.read(300))
        size = 0
        with out.open("wb") as handle:
            while chunk := response.read(1 << 20):
                handle.write(chunk)
                size += len(chunk)
        connection.close()
        times.append(time.perf_counter() - started)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return Downloads(times, usage.ru_utime + usage.ru_stime, float(idle_text), usage.ru_maxrss / 1024, size)


def count_records(path: Path, fmt: str) -> int:
    if fmt == "jsonl":
        with path.open("rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b""))
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def database_floor(sqlite_path: Path, round_id: int, page_size: int = 2000) -> float:
    """Rows per second at which SQLite merely hands over what an export reads, with nothing built.

    The same keyset pages of accepted candidates (every column a record takes) and, per page, the
    annotations of those candidates, fetched by the standard library's ``sqlite3`` and dropped: no
    record, no JSON, no ORM. No export of these records can be faster than this on this machine.
    """
    import sqlite3

    connection = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    page_sql = (
        "SELECT id, inputs, writer_label, writer_id, collected_by, submitted_at, model_prediction,"
        " model_probabilities, model_signature, fooled, label_studio_task_id, decision, decided_at,"
        " override_outcome, override_reason, override_by, override_at FROM candidate"
        " WHERE round_id = ? AND status = 'accepted' AND (submitted_at, id) > (?, ?)"
        " ORDER BY submitted_at, id LIMIT ?"
    )
    votes_sql = (
        "SELECT candidate_id, id, annotator_id, label, flagged, flag_reason, lead_time_s, created_at,"
        " updated_at FROM annotation WHERE candidate_id IN ({}) AND NOT was_cancelled"
        " ORDER BY candidate_id, annotator_id, updated_at DESC, id DESC"
    )
    started = time.perf_counter()
    rows = 0
    key: tuple[str, str] = ("", "")
    try:
        while True:
            page = connection.execute(page_sql, (round_id, *key, page_size)).fetchall()
            if not page:
                break
            ids = [row[0] for row in page]
            connection.execute(votes_sql.format(",".join("?" * len(ids))), ids).fetchall()
            rows += len(page)
            key = (page[-1][5], page[-1][0])
    finally:
        connection.close()
    return rows / (time.perf_counter() - started)


def kept_floor(url: str, round_id: int, table: str = "dataset_record", column: str = "record") -> float:
    """Rows per second at which the database merely hands over what an export reads.

    The same keyset pages as the export (``record`` of ``dataset_record`` for JSONL, the packed
    ``columns`` of ``dataset_record_columns`` for Parquet), read by the plain driver and dropped: no
    splicing, no file. On SQLite the standard library's ``sqlite3``, a value and its page key a row;
    on PostgreSQL ADBC's driver, which reads each page with ``COPY ... TO STDOUT`` (binary).
    """
    page_size = 5000
    sql = (
        f"SELECT {column}, submitted_at, candidate_id FROM {table}"
        " WHERE round_id = {round} AND (submitted_at, candidate_id) > ({time}, {id})"
        " ORDER BY submitted_at, candidate_id LIMIT {limit}"
    )
    rows = 0
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(f"file:{url.split(':///', 1)[1]}?mode=ro", uri=True)
        statement = sql.format(round="?", time="?", id="?", limit="?")
        key: tuple[Any, Any] = ("", "")
        started = time.perf_counter()
        try:
            while True:
                page = connection.execute(statement, (round_id, *key, page_size)).fetchall()
                if not page:
                    break
                rows += len(page)
                key = (page[-1][1], page[-1][2])
        finally:
            connection.close()
        return rows / (time.perf_counter() - started)
    import adbc_driver_postgresql.dbapi as adbc

    started = time.perf_counter()
    connection = adbc.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
    with connection, connection.cursor() as cursor:
        after = ("'1970-01-01T00:00:00+00:00'::timestamptz", "''")
        while True:
            cursor.execute(sql.format(round=round_id, time=after[0], id=after[1], limit=page_size))
            table_page = cursor.fetch_arrow_table()
            if table_page.num_rows == 0:
                break
            rows += table_page.num_rows
            last_time = table_page.column("submitted_at")[-1].as_py().isoformat()
            after = (f"'{last_time}'::timestamptz", f"'{table_page.column('candidate_id')[-1].as_py()}'")
    return rows / (time.perf_counter() - started)


def disk_floor(folder: Path, size: int, chunk: int = 11 << 20) -> float:
    """Seconds to write ``size`` bytes to a new file in ``folder`` from memory, in chunks of a
    JSONL page's size: the disk's own speed, below which no export of that file can go."""
    data = os.urandom(1 << 20) * (chunk >> 20)
    path = folder / "disk-floor.bin"
    started = time.perf_counter()
    with path.open("wb") as handle:
        for _ in range(size // len(data)):
            handle.write(data)
        handle.write(data[: size % len(data)])
    seconds = time.perf_counter() - started
    path.unlink()
    return seconds


def verdict(rate: float, rss: float) -> str:
    ok = rate >= GOAL_ROWS_PER_S and rss <= GOAL_PEAK_RSS_MB
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="accepted candidates (default 1,000,000)")
    parser.add_argument("--scale", type=float, default=None, help="a fraction of --rows, for a quick run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--formats", default="jsonl,parquet")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP downloads")
    parser.add_argument("--database-url", default=None, help="default: a SQLite file in --data-dir")
    parser.add_argument("--data-dir", default=None, help="default: a temporary folder, removed at the end")
    parser.add_argument("--reuse", action="store_true", help="export the round seeded before in --data-dir")
    parser.add_argument("--seed-only", action="store_true", help="seed (into --data-dir) and stop")
    parser.add_argument(
        "--no-rebuild",
        action="store_true",
        help="with --reuse: the kept records are written already (by an earlier run's rebuild)",
    )
    args = parser.parse_args()
    rows = int(args.rows * args.scale) if args.scale else args.rows
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]

    folder = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="dynaval-export-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        url = args.database_url or f"sqlite:///{folder / 'dynaval.sqlite3'}"
        backend = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
        marker = folder / MARKER
        database = Database(url)
        database.migrate()
        if args.reuse and marker.exists() and json.loads(marker.read_text())["url"] == url:
            seeded = json.loads(marker.read_text())
            print(f"reusing round {seeded['round_id']} ({seeded['accepted']:,} accepted) in {backend}")
        else:
            started = time.perf_counter()
            round_id, candidates, annotations = seed(database, rows)
            seeded = {"url": url, "round_id": round_id, "accepted": rows}
            marker.write_text(json.dumps(seeded))
            print(
                f"seeded {candidates:,} candidates ({rows:,} accepted) and {annotations:,} annotations "
                f"in {time.perf_counter() - started:.0f} s ({backend})"
            )
        database.dispose()
        if args.seed_only:
            return
        round_id, accepted = seeded["round_id"], seeded["accepted"]
        env = environment(url, folder)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before the runs")
        # The seed wrote candidates and votes straight into the tables, as a restore would: the
        # kept records are written by the rebuild (the service writes each as its decision is made).
        if not (args.reuse and args.no_rebuild):
            rebuilt = run_rebuild(env, round_id, folder)
            print(
                f"  dynaval dataset rebuild (every kept record written): {rebuilt.seconds:.1f} s "
                f"({accepted / rebuilt.seconds:,.0f} rows/s), peak RSS {rebuilt.peak_rss_mb:.0f} MB",
                flush=True,
            )

        lines = []
        jsonl_size = 0
        for fmt in formats:
            runs = []
            for repeat in range(args.repeats):
                out = folder / f"export.{fmt}"
                run = run_export(env, round_id, fmt, out)
                assert count_records(out, fmt) == accepted, f"{out} does not hold {accepted} records"
                runs.append(run)
                print(
                    f"  dynaval export --format {fmt} #{repeat + 1}: {run.seconds:.2f} s "
                    f"({accepted / run.seconds:,.0f} rows/s), {run.cpu_s:.1f} CPU s, "
                    f"peak RSS {run.peak_rss_mb:.0f} MB",
                    flush=True,
                )
                out.unlink()
            seconds = statistics.median(r.seconds for r in runs)
            if fmt == "jsonl":
                jsonl_size = runs[0].size_bytes
            cpu = statistics.median(r.cpu_s for r in runs)
            start = statistics.median(r.import_s for r in runs)
            rss = max(r.peak_rss_mb for r in runs)
            lines.append(
                (f"dynaval export, {fmt}", accepted / seconds, accepted / cpu, rss, runs[0].size_bytes,
                 f"{seconds:.1f} s (+{start:.1f} s start)")
            )  # fmt: skip
            if not args.no_http:
                out = folder / f"download.{fmt}"
                got = run_downloads(env, round_id, fmt, args.repeats, out)
                assert count_records(out, fmt) == accepted, (
                    f"the {fmt} download does not hold {accepted} records"
                )
                out.unlink()
                for repeat, seconds_each in enumerate(got.seconds):
                    print(f"  GET dataset?format={fmt} #{repeat + 1}: {seconds_each:.2f} s", flush=True)
                seconds = statistics.median(got.seconds)
                idle = f"{seconds:.1f} s (server idle {got.idle_rss_mb:.0f} MB)"
                lines.append(
                    (f"HTTP download, {fmt}", accepted / seconds, accepted * args.repeats / got.cpu_s,
                     got.peak_rss_mb, got.size_bytes, idle)
                )  # fmt: skip

        floors = [kept_floor(url, round_id) for _ in range(args.repeats)]
        floor = statistics.median(floors)
        print(f"  {backend} handing over the kept lines: " + ", ".join(f"{f:,.0f}" for f in floors))
        column_floors = [
            kept_floor(url, round_id, "dataset_record_columns", "columns") for _ in range(args.repeats)
        ]
        column_floor = statistics.median(column_floors)
        print(
            f"  {backend} handing over the kept Parquet values: "
            + ", ".join(f"{f:,.0f}" for f in column_floors)
        )
        disk = None
        if jsonl_size:
            writes = [disk_floor(folder, jsonl_size) for _ in range(args.repeats)]
            disk = accepted / statistics.median(writes)
            print(
                f"  writing the JSONL file's {jsonl_size / 1e6:,.0f} MB from memory: "
                + ", ".join(f"{jsonl_size / w / 1e6:,.0f} MB/s" for w in writes)
            )
        old_floor = None
        if backend == "SQLite":
            olds = [database_floor(folder / "dynaval.sqlite3", round_id) for _ in range(args.repeats)]
            old_floor = statistics.median(olds)
            print("  SQLite handing over candidates and votes: " + ", ".join(f"{f:,.0f}" for f in olds))

        print(f"\n{backend}, {accepted:,} accepted rows, median of {args.repeats} runs")
        print(f"load average after the runs: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
        print(
            "rows/s: wall clock; rows/CPU s: rows per second of the process's own CPU time (user + system;"
            " the database server's not counted)"
        )
        print(
            f"{'path':24} {'rows/s':>9} {'rows/CPU s':>10} {'goal':>10} {'peak RSS':>9} {'goal':>7} "
            f"{'size':>8}  {'time':36} verdict"
        )
        for name, rate, cpu_rate, rss, size, seconds_text in lines:
            goal_rate = ">= " + format(GOAL_ROWS_PER_S, ",")
            judged = verdict(rate, rss)
            print(
                f"{name:24} {rate:9,.0f} {cpu_rate:10,.0f} {goal_rate:>10} {rss:6.0f} MB "
                f"{'<= ' + str(GOAL_PEAK_RSS_MB):>7} {size / 1e6:5.0f} MB  {seconds_text:36} {judged}"
            )
        print(
            f"{'floor: kept lines':24} {floor:9,.0f} rows/s, {floor / GOAL_ROWS_PER_S:.2f}x the goal: "
            f"the kept lines a JSONL export reads, fetched by the plain driver and dropped"
        )
        print(
            f"{'floor: kept columns':24} {column_floor:9,.0f} rows/s, {column_floor / GOAL_ROWS_PER_S:.2f}x "
            "the goal: the packed Parquet values a Parquet export reads, by the plain driver, dropped"
        )
        if disk is not None:
            print(
                f"{'floor: disk write':24} {disk:9,.0f} rows/s, {disk / GOAL_ROWS_PER_S:.2f}x the goal: "
                "the JSONL file's bytes written from memory to the same disk"
            )
        if old_floor is not None:
            print(
                f"{'floor: candidates+votes':24} {old_floor:9,.0f} rows/s: the candidate rows and votes "
                "an export built its records from before the records were kept (sqlite3, dropped)"
            )
    finally:
        if not args.data_dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
