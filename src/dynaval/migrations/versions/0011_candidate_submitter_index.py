"""an index for a writer's own candidates in a round (the writer's page)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 11:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_candidate_round_submitter",
        "candidate",
        ["round_id", "submitted_by", "submitted_at", "id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_candidate_round_submitter", table_name="candidate")
