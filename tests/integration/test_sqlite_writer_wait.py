"""A write transaction on SQLite waits for another process's write lock in short polls of its own,
gives up with ``Unavailable`` past the limit, and leaves SQLite's busy handler as it found it."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from dynaval.adapters.db import database as database_module
from dynaval.adapters.db.database import NO_WAIT_OPTION, SQLITE_BUSY_TIMEOUT_MS, Database
from dynaval.domain.errors import Unavailable, WritersBusy


@pytest.fixture
def sqlite_database(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'wait.sqlite3'}")
    with database.transaction() as connection:
        connection.execute(text("CREATE TABLE note (id INTEGER PRIMARY KEY, body TEXT)"))
    return database


def other_process_lock(path: str) -> sqlite3.Connection:
    """A connection of its own (as another process's) holding the write lock."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO note (body) VALUES ('theirs')")
    return other


def test_a_write_waits_for_another_writer_and_then_goes_ahead(
    sqlite_database: Database, tmp_path: Path
) -> None:
    other = other_process_lock(str(tmp_path / "wait.sqlite3"))
    released = threading.Event()

    def release_soon() -> None:
        time.sleep(0.3)
        released.set()  # before the commit: the write may begin the moment it is done
        other.commit()

    releaser = threading.Thread(target=release_soon)
    releaser.start()
    try:
        with sqlite_database.transaction() as connection:
            assert released.is_set()  # it began only once the other writer was done
            connection.execute(text("INSERT INTO note (body) VALUES ('ours')"))
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS
    finally:
        releaser.join()
        other.close()
    with sqlite_database.reading() as session:
        assert list(session.execute(text("SELECT body FROM note ORDER BY id")).scalars()) == [
            "theirs",
            "ours",
        ]
    sqlite_database.dispose()


def test_a_write_gives_up_past_the_limit_and_the_connection_stays_usable(
    sqlite_database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database_module, "SQLITE_WRITER_WAIT_S", 0.2)
    other = other_process_lock(str(tmp_path / "wait.sqlite3"))
    try:
        with pytest.raises(Unavailable, match="stayed busy"), sqlite_database.transaction() as connection:
            connection.execute(text("INSERT INTO note (body) VALUES ('refused')"))
    finally:
        other.rollback()
        other.close()
    with sqlite_database.transaction() as connection:
        connection.execute(text("INSERT INTO note (body) VALUES ('later')"))
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS
    with sqlite_database.reading() as session:
        assert list(session.execute(text("SELECT body FROM note")).scalars()) == ["later"]
    sqlite_database.dispose()


def test_a_no_wait_write_is_refused_at_once_while_another_process_writes_and_leaks_nothing(
    sqlite_database: Database, tmp_path: Path
) -> None:
    other = other_process_lock(str(tmp_path / "wait.sqlite3"))
    try:
        with pytest.raises(WritersBusy), sqlite_database.engine.connect() as connection:
            connection.execution_options(**{NO_WAIT_OPTION: True}).begin()
    finally:
        other.rollback()
        other.close()
    # Neither the process's writer lock nor the file lock stayed taken: a write from another
    # thread goes ahead (it would wait, and with this limit fail, if either had leaked).
    written: list[str] = []

    def write() -> None:
        with sqlite_database.transaction() as connection:
            connection.execute(text("INSERT INTO note (body) VALUES ('after')"))
        written.append("after")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(database_module, "SQLITE_WRITER_WAIT_S", 2.0)
        writer = threading.Thread(target=write)
        writer.start()
        writer.join()
    assert written == ["after"]
    sqlite_database.dispose()


def test_a_no_wait_write_waits_a_moment_for_another_thread_then_is_refused(sqlite_database: Database) -> None:
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with sqlite_database.transaction() as connection:
            connection.execute(text("INSERT INTO note (body) VALUES ('held')"))
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(30)
        with pytest.raises(WritersBusy), sqlite_database.engine.connect() as connection:
            connection.execution_options(**{NO_WAIT_OPTION: True}).begin()
    finally:
        release.set()
        holder.join()
    # Once the other thread is done, a no-wait write goes ahead.
    with (
        sqlite_database.engine.connect() as connection,
        connection.execution_options(**{NO_WAIT_OPTION: True}).begin(),
    ):
        connection.execute(text("INSERT INTO note (body) VALUES ('mine')"))
    with sqlite_database.reading() as session:
        assert list(session.execute(text("SELECT body FROM note ORDER BY id")).scalars()) == ["held", "mine"]
    sqlite_database.dispose()


def _open_at_once(path: str, start: Any, answers: Any) -> None:
    """One process of two: a first connection to ``path`` (the WAL switch) when both are ready."""
    database = Database(f"sqlite:///{path}")
    start.wait()
    try:
        with database.engine.connect() as connection:
            mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
        answers.put(str(mode))
    except Exception as error:  # the answer is the test's to judge
        answers.put(f"{type(error).__name__}: {str(error).splitlines()[0]}")
    finally:
        database.dispose()


def test_two_processes_opening_a_rollback_mode_file_at_once_both_switch_it_to_wal(tmp_path: Path) -> None:
    """gunicorn starts its HTTP worker and its ``dynaval worker`` together, on a database file that
    may still be in rollback mode: both take a shared lock to switch it, and SQLite answered one of
    them "database is locked" at once (about 1 pair in 20 here), without its busy handler. The switch
    is tried again: every process connects, in WAL mode."""
    context = multiprocessing.get_context("fork")
    answers: list[str] = []
    for trial in range(50):
        path = str(tmp_path / f"fresh-{trial}.sqlite3")
        with sqlite3.connect(path) as made:  # a file in rollback mode, as SQLite makes it
            made.execute("CREATE TABLE made (id INTEGER)")
        made.close()
        start, queue = context.Barrier(2), context.Queue()
        openers = [context.Process(target=_open_at_once, args=(path, start, queue)) for _ in range(2)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
        answers += [queue.get(timeout=10) for _ in openers]
    assert answers == ["wal"] * 100, [a for a in answers if a != "wal"][:3]
