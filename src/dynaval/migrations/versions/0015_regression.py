"""the regression suite: registered models, cases, evaluation runs and results, gate runs

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registered_model",
        sa.Column("hash", sa.String(length=80), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("folder", sa.Text(), nullable=False),
        sa.Column("registered_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("shipped", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("shipped_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("shipped_by", sa.String(length=64), nullable=True),
        sa.Column("shipped_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("hash"),
    )
    op.create_table(
        "regression_case",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("split", sa.String(length=40), nullable=False),
        sa.Column("task_type", sa.String(length=40), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("label", sa.String(length=100), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("round_model_prediction", sa.String(length=100), nullable=True),
        sa.Column("added_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("retired_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("retired_by", sa.String(length=64), nullable=True),
        sa.Column("retired_reason", sa.Text(), nullable=True),
        sa.Column("suspect", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("confirmed", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_regression_case_round_id", "regression_case", ["round_id"], unique=False)
    op.create_table(
        "evaluation_run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_hash", sa.String(length=80), nullable=False),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("finished_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("case_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["model_hash"], ["registered_model.hash"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_evaluation_run_model_hash", "evaluation_run", ["model_hash"], unique=False)
    op.create_table(
        "case_result",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(length=36), nullable=False),
        sa.Column("model_hash", sa.String(length=80), nullable=False),
        sa.Column("prediction", sa.String(length=100), nullable=False),
        sa.Column("probabilities", sa.JSON(), nullable=False),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["regression_case.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["evaluation_run.id"]),
        sa.PrimaryKeyConstraint("run_id", "case_id"),
    )
    op.create_index("ix_case_result_case_id", "case_result", ["case_id"], unique=False)
    op.create_index(
        "ix_case_result_model_case", "case_result", ["model_hash", "case_id", "run_id"], unique=False
    )
    op.create_table(
        "gate_run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("candidate_hash", sa.String(length=80), nullable=False),
        sa.Column("baseline", sa.Text(), nullable=False),
        sa.Column("max_flips", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("negative_flips", sa.JSON(), nullable=False),
        sa.Column("positive_flips", sa.Integer(), nullable=False),
        sa.Column("per_round", sa.JSON(), nullable=False),
        sa.Column("mcnemar", sa.JSON(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("gate_run")
    op.drop_index("ix_case_result_model_case", table_name="case_result")
    op.drop_index("ix_case_result_case_id", table_name="case_result")
    op.drop_table("case_result")
    op.drop_index("ix_evaluation_run_model_hash", table_name="evaluation_run")
    op.drop_table("evaluation_run")
    op.drop_index("ix_regression_case_round_id", table_name="regression_case")
    op.drop_table("regression_case")
    op.drop_table("registered_model")
