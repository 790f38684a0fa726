"""near-duplicates at submission: each indexed example's band keys beside its vector, so that every
process can hold them in memory (read in one pass, topped up by ``seq``), instead of a row per key

The keys of the examples indexed before this revision are copied from ``near_duplicate_key``, which
is then dropped: the check counts the keys in memory, and the round's Health reads them from the
examples' rows. A downgrade rebuilds the key rows from the copies.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 01:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

BATCH = 5000


def upgrade() -> None:
    op.add_column("near_duplicate_example", sa.Column("band_keys", sa.LargeBinary(), nullable=True))
    connection = op.get_bind()
    keys = sa.table(
        "near_duplicate_key", sa.column("band_key", sa.BigInteger()), sa.column("candidate_id", sa.String())
    )
    examples = sa.table(
        "near_duplicate_example",
        sa.column("candidate_id", sa.String()),
        sa.column("band_keys", sa.LargeBinary()),
    )
    rows = connection.execute(
        sa.select(keys.c.candidate_id, keys.c.band_key).order_by(keys.c.candidate_id, keys.c.band_key)
    ).all()
    grouped: dict[str, list[int]] = {}
    for candidate_id, band_key in rows:
        grouped.setdefault(candidate_id, []).append(int(band_key))
    update = (
        sa.update(examples)
        .where(examples.c.candidate_id == sa.bindparam("example_id"))
        .values(band_keys=sa.bindparam("stored_keys"))
    )
    items = list(grouped.items())
    for start in range(0, len(items), BATCH):
        connection.execute(
            update,
            [
                {"example_id": candidate_id, "stored_keys": _stored(band_keys)}
                for candidate_id, band_keys in items[start : start + BATCH]
            ],
        )
    op.drop_table("near_duplicate_key")


def _stored(band_keys: list[int]) -> bytes:
    """As :func:`dynaval.domain.health.band_keys.keys_to_bytes` stores them (kept here as it was
    at this revision): sorted, distinct, little-endian int64."""
    return b"".join(key.to_bytes(8, "little", signed=True) for key in sorted(set(band_keys)))


def downgrade() -> None:
    op.create_table(
        "near_duplicate_key",
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("band_key", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.PrimaryKeyConstraint("task_type", "band_key", "candidate_id"),
    )
    connection = op.get_bind()
    examples = sa.table(
        "near_duplicate_example",
        sa.column("candidate_id", sa.String()),
        sa.column("task_type", sa.String()),
        sa.column("band_keys", sa.LargeBinary()),
    )
    keys = sa.table(
        "near_duplicate_key",
        sa.column("task_type", sa.String()),
        sa.column("band_key", sa.BigInteger()),
        sa.column("candidate_id", sa.String()),
    )
    rows = connection.execute(
        sa.select(examples.c.candidate_id, examples.c.task_type, examples.c.band_keys)
    ).all()
    key_rows = [
        {"task_type": task_type, "band_key": key, "candidate_id": candidate_id}
        for candidate_id, task_type, stored in rows
        for key in _keys_of(stored)
    ]
    for start in range(0, len(key_rows), BATCH):
        connection.execute(sa.insert(keys), key_rows[start : start + BATCH])
    with op.batch_alter_table("near_duplicate_example") as batch:
        batch.drop_column("band_keys")


def _keys_of(stored: bytes | None) -> list[int]:
    data = stored or b""
    return [int.from_bytes(data[i : i + 8], "little", signed=True) for i in range(0, len(data), 8)]
