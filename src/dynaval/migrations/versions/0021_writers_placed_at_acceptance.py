"""writers placed at their first accepted example: a writer's kind may come before any release

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("writer_split") as batch:
        batch.alter_column("release_id", existing_type=sa.Integer(), nullable=True)
        batch.add_column(
            sa.Column("placed_by", sa.String(length=16), nullable=False, server_default="release")
        )


def downgrade() -> None:
    op.execute("DELETE FROM writer_split WHERE release_id IS NULL")
    with op.batch_alter_table("writer_split") as batch:
        batch.drop_column("placed_by")
        batch.alter_column("release_id", existing_type=sa.Integer(), nullable=False)
