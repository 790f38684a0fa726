"""The database adapter: engine, migrations and the unit of work.

SQLite by default, PostgreSQL when ``DYNAVAL_DATABASE_URL`` says so. On SQLite every transaction
starts with ``BEGIN IMMEDIATE`` so that concurrent writers queue on the file lock instead of
failing half-way, and the threads of one process first queue on a lock of their own (SQLite's busy
handler polls with growing sleeps; a Python lock hands over at once, which keeps the latency tail
short under load); on PostgreSQL candidate rows are locked with ``SELECT ... FOR UPDATE``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import OperationalError as DBAPIOperationalError
from sqlmodel import Session, create_engine

from dynaval.domain.errors import Unavailable, WritersBusy

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# The largest id an autoincrement INTEGER column (rounds, decisions, events) holds on every backend:
# PostgreSQL's INTEGER is 32-bit, so a larger id names no row there and asking for it is an error.
MAX_SERIAL_ID = 2**31 - 1


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            arguments = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
            self.engine: Engine = create_engine(url, connect_args=arguments)
            _make_sqlite_transactions_immediate(self.engine)
        else:
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (safe to call from several processes)."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self.engine.begin() as connection:
            if not self.is_sqlite:
                # Several workers may start at once: one migrates, the others wait.
                connection.execute(text("SELECT pg_advisory_xact_lock(74201)"))
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    @contextmanager
    def unit_of_work(self) -> Iterator[Session]:
        """A session that rolls back unless the block calls ``session.commit()``."""
        session = Session(self.engine, expire_on_commit=False)
        try:
            yield session
        finally:
            # close() rolls back whatever was not committed; unlike rollback() it leaves the loaded
            # objects readable (detached), so use cases can return them.
            session.close()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A Core connection in a write transaction, committed when the block ends, rolled back on
        an error. No ORM session to set up: for the webhook's few statements."""
        with self.engine.begin() as connection:
            yield connection

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only. On SQLite its transaction is a plain (deferred) ``BEGIN``: it
        reads a snapshot (WAL) without taking the write lock, so a long read (a round's 250,000
        votes for the dashboard, an export) never holds up a webhook. Nothing it writes is kept."""
        session = Session(self.engine, expire_on_commit=False)
        try:
            session.connection(execution_options={READ_ONLY_OPTION: True})
            yield session
        finally:
            session.close()

    def ping(self) -> str:
        """``"ok"`` when a trivial query answers, else the error's class name."""
        try:
            with self.engine.connect() as connection:
                connection = connection.execution_options(**{READ_ONLY_OPTION: True})
                connection.execute(text("SELECT 1"))
        except Exception as exc:  # reported, not raised: health must answer
            return f"unavailable: {type(exc).__name__}"
        return "ok"

    def dispose(self) -> None:
        self.engine.dispose()


SQLITE_WRITER_WAIT_S = 30.0
SQLITE_BUSY_TIMEOUT_MS = 30_000
"""SQLite's own busy handler, for the rare waits other than a write transaction's start (a read
while the file is being recovered, the WAL switch at connect, which is also tried again where
SQLite answers busy without waiting: :func:`_switch_to_wal`)."""
FILE_LOCK_POLL_S = (0.0002, 0.002)
"""The first and the longest pause between two tries of another process's write lock."""
READ_ONLY_OPTION = "dynaval_read_only"
NO_WAIT_OPTION = "dynaval_no_wait"
"""A write transaction that raises :class:`WritersBusy` at once where another process holds SQLite's
write lock (after a few milliseconds where another thread of this one does), instead of waiting for
it. PostgreSQL has no such lock: ignored."""


SQLITE_THREAD_WAIT_NO_WAIT_S = 0.005
"""How long a no-wait transaction waits for another thread of its process."""


def _stayed_busy() -> Unavailable:
    return Unavailable(f"the database stayed busy for {SQLITE_WRITER_WAIT_S:.0f} s; try again")


def _begin_immediate(dbapi_connection: Any, *, wait: bool = True) -> None:
    """``BEGIN IMMEDIATE``, waiting for another process's write lock in short polls.

    SQLite's busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25... ms between its tries, so a write
    that another process (``dynaval worker`` reading votes back) held for 10 ms made a webhook's
    write wait 18 to 33 ms. Here the lock is tried again after 0.2 ms, doubling to 2 ms at most.
    ``wait=False``: one try, and :class:`WritersBusy` if the lock is taken.
    """
    deadline = time.monotonic() + SQLITE_WRITER_WAIT_S
    pause = FILE_LOCK_POLL_S[0]
    dbapi_connection.execute("PRAGMA busy_timeout=0")
    try:
        while True:
            try:
                dbapi_connection.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # SQLITE_BUSY_RECOVERY...
                    # As SQLAlchemy reports a failed statement (a 503 to the API's callers).
                    raise DBAPIOperationalError("BEGIN IMMEDIATE", None, error) from error
                if not wait:
                    raise WritersBusy("another writer holds the database") from error
                if time.monotonic() >= deadline:
                    raise _stayed_busy() from error
            time.sleep(pause)
            pause = min(pause * 2, FILE_LOCK_POLL_S[1])
    finally:
        dbapi_connection.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def _switch_to_wal(dbapi_connection: Any) -> None:
    """``PRAGMA journal_mode=WAL``, tried again while the file is busy. Two processes opening a file
    still in rollback mode at once (gunicorn's HTTP worker and its ``dynaval worker`` on a new
    database) each hold a shared lock and want the exclusive one to switch it: SQLite answers one
    of them "database is locked" at once, without its busy handler (waiting could not end). The
    other switches the file; the next try finds it in WAL mode already."""
    deadline = time.monotonic() + SQLITE_WRITER_WAIT_S
    pause = FILE_LOCK_POLL_S[0]
    while True:
        try:
            dbapi_connection.execute("PRAGMA journal_mode=WAL").close()
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, FILE_LOCK_POLL_S[1] * 10)


def _make_sqlite_transactions_immediate(engine: Engine) -> None:
    writer = threading.RLock()  # one transaction at a time per process, like the file lock

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let us emit BEGIN ourselves
        _switch_to_wal(dbapi_connection)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    # Which DBAPI connections hold the lock. Kept apart from SQLAlchemy's connection.info, which is
    # emptied when a connection is invalidated: the lock must still be released then.
    holders: set[int] = set()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        options = connection.get_execution_options()
        if options.get(READ_ONLY_OPTION):
            connection.exec_driver_sql("BEGIN")
            return
        wait = not options.get(NO_WAIT_OPTION)
        # The threads of this process hand the lock over at once: a no-wait transaction still
        # waits a little for them (another webhook's write), not for a long writer.
        if not writer.acquire(timeout=SQLITE_WRITER_WAIT_S if wait else SQLITE_THREAD_WAIT_NO_WAIT_S):
            if not wait:
                raise WritersBusy("another thread of this process holds the database")
            raise _stayed_busy()
        holders.add(id(connection.connection.dbapi_connection))
        try:
            _begin_immediate(connection.connection.dbapi_connection, wait=wait)
        except BaseException:
            _release(connection.connection.dbapi_connection)
            raise

    def _release(dbapi_connection: Any) -> None:
        key = id(dbapi_connection)
        if key in holders:
            holders.discard(key)
            # Released from a thread that does not own it (a dropped session collected elsewhere).
            with contextlib.suppress(RuntimeError):
                writer.release()

    # A connection invalidated, or returned to the pool without a commit or rollback event (a
    # session dropped without closing): whatever lock it held goes with it.
    @event.listens_for(engine, "invalidate")
    def _on_invalidate(dbapi_connection: Any, _record: Any, _exception: Any) -> None:
        _release(dbapi_connection)

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection: Any, _record: Any) -> None:
        _release(dbapi_connection)

    # These events fire before SQLAlchemy's own DBAPI commit or rollback. Ending the transaction
    # here first lets the lock go only once the file lock is free; SQLAlchemy's call that follows
    # finds no transaction open and does nothing.
    @event.listens_for(engine, "commit")
    def _on_commit(connection: Any) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        try:
            dbapi_connection.commit()
        finally:
            _release(dbapi_connection)

    @event.listens_for(engine, "rollback")
    def _on_rollback(connection: Any) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        try:
            dbapi_connection.rollback()
        finally:
            _release(dbapi_connection)
