"""the writer's rationale: why they think the model is wrong (optional)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL for every earlier candidate: none was asked for a rationale.
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rationale", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.drop_column("rationale")
