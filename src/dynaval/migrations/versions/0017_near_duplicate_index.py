"""near-duplicates at submission: the shared index (examples, MinHash LSH band keys) and each
flagged or recorded candidate's matches

The index starts empty: ``dynaval near-duplicates reindex`` fills it from the candidates stored
before this revision (see docs/near_duplicates.md).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 16:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "near_duplicate_example",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("candidate_id"),
    )
    op.create_index(
        "ix_near_duplicate_example_task_seq", "near_duplicate_example", ["task_type", "seq"], unique=False
    )
    op.create_table(
        "near_duplicate_key",
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("band_key", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.PrimaryKeyConstraint("task_type", "band_key", "candidate_id"),
    )
    op.create_table(
        "near_duplicate_check",
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("matches", sa.JSON(), nullable=False),
        sa.Column("checked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("candidate_id"),
    )
    op.create_index(
        "ix_near_duplicate_check_round_flagged", "near_duplicate_check", ["round_id", "flagged"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_near_duplicate_check_round_flagged", table_name="near_duplicate_check")
    op.drop_table("near_duplicate_check")
    op.drop_table("near_duplicate_key")
    op.drop_index("ix_near_duplicate_example_task_seq", table_name="near_duplicate_example")
    op.drop_table("near_duplicate_example")
