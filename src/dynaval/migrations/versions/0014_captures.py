"""failure captures: a round's kind, and each capture's provenance beside its candidate

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("round") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=16), nullable=False, server_default="adversarial")
        )
    op.create_table(
        "capture",
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("observed_output", sa.Text(), nullable=False),
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("model_version", sa.String(length=200), nullable=False),
        sa.Column("observed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("reference", sa.String(length=200), nullable=True),
        sa.Column("reporter", sa.String(length=64), nullable=False),
        sa.Column("reported_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("candidate_id"),
    )
    op.create_index(
        "uq_capture_round_reference",
        "capture",
        ["round_id", "reference"],
        unique=True,
        sqlite_where=sa.text("reference IS NOT NULL"),
        postgresql_where=sa.text("reference IS NOT NULL"),
    )
    op.create_index("ix_capture_round_source", "capture", ["round_id", "source"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_capture_round_source", table_name="capture")
    op.drop_index("uq_capture_round_reference", table_name="capture")
    op.drop_table("capture")
    with op.batch_alter_table("round") as batch:
        batch.drop_column("kind")
