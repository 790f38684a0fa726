"""releases: their manifests, where each example went, and each writer's sticky split kind

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "release",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("round_ids", sa.JSON(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("content_hash", sa.String(length=80), nullable=False),
        sa.Column("folder", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["release.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_release_name_version"),
    )
    op.create_index("ix_release_task_type", "release", ["task_type"], unique=False)
    op.create_table(
        "release_example",
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("example_id", sa.String(length=36), nullable=False),
        sa.Column("split", sa.String(length=40), nullable=True),
        sa.Column("withheld_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["release_id"], ["release.id"]),
        sa.PrimaryKeyConstraint("release_id", "example_id"),
    )
    op.create_table(
        "writer_split",
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("writer", sa.String(length=80), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("assigned_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["release_id"], ["release.id"]),
        sa.PrimaryKeyConstraint("task_type", "writer"),
    )


def downgrade() -> None:
    op.drop_table("writer_split")
    op.drop_table("release_example")
    op.drop_index("ix_release_task_type", table_name="release")
    op.drop_table("release")
