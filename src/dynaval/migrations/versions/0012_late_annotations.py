"""annotations read after their round was frozen are kept, marked late, and never counted

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("annotation") as batch:
        batch.add_column(sa.Column("late", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("annotation") as batch:
        batch.drop_column("late")
