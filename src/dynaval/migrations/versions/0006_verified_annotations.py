"""tasks waiting to be read back from Label Studio; no more deletion tombstones

A webhook is now only a hint that a task changed: the task waits in ``task_check`` until the
service reads it back from Label Studio with its own key. Each candidate and gold item records
when the copy of Label Studio it holds was read (``label_studio_read_at``), so an older read never
overwrites a newer one. Remembered deletions (``deleted_annotation``) came from webhook content and
are dropped: what Label Studio no longer has is gone, whatever a payload said.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_check",
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("requested_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("task_id"),
    )
    op.create_index("ix_task_check_round_requested", "task_check", ["round_id", "requested_at"], unique=False)
    with op.batch_alter_table("candidate") as batch:
        batch.add_column(
            sa.Column("label_studio_read_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    with op.batch_alter_table("gold_item") as batch:
        batch.add_column(
            sa.Column("label_studio_read_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    op.drop_index(op.f("ix_deleted_annotation_round_id"), table_name="deleted_annotation")
    op.drop_table("deleted_annotation")


def downgrade() -> None:
    op.create_table(
        "deleted_annotation",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("deleted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_deleted_annotation_round_id"), "deleted_annotation", ["round_id"], unique=False)
    with op.batch_alter_table("gold_item") as batch:
        batch.drop_column("label_studio_read_at")
    with op.batch_alter_table("candidate") as batch:
        batch.drop_column("label_studio_read_at")
    op.drop_index("ix_task_check_round_requested", table_name="task_check")
    op.drop_table("task_check")
