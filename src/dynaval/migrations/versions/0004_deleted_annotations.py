"""deleted annotation ids (webhooks arrive in any order), push backoff

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 10:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deleted_annotation",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("deleted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_deleted_annotation_round_id"), "deleted_annotation", ["round_id"], unique=False)
    with op.batch_alter_table("round") as batch:
        batch.add_column(sa.Column("push_failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("push_retry_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("round") as batch:
        batch.drop_column("push_retry_at")
        batch.drop_column("push_failures")
    op.drop_index(op.f("ix_deleted_annotation_round_id"), table_name="deleted_annotation")
    op.drop_table("deleted_annotation")
