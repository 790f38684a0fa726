"""the name of the token each candidate was submitted with

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 10:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Candidates from before this revision keep NULL: no writer reads them, a lead reads them all.
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("submitted_by", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("candidate", schema=None) as batch_op:
        batch_op.drop_column("submitted_by")
