"""The database adapter: engine, migrations and the unit of work.

SQLite by default, PostgreSQL when ``DYNAVAL_DATABASE_URL`` says so. On SQLite every transaction
starts with ``BEGIN IMMEDIATE`` so that concurrent writers queue on the file lock instead of
failing half-way; on PostgreSQL candidate rows are locked with ``SELECT ... FOR UPDATE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session, create_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
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

    def ping(self) -> str:
        """``"ok"`` when a trivial query answers, else the error's class name."""
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:  # reported, not raised: health must answer
            return f"unavailable: {type(exc).__name__}"
        return "ok"

    def dispose(self) -> None:
        self.engine.dispose()


def _make_sqlite_transactions_immediate(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let us emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
