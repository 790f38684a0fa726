"""dataset_record_columns: each kept record's Parquet values, packed, beside its line

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 00:00:00

The table starts empty: its values come from the record, which a migration does not build (it
needs the service's pseudonym secret). Every kept record is marked stale here instead, and a
round's records are written again, with their columns, by its first export (which brings the
round's stale records up to date first, a page per transaction) or by ``dynaval dataset rebuild``.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_record_columns",
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("columns", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("candidate_id"),
    )
    op.create_index(
        "ix_dataset_record_columns_round_order",
        "dataset_record_columns",
        ["round_id", "submitted_at", "candidate_id"],
    )
    # xact -1: no unit of work's own, so none writes a backlog of millions inside its commit.
    op.execute(
        "INSERT INTO dataset_record_stale (candidate_id, xact) SELECT candidate_id, -1 FROM dataset_record"
    )


def downgrade() -> None:
    op.drop_index("ix_dataset_record_columns_round_order", table_name="dataset_record_columns")
    op.drop_table("dataset_record_columns")
