"""near-duplicates: on SQLite, an indexed example's ``seq`` is never handed out twice

``reindex`` writes an example's row again, under a new ``seq``, when it gives it its vector, and
running processes top up with the rows after the last ``seq`` they read. Without AUTOINCREMENT,
SQLite hands a deleted top row's number out again, so the rewritten newest rows kept their old
numbers and no running process saw their vectors. PostgreSQL's sequence never reuses a number:
nothing changes there.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 16:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def _autoincrement(on: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # The table is made again with the same columns, keys and indexes, and its rows copied with
    # their numbers; SQLite then counts on from the largest.
    with op.batch_alter_table(
        "near_duplicate_example", recreate="always", table_kwargs={"sqlite_autoincrement": on}
    ):
        pass


def upgrade() -> None:
    _autoincrement(True)


def downgrade() -> None:
    _autoincrement(False)
