"""the collector that submitted a candidate for the writer it names

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL for every earlier candidate: their writer_id came from the body, under whatever token,
    # and their pseudonym must stay what it was in the datasets already exported.
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("collected_by", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.drop_column("collected_by")
