"""The releases' storage: releases (never updated once stored), where each put every example, and
each writer's sticky split kind per task type."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import insert
from sqlmodel import Session, col, select

from dynaval.adapters.db.database import MAX_SERIAL_ID
from dynaval.adapters.db.orm import ReleaseExampleRow, ReleaseRow, WriterSplitRow, as_utc
from dynaval.domain.errors import NotFound
from dynaval.domain.releases.release import Release, SplitKind
from dynaval.domain.releases.splits import FixedPlace

INSERT_CHUNK = 5_000


def _release(row: ReleaseRow) -> Release:
    return Release(
        id=row.id,
        name=row.name,
        version=row.version,
        task_type=row.task_type,
        round_ids=list(row.round_ids),
        manifest=dict(row.manifest),
        content_hash=row.content_hash,
        folder=row.folder,
        created_by=row.created_by,
        parent_id=row.parent_id,
        created_at=as_utc(row.created_at),
    )


class SqlReleaseRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, release: Release, *, at: datetime) -> Release:
        row = ReleaseRow(
            name=release.name,
            version=release.version,
            task_type=release.task_type,
            parent_id=release.parent_id,
            round_ids=list(release.round_ids),
            manifest=release.manifest,
            content_hash=release.content_hash,
            folder=release.folder,
            created_by=release.created_by,
            created_at=at,
        )
        self._session.add(row)
        self._session.flush()
        return _release(row)

    def get(self, release_id: int) -> Release:
        # A larger id names no row; asking PostgreSQL for it would be an overflow error, not a 404.
        row = self._session.get(ReleaseRow, release_id) if 0 < release_id <= MAX_SERIAL_ID else None
        if row is None:
            raise NotFound(f"release {release_id} does not exist", field="release_id")
        return _release(row)

    def find(self, name: str, version: str) -> Release | None:
        row = self._session.exec(
            select(ReleaseRow).where(ReleaseRow.name == name, ReleaseRow.version == version)
        ).first()
        return None if row is None else _release(row)

    def all(self, task_type: str | None = None) -> list[Release]:
        query = select(ReleaseRow).order_by(col(ReleaseRow.id))
        if task_type is not None:
            query = query.where(ReleaseRow.task_type == task_type)
        return [_release(row) for row in self._session.exec(query).all()]

    def writer_kinds(self, task_type: str) -> dict[str, SplitKind]:
        rows = self._session.exec(
            select(WriterSplitRow.writer, WriterSplitRow.kind).where(WriterSplitRow.task_type == task_type)
        ).all()
        return {writer: SplitKind(kind) for writer, kind in rows}

    def places(self, release_id: int) -> dict[str, FixedPlace]:
        rows = self._session.exec(
            select(
                ReleaseExampleRow.example_id, ReleaseExampleRow.split, ReleaseExampleRow.withheld_reason
            ).where(ReleaseExampleRow.release_id == release_id)
        ).all()
        return {example_id: FixedPlace(split, reason) for example_id, split, reason in rows}

    def add_places(self, release_id: int, splits: Mapping[str, str], withheld: Mapping[str, str]) -> None:
        # In key order: the primary key's B-tree then grows at its end instead of taking random
        # example ids all over its pages (a million such inserts into SQLite alone: 4.8 s in random
        # order, 1.8 s sorted; no change showed in a whole build's storing, see docs/benchmarks.md).
        places = ((e, splits.get(e), withheld.get(e)) for e in sorted(itertools.chain(splits, withheld)))
        # A chunk of rows at a time, as plain Core inserts: a million places are never all built as
        # dicts at once, and skip the ORM's per-row bookkeeping.
        connection = self._session.connection()
        statement = insert(ReleaseExampleRow.__table__)  # type: ignore[attr-defined]
        while chunk := list(itertools.islice(places, INSERT_CHUNK)):
            connection.execute(
                statement,
                [
                    {"release_id": release_id, "example_id": e, "split": s, "withheld_reason": r}
                    for e, s, r in chunk
                ],
            )

    def assign_writers(
        self, task_type: str, kinds: Mapping[str, SplitKind], *, release_id: int, at: datetime
    ) -> None:
        self._add_writers(task_type, kinds, release_id=release_id, at=at)

    def place_writers(self, task_type: str, kinds: Mapping[str, SplitKind], *, at: datetime) -> None:
        self._add_writers(task_type, kinds, release_id=None, at=at)

    def _add_writers(
        self, task_type: str, kinds: Mapping[str, SplitKind], *, release_id: int | None, at: datetime
    ) -> None:
        rows = [
            {
                "task_type": task_type,
                "writer": w,
                "kind": k.value,
                "release_id": release_id,
                "placed_by": "release" if release_id is not None else "acceptance",
                "assigned_at": at,
            }
            for w, k in sorted(kinds.items())
        ]
        for start in range(0, len(rows), INSERT_CHUNK):
            self._session.execute(insert(WriterSplitRow), rows[start : start + INSERT_CHUNK])
