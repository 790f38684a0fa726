"""The database adapter on a real SQLite file and a real PostgreSQL database.

Migrations, the agreement of the Alembic head with the SQLModel tables, the unit of work, the row lock
of concurrent votes and the unique Label Studio task id of a candidate.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlmodel import SQLModel, select

from dynaval.adapters.db.database import MIGRATIONS_DIR, Database
from dynaval.adapters.db.orm import CandidateRow, RoundRow
from dynaval.adapters.db.unit_of_work import SqlUnitOfWork
from dynaval.domain.errors import StorageConflict
from dynaval.domain.validation.candidate import CandidateStatus

TABLES = {"round", "candidate", "annotation", "decision"}


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    db.migrate()
    try:
        yield db
    finally:
        db.dispose()


def head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def new_round(db: Database, name: str = "storage round") -> int:
    with db.unit_of_work() as session:
        row = RoundRow(
            name=name,
            task_type="sentiment",
            model_dir="/models/x",
            model_name="x",
            model_hash="sha256:0",
            labels=["positive", "negative", "neutral"],
            policy={"min_votes": 2},
        )
        session.add(row)
        session.commit()
        assert row.id is not None
        return row.id


def candidate(round_id: int, *, task_id: int | None = None) -> CandidateRow:
    return CandidateRow(
        id=str(uuid.uuid4()),
        round_id=round_id,
        inputs={"text": "a text"},
        writer_label="positive",
        writer_id="w",
        status="queued",
        label_studio_task_id=task_id,
    )


def test_migrations_create_every_table(database: Database) -> None:
    names = set(inspect(database.engine).get_table_names())
    assert names == set(SQLModel.metadata.tables) | {"alembic_version"}
    assert names >= TABLES
    with database.engine.connect() as connection:
        assert MigrationContext.configure(connection).get_current_revision() == head_revision()


def test_second_migrate_is_a_no_op(database: Database) -> None:
    round_id = new_round(database)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(database.engine, "before_cursor_execute", record)
    try:
        database.migrate()
    finally:
        event.remove(database.engine, "before_cursor_execute", record)
    assert statements  # it did look at the schema version

    writes = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE")
    assert [s for s in statements if s.lstrip().upper().startswith(writes)] == []
    with database.engine.connect() as connection:
        assert MigrationContext.configure(connection).get_current_revision() == head_revision()
    with database.unit_of_work() as session:
        assert session.get(RoundRow, round_id) is not None  # nothing lost


def test_alembic_head_schema_equals_the_sqlmodel_tables(database: Database) -> None:
    # compare_metadata diffs tables, columns (types included), nullability, indexes, unique
    # constraints and foreign keys of the migrated database against the models. No difference is
    # tolerated on either backend: SQLite's reflected types (VARCHAR(n), DATETIME, BIGINT, JSON) compare
    # equal to the models' AutoString, UTCDateTime, BigInteger and JSON, so there is no type-affinity
    # noise to ignore today; if a future Alembic reports some, filter only that kind here, on SQLite.
    with database.engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "compare_server_default": True}
        )
        diff = compare_metadata(context, SQLModel.metadata)
    assert diff == []


def test_the_schema_comparison_sees_differences(database_url: str) -> None:
    """The check above is not vacuous: an unmigrated database differs by every table."""
    db = Database(database_url)
    try:
        with db.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            diff = compare_metadata(context, SQLModel.metadata)
    finally:
        db.dispose()
    added = {d[1].name for d in diff if isinstance(d, tuple) and d[0] == "add_table"}
    assert added >= TABLES


def test_unit_of_work_rolls_back_without_commit(database: Database) -> None:
    with database.unit_of_work() as session:
        session.add(
            RoundRow(
                name="never committed",
                task_type="sentiment",
                model_dir="/m",
                model_name="m",
                model_hash="h",
                labels=["a"],
                policy={},
            )
        )
        session.flush()  # written inside the transaction, then abandoned

    with pytest.raises(RuntimeError), database.unit_of_work() as session:
        session.add(candidate(new_round(database, "kept")))
        session.flush()
        raise RuntimeError("the block fails before its commit")

    with database.unit_of_work() as session:
        names = session.exec(select(RoundRow.name)).all()
        assert names == ["kept"]
        assert session.exec(select(CandidateRow.id)).all() == []


def test_unit_of_work_keeps_what_was_committed(database: Database) -> None:
    round_id = new_round(database)
    with database.unit_of_work() as session:
        row = candidate(round_id)
        session.add(row)
        session.commit()
        row.status = "accepted"  # changed after the commit and never committed
        session.add(row)
        session.flush()
    # The returned object stays readable after the block (detached, not expired).
    assert row.round_id == round_id
    with database.unit_of_work() as session:
        stored = session.get(CandidateRow, row.id)
        assert stored is not None and stored.status == "queued"


def test_the_candidate_repository_locks_the_row(database: Database) -> None:
    round_id = new_round(database)
    with database.unit_of_work() as session:
        row = candidate(round_id)
        session.add(row)
        session.commit()
        candidate_id = row.id

    url = make_url(database.url)
    with SqlUnitOfWork(database) as uow:
        assert uow.candidates.get("no-such-candidate", for_update=True) is None
        locked = uow.candidates.get(candidate_id, for_update=True)
        assert locked is not None and locked.id == candidate_id and locked.status is CandidateStatus.QUEUED
        # While the lock is held, another connection cannot take it.
        if database.is_sqlite:
            # SQLite has no row locks: the transaction began with BEGIN IMMEDIATE and holds the
            # database's write lock, so a second writer cannot start.
            other = sqlite3.connect(str(url.database), timeout=0, isolation_level=None)
            try:
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    other.execute("BEGIN IMMEDIATE")
            finally:
                other.close()
        else:
            other_pg = psycopg.connect(url.set(drivername="postgresql").render_as_string(False))
            try:
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other_pg.execute(
                        "SELECT id FROM candidate WHERE id = %s FOR UPDATE NOWAIT", (candidate_id,)
                    )
            finally:
                other_pg.close()

    # Released at the end of the unit of work: the lock can be taken again.
    with SqlUnitOfWork(database) as uow:
        again = uow.candidates.get(candidate_id, for_update=True)
        assert again is not None
        again.enter_validation(task_id=99, overlap=2, at=again.submitted_at or datetime.now(UTC))
        uow.candidates.save(again)
        uow.commit()
    with database.unit_of_work() as session:
        stored = session.get(CandidateRow, candidate_id)
        assert stored is not None and stored.status == "in_validation"


def test_a_label_studio_task_belongs_to_one_candidate(database: Database) -> None:
    round_id = new_round(database)
    with database.unit_of_work() as session:
        # Candidates without a task (NULL) are many; the constraint only concerns real task ids.
        session.add_all([candidate(round_id), candidate(round_id), candidate(round_id, task_id=4242)])
        session.commit()

    with database.unit_of_work() as session:
        session.add(candidate(round_id, task_id=4242))
        with pytest.raises(IntegrityError) as raised:
            session.commit()
    message = str(raised.value.orig).lower()
    # PostgreSQL names the constraint; SQLite names the column.
    assert "uq_candidate_ls_task" in message or "candidate.label_studio_task_id" in message

    with database.unit_of_work() as session:
        task_ids = session.exec(select(CandidateRow.label_studio_task_id)).all()
        assert sorted(t for t in task_ids if t is not None) == [4242]
        assert len(task_ids) == 3


def test_the_unit_of_work_reports_a_taken_key_as_the_domains_storage_conflict(database: Database) -> None:
    """The use cases never see SQLAlchemy's IntegrityError: a unique key another writer took is a
    StorageConflict (409), at the flush or at the commit, and nothing of the unit of work is kept."""
    round_id = new_round(database)
    with database.unit_of_work() as session:
        session.add(candidate(round_id, task_id=4242))
        session.commit()
    for step in ("flush", "commit"):
        with pytest.raises(StorageConflict), SqlUnitOfWork(database) as uow:
            uow.session.add(candidate(round_id, task_id=4242))
            getattr(uow, step)()
    with database.unit_of_work() as session:
        assert len(session.exec(select(CandidateRow.id)).all()) == 1


def test_a_long_read_does_not_hold_up_a_writer(database: Database) -> None:
    """Reads (the dashboard's vote scans, exports) run beside writes (webhooks) instead of before them."""
    round_id = new_round(database)
    with database.reading() as reader:
        assert reader.get(RoundRow, round_id) is not None
        finished = threading.Event()

        def write() -> None:
            with database.unit_of_work() as session:
                row = session.get(RoundRow, round_id)
                assert row is not None
                row.name = "renamed while a read was open"
                session.add(row)
                session.commit()
            finished.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert finished.wait(5), "the writer waited for the open read"
        writer.join()
    with database.reading() as reader:
        row = reader.get(RoundRow, round_id)
        assert row is not None and row.name == "renamed while a read was open"
        row.name = "changed in a read-only session"
        reader.add(row)
    with database.reading() as reader:
        row = reader.get(RoundRow, round_id)
        assert row is not None and row.name == "renamed while a read was open"  # reads keep nothing


def migrate_to(db: Database, revision: str, *, down: bool = False) -> None:
    """Bring ``db`` to ``revision`` of the migrations, up (or down)."""
    from alembic import command

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


def stored_candidate_ids(db: Database, count: int) -> list[str]:
    """The ids of ``count`` new candidates of a new round."""
    round_id = new_round(db)
    rows = [candidate(round_id) for _ in range(count)]
    # Only the columns of the schema as migrated so far: a later migration may add some.
    present = {column["name"] for column in inspect(db.engine).get_columns("candidate")}
    table = CandidateRow.__table__  # type: ignore[attr-defined]
    values = [
        {column.name: getattr(row, column.name) for column in table.c if column.name in present}
        for row in rows
    ]
    with db.engine.begin() as connection:
        connection.execute(table.insert(), values)
    return [row.id for row in rows]


def test_the_band_keys_of_examples_indexed_before_0018_are_copied_beside_them(database_url: str) -> None:
    """0018 gives every example indexed earlier its band keys from ``near_duplicate_key``, sorted,
    as the in-memory index reads them (an example without keys keeps none), and drops the key
    rows; a downgrade makes them again from the copies."""
    from sqlalchemy import text

    from dynaval.domain.health.band_keys import keys_from_bytes

    db = Database(database_url)
    try:
        migrate_to(db, "0017")
        keyed, other, keyless = stored_candidate_ids(db, 3)
        with db.engine.begin() as connection:
            for seq, candidate_id in enumerate((keyed, other, keyless), start=1):
                connection.execute(
                    text(
                        "INSERT INTO near_duplicate_example (seq, candidate_id, task_type) "
                        "VALUES (:seq, :candidate_id, 'sentiment')"
                    ),
                    {"seq": seq, "candidate_id": candidate_id},
                )
            connection.execute(
                text(
                    "INSERT INTO near_duplicate_key (task_type, band_key, candidate_id) "
                    "VALUES ('sentiment', :band_key, :candidate_id)"
                ),
                [
                    {"band_key": key, "candidate_id": candidate_id}
                    for candidate_id, key in (
                        (keyed, 2**62),
                        (keyed, -5),
                        (keyed, 7),
                        (other, 7),
                    )
                ],
            )
        db.migrate()
        with db.engine.connect() as connection:
            stored = dict(
                connection.execute(text("SELECT candidate_id, band_keys FROM near_duplicate_example")).all()
            )
        assert keys_from_bytes(stored[keyed]).tolist() == [-5, 7, 2**62]
        assert keys_from_bytes(stored[other]).tolist() == [7]
        assert stored[keyless] is None
        assert "near_duplicate_key" not in inspect(db.engine).get_table_names()
        migrate_to(db, "0017", down=True)
        with db.engine.connect() as connection:
            key_rows = connection.execute(
                text("SELECT candidate_id, band_key FROM near_duplicate_key ORDER BY band_key")
            ).all()
        assert sorted(tuple(row) for row in key_rows) == sorted(
            [(keyed, -5), (keyed, 7), (other, 7), (keyed, 2**62)]
        )
    finally:
        db.dispose()


def test_after_0019_an_indexed_examples_number_is_never_handed_out_twice(database_url: str) -> None:
    """0019 keeps every indexed example with its number, and from then on a deleted top number is
    not given to the next row (SQLite without AUTOINCREMENT gave it again); a downgrade keeps the
    rows."""
    from sqlalchemy import text

    db = Database(database_url)
    try:
        migrate_to(db, "0018")
        ids = stored_candidate_ids(db, 4)
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO near_duplicate_example (candidate_id, task_type, band_keys) "
                    "VALUES (:candidate_id, 'sentiment', :band_keys)"
                ),
                [{"candidate_id": i, "band_keys": bytes([n])} for n, i in enumerate(ids[:3])],
            )
        db.migrate()
        select_all = text("SELECT seq, candidate_id, band_keys FROM near_duplicate_example ORDER BY seq")
        with db.engine.begin() as connection:
            assert [tuple(r) for r in connection.execute(select_all)] == [
                (1, ids[0], b"\x00"),
                (2, ids[1], b"\x01"),
                (3, ids[2], b"\x02"),
            ]
            connection.execute(text("DELETE FROM near_duplicate_example WHERE seq = 3"))
            connection.execute(
                text("INSERT INTO near_duplicate_example (candidate_id, task_type) VALUES (:c, 'sentiment')"),
                {"c": ids[3]},
            )
            assert [tuple(r)[:2] for r in connection.execute(select_all)] == [
                (1, ids[0]),
                (2, ids[1]),
                (4, ids[3]),
            ]
        with pytest.raises(IntegrityError), db.engine.begin() as connection:  # each example once, as before
            connection.execute(
                text("INSERT INTO near_duplicate_example (candidate_id, task_type) VALUES (:c, 's')"),
                {"c": ids[0]},
            )
        migrate_to(db, "0018", down=True)
        with db.engine.connect() as connection:
            assert [tuple(r)[:2] for r in connection.execute(select_all)] == [
                (1, ids[0]),
                (2, ids[1]),
                (4, ids[3]),
            ]
    finally:
        db.dispose()


def test_after_0021_a_writer_may_be_placed_before_any_release_and_a_downgrade_forgets_those(
    database_url: str,
) -> None:
    """0021 lets a writer's kind come with no release (placed at their first accepted example) and
    says who placed each writer; a downgrade drops the placements no release made (its column may
    not be empty)."""
    from sqlalchemy import text

    db = Database(database_url)
    try:
        migrate_to(db, "0020")
        db.migrate()
        insert_placement = text(
            "INSERT INTO writer_split (task_type, writer, kind, release_id, placed_by, assigned_at) "
            "VALUES ('nli', 'w-early', 'train', NULL, 'acceptance', '2026-12-06 12:00:00')"
        )
        with db.engine.begin() as connection:
            connection.execute(insert_placement)
            rows = connection.execute(text("SELECT writer, release_id, placed_by FROM writer_split")).all()
        assert [tuple(r) for r in rows] == [("w-early", None, "acceptance")]
        migrate_to(db, "0020", down=True)
        with db.engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM writer_split")).scalar_one() == 0
        with pytest.raises(IntegrityError), db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO writer_split (task_type, writer, kind, release_id, assigned_at) "
                    "VALUES ('nli', 'w', 'train', NULL, '2026-12-06 12:00:00')"
                )
            )
    finally:
        db.dispose()


def test_0023_gives_every_scored_candidate_its_rounds_model_and_a_downgrade_forgets_it(
    database_url: str,
) -> None:
    """0023 records the model that scored each candidate: every candidate scored before it was
    scored by its round's model (no round's model could change yet); one not scored has none."""
    from sqlalchemy import text

    db = Database(database_url)
    try:
        migrate_to(db, "0022")
        scored, unscored = stored_candidate_ids(db, 2)
        with db.engine.begin() as connection:
            connection.execute(
                text("UPDATE candidate SET model_prediction = 'positive' WHERE id = :id"), {"id": scored}
            )
        db.migrate()
        with db.engine.connect() as connection:
            rows = dict(
                (r[0], (r[1], r[2]))
                for r in connection.execute(text("SELECT id, model_hash, model_name FROM candidate")).all()
            )
        assert rows == {scored: ("sha256:0", "x"), unscored: (None, None)}
        migrate_to(db, "0022", down=True)
        columns = {column["name"] for column in inspect(db.engine).get_columns("candidate")}
        assert "model_hash" not in columns and "model_name" not in columns
    finally:
        db.dispose()


def test_0024_marks_every_accepted_candidate_for_its_record_and_its_triggers_mark_each_change(
    database_url: str,
) -> None:
    """0024 keeps the round dataset's records: the accepted candidates of before wait, marked, for a
    round's first export or a rebuild (no unit of work takes that backlog inside its commit). Then a
    change to an accepted candidate's record columns, to its annotations, or a candidate becoming or
    leaving ``accepted`` marks it; a push's bookkeeping, or another candidate's annotation, does not.
    A downgrade drops the tables and the triggers."""
    from sqlalchemy import text

    db = Database(database_url)
    try:
        migrate_to(db, "0023")
        accepted, waiting = stored_candidate_ids(db, 2)
        with db.engine.begin() as connection:
            accept = text("UPDATE candidate SET status = 'accepted' WHERE id = :id")
            connection.execute(accept, {"id": accepted})
            connection.execute(
                text("UPDATE candidate SET status = 'in_validation' WHERE id = :id"), {"id": waiting}
            )
        db.migrate()

        def marks() -> list[tuple[str, int | None]]:
            with db.engine.begin() as connection:
                rows = connection.execute(
                    text("SELECT candidate_id, xact FROM dataset_record_stale ORDER BY id")
                )
                found = [(str(r[0]), None if r[1] is None else int(r[1])) for r in rows]
                connection.execute(text("DELETE FROM dataset_record_stale"))
            return found

        assert marks() == [(accepted, -1)]
        changes = [
            ("UPDATE candidate SET push_attempted_at = submitted_at WHERE id = :id", accepted, False),
            ("UPDATE candidate SET rationale = 'edited' WHERE id = :id", accepted, True),
            ("UPDATE candidate SET rationale = 'edited' WHERE id = :id", waiting, False),
            ("UPDATE candidate SET status = 'accepted' WHERE id = :id", waiting, True),
            ("UPDATE candidate SET status = 'rejected' WHERE id = :id", waiting, True),
            (
                "INSERT INTO annotation (id, candidate_id, round_id, annotator_id, label, flagged,"
                " was_cancelled, created_at, updated_at, received_at, source, late)"
                " SELECT 7, id, round_id, '101', 'negative', false, false, submitted_at, submitted_at,"
                " submitted_at, 'reconcile', false FROM candidate WHERE id = :id",
                accepted,
                True,
            ),
            ("UPDATE annotation SET label = 'positive' WHERE candidate_id = :id", accepted, True),
            ("DELETE FROM annotation WHERE candidate_id = :id", accepted, True),
        ]
        for statement, candidate_id, marked in changes:
            with db.engine.begin() as connection:
                connection.execute(text(statement), {"id": candidate_id})
            found = marks()
            assert [c for c, _ in found] == ([candidate_id] if marked else []), statement
            if not db.is_sqlite and marked:
                assert found[0][1] is not None and found[0][1] > 0  # the writing transaction's id

        migrate_to(db, "0023", down=True)
        tables = set(inspect(db.engine).get_table_names())
        assert "dataset_record" not in tables and "dataset_record_stale" not in tables
        with db.engine.begin() as connection:  # no trigger left to write into a dropped table
            connection.execute(
                text("UPDATE candidate SET rationale = 'after' WHERE id = :id"), {"id": accepted}
            )
    finally:
        db.dispose()


def test_0025_marks_every_kept_record_for_its_parquet_values(database_url: str) -> None:
    """0025 keeps each record's Parquet values beside its line: the records kept before have none,
    so each is marked (no unit of work's own), for its round's next export or a rebuild to write
    again with them. A downgrade drops the table."""
    from sqlalchemy import text

    db = Database(database_url)
    try:
        migrate_to(db, "0024")
        kept, _other = stored_candidate_ids(db, 2)
        with db.engine.begin() as connection:
            connection.execute(text("DELETE FROM dataset_record_stale"))
            connection.execute(
                text(
                    "INSERT INTO dataset_record (candidate_id, round_id, submitted_at, record, stored_at)"
                    " SELECT id, round_id, submitted_at, :record, submitted_at FROM candidate WHERE id = :id"
                ),
                {"id": kept, "record": b"{}"},
            )
        db.migrate()
        with db.engine.begin() as connection:
            marks = connection.execute(text("SELECT candidate_id, xact FROM dataset_record_stale")).all()
            values = connection.execute(text("SELECT count(*) FROM dataset_record_columns")).scalar_one()
        assert [(str(c), int(x)) for c, x in marks] == [(kept, -1)] and values == 0
        migrate_to(db, "0024", down=True)
        assert "dataset_record_columns" not in set(inspect(db.engine).get_table_names())
    finally:
        db.dispose()


def test_0026_marks_every_kept_record_for_its_release_line(database_url: str) -> None:
    """0026 keeps each record's release line beside it: the records kept before have none, so each
    is marked once (a record 0025 marked already is not marked again). A downgrade drops the table."""
    from sqlalchemy import text

    db = Database(database_url)
    try:
        migrate_to(db, "0025")
        kept, marked = stored_candidate_ids(db, 2)
        with db.engine.begin() as connection:
            connection.execute(text("DELETE FROM dataset_record_stale"))
            for candidate_id in (kept, marked):
                connection.execute(
                    text(
                        "INSERT INTO dataset_record (candidate_id, round_id, submitted_at, record, stored_at)"
                        " SELECT id, round_id, submitted_at, :record, submitted_at FROM candidate"
                        " WHERE id = :id"
                    ),
                    {"id": candidate_id, "record": b"{}"},
                )
            connection.execute(
                text("INSERT INTO dataset_record_stale (candidate_id, xact) VALUES (:id, -1)"), {"id": marked}
            )
        db.migrate()
        with db.engine.begin() as connection:
            marks = connection.execute(text("SELECT candidate_id, xact FROM dataset_record_stale")).all()
            lines = connection.execute(text("SELECT count(*) FROM dataset_record_release")).scalar_one()
        assert sorted((str(c), int(x)) for c, x in marks) == sorted([(kept, -1), (marked, -1)]) and lines == 0
        migrate_to(db, "0025", down=True)
        assert "dataset_record_release" not in set(inspect(db.engine).get_table_names())
    finally:
        db.dispose()
