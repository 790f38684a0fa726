"""the lead's dashboard sessions, kept on the server (revocable, with a lifetime and idle timeout)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dashboard_session",
        sa.Column("id_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("lead", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("token_fingerprint", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_seen_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("expires_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id_hash"),
    )
    # Until this revision the session lived in a signed cookie: those cookies now name no session,
    # so every lead signs in once more.
    op.create_index(
        op.f("ix_dashboard_session_expires_at"), "dashboard_session", ["expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_dashboard_session_expires_at"), table_name="dashboard_session")
    op.drop_table("dashboard_session")
