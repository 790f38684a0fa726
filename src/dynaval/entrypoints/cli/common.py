"""What every ``dynaval`` command shares: its error, the settings and services it opens, the
operator's name for the audit log, a progress bar, and reading a JSONL file as the API reads a body."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

EXIT_USAGE = 2


class CommandError(Exception):
    """A failure the user can fix; the message says how."""


def load_settings(*, uses_secrets: bool = True) -> Any:
    """The settings from the environment. A command that uses no secret does not require them."""
    from dynaval.settings import Settings

    try:
        return Settings() if uses_secrets else Settings(development=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise CommandError(f"configuration: {problems}") from None


def open_services(*, migrate: bool = True) -> Any:
    from dynaval.bootstrap import bootstrap

    return bootstrap(load_settings(), migrate=migrate)


@dataclass
class StorageServices:
    """The settings, the database and the round dataset's reads on it, nothing more (see
    :func:`open_storage`)."""

    settings: Any
    database: Any
    dataset_reads: Any

    def close(self) -> None:
        self.database.dispose()


def open_storage() -> StorageServices:
    """For a command that only reads the database (an export): the whole service would import the
    Label Studio client, the model registry and the task queue (about 2 s and 100 MB) for nothing."""
    from dynaval.adapters.db.database import Database
    from dynaval.adapters.db.dataset_query import DatasetQuery

    settings = load_settings()
    database = Database(settings.resolved_database_url)
    try:
        database.migrate()
    except BaseException:
        database.dispose()
        raise
    return StorageServices(settings=settings, database=database, dataset_reads=DatasetQuery(database))


def progress_bar(total: int | None, unit: str, description: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=description, file=sys.stderr, dynamic_ncols=True)


class StepBars:
    """A progress bar (on stderr, when it is a terminal) per step of long work: a training's epochs,
    a release's rows. Told as a job's reporter is (``step``, ``advance``); ``close`` at the end."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._shown = sys.stderr.isatty()

    def step(self, name: str, total: int | None = None) -> None:
        self.close()
        if self._shown:
            self._bar = progress_bar(total, "it", name)

    def advance(self, done: int, total: int | None = None) -> None:
        if self._bar is not None:
            if total is not None:
                self._bar.total = total
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def operator_name() -> str:
    """Who runs a command, for the audit log: the system user behind the shell."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """Each JSON value of a JSONL file, with its line number (blank lines are skipped)."""
    from dynaval.entrypoints.guards import json_problem, load_json

    items = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = load_json(line)
                except ValueError:
                    raise CommandError(
                        f"{path}:{number}: not JSON; each line must be one JSON object"
                    ) from None
                # What the API's guard refuses in a body (a repeated key, text no database stores).
                if (problem := json_problem(value)) is not None:
                    where, says = problem
                    raise CommandError(f"{path}:{number}: {where} {says}")
                items.append((number, value))
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not UTF-8 text") from None
    return items
