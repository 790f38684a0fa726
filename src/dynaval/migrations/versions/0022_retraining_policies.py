"""retraining policies (per task type: retrain after every N newly accepted examples), their audit
log, and the examples their runs trained on

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "retraining_policy",
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("every", sa.Integer(), nullable=True),
        sa.Column("ship", sa.String(length=16), nullable=False),
        sa.Column("min_interval_s", sa.Integer(), nullable=False),
        sa.Column("base", sa.String(length=16), nullable=False),
        sa.Column("max_flips", sa.Integer(), nullable=False),
        sa.Column("training", sa.JSON(), nullable=False),
        sa.Column("counted_from", sa.Integer(), nullable=False),
        sa.Column("last_run_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("task_type"),
    )
    op.create_table(
        "retraining_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("step", sa.String(length=20), nullable=False),
        sa.Column("by", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_retraining_event_task_type", "retraining_event", ["task_type"], unique=False)
    op.create_table(
        "trained_example",
        sa.Column("example_id", sa.String(length=36), nullable=False),
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("model_hash", sa.String(length=80), nullable=False),
        sa.Column("trained_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("example_id"),
    )
    op.create_index("ix_trained_example_task_type", "trained_example", ["task_type"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_trained_example_task_type", table_name="trained_example")
    op.drop_table("trained_example")
    op.drop_index("ix_retraining_event_task_type", table_name="retraining_event")
    op.drop_table("retraining_event")
    op.drop_table("retraining_policy")
