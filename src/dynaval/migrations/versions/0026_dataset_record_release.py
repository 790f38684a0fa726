"""dataset_record_release: each kept record's release line, beside its line and Parquet values

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 12:00:00

The table starts empty: a release line is made from the record, which a migration does not build
(it needs the service's pseudonym secret). Every kept record is marked stale here instead, as 0025
did, and a round's records are written again, with their release lines, by its first export or
release (each brings the round's stale records up to date first, a page per transaction) or by
``dynaval dataset rebuild``. Until then a release build makes the round's rows from its records.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_record_release",
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("line", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("candidate_id"),
    )
    op.create_index(
        "ix_dataset_record_release_round_order",
        "dataset_record_release",
        ["round_id", "submitted_at", "candidate_id"],
    )
    # xact -1: no unit of work's own, so none writes a backlog of millions inside its commit. A
    # record marked already (by 0025, in the same upgrade) is not marked twice.
    op.execute(
        "INSERT INTO dataset_record_stale (candidate_id, xact)"
        " SELECT candidate_id, -1 FROM dataset_record AS kept WHERE NOT EXISTS"
        " (SELECT 1 FROM dataset_record_stale AS marked WHERE marked.candidate_id = kept.candidate_id)"
    )


def downgrade() -> None:
    op.drop_index("ix_dataset_record_release_round_order", table_name="dataset_record_release")
    op.drop_table("dataset_record_release")
