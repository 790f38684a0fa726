"""when a round was frozen (its decisions final)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("round") as batch:
        batch.add_column(sa.Column("frozen_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("round") as batch:
        batch.drop_column("frozen_at")
