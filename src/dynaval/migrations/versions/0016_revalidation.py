"""re-validation of suspect regression cases: the link from a case to its revalidation candidate

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "revalidation",
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("case_id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("sent_by", sa.String(length=64), nullable=False),
        sa.Column("sent_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("settled_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"]),
        sa.ForeignKeyConstraint(["case_id"], ["regression_case.id"]),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("candidate_id"),
    )
    op.create_index("ix_revalidation_case_id", "revalidation", ["case_id"], unique=False)
    op.create_index("ix_revalidation_round_id", "revalidation", ["round_id"], unique=False)
    op.create_index(
        "uq_revalidation_open_case",
        "revalidation",
        ["case_id"],
        unique=True,
        sqlite_where=sa.text("settled_at IS NULL"),
        postgresql_where=sa.text("settled_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_revalidation_open_case", table_name="revalidation")
    op.drop_index("ix_revalidation_round_id", table_name="revalidation")
    op.drop_index("ix_revalidation_case_id", table_name="revalidation")
    op.drop_table("revalidation")
