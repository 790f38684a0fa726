"""candidate.model_hash and model_name: the model that scored each candidate (a retraining policy's
swap replaces an open round's model; the candidates scored before keep theirs)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ALTER TABLE (SQLite 3.35 and later drops a column too): a batch's copy of the table
    # would have to drop the one that annotations and near-duplicate rows point to.
    op.add_column("candidate", sa.Column("model_hash", sa.String(length=80), nullable=True))
    op.add_column("candidate", sa.Column("model_name", sa.String(length=200), nullable=True))
    # Every candidate scored so far was scored by its round's model: no round's model changed yet.
    op.execute(
        "UPDATE candidate SET "
        "model_hash = (SELECT round.model_hash FROM round WHERE round.id = candidate.round_id), "
        "model_name = (SELECT round.model_name FROM round WHERE round.id = candidate.round_id) "
        "WHERE model_prediction IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_column("candidate", "model_name")
    op.drop_column("candidate", "model_hash")
