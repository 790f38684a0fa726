"""The rows a repository loaded in its unit of work, kept by key: ``get`` builds a domain object
from a row and keeps the row, ``save`` copies the object back onto that same row, so the session
writes only what changed when the unit of work commits. Row locks are asked for here, once
(``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite has one writer at a time anyway)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlmodel import Session, SQLModel

from dynaval.adapters.db.orm import as_utc

Row = TypeVar("Row", bound=SQLModel)
Object = TypeVar("Object")


def utc(value: datetime | None) -> datetime | None:
    """A stored time with its zone (SQLite hands them back without one), or None."""
    return as_utc(value) if value is not None else None


class IdentityMap(Generic[Row, Object]):
    """Rows of one table loaded by a repository, by key, and the domain objects made of them."""

    def __init__(
        self,
        session: Session,
        row_type: type[Row],
        to_object: Callable[[Row], Object],
        key: Callable[[Row], Hashable],
    ) -> None:
        self.session = session
        self.row_type = row_type
        self._to_object = to_object
        self._key = key
        self._rows: dict[Hashable, Row] = {}

    def keep(self, rows: Iterable[Row]) -> list[Object]:
        """The domain objects of ``rows``, each row kept for a later :meth:`row`."""
        found = []
        for row in rows:
            self._rows[self._key(row)] = row
            found.append(self._to_object(row))
        return found

    def first(self, statement: Any, *, for_update: bool = False) -> Object | None:
        """The object of the first row ``statement`` selects (row-locked with ``for_update``), or None."""
        row = self.session.exec(statement.with_for_update() if for_update else statement).first()
        return self.keep([row])[0] if row is not None else None

    def remember(self, row: Row) -> None:
        """A row added in this unit of work, for a later :meth:`row`."""
        self._rows[self._key(row)] = row

    def row(self, key: Hashable) -> Row:
        """The row of ``key``: the one loaded or added in this unit of work, else read now."""
        row = self._rows.get(key) or self.session.get(self.row_type, key)
        assert row is not None, f"no {self.row_type.__name__} {key!r}"
        return row
