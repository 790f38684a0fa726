"""dataset_record: each accepted example's provenance record, kept as it is decided, and the triggers
that mark a record stale on every change to its candidate, annotations or capture

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 18:00:00

The table starts empty: the records need the service's pseudonym secret, which a migration does not
have. Every accepted candidate is marked stale here instead, and a round's records are written by
its first export (which brings the round's stale records up to date first, a page per transaction)
or by ``dynaval dataset rebuild``: an upgraded service exports the same records as before.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# The candidate's columns a record is built from; an update of others (a push, a read's time)
# leaves the record as it is.
RECORD_COLUMNS = (
    "round_id", "inputs", "writer_label", "rationale", "writer_id", "collected_by", "submitted_at",
    "status", "model_prediction", "model_probabilities", "model_signature", "model_hash", "model_name",
    "fooled", "label_studio_task_id", "decision", "decided_at", "override_outcome", "override_reason",
    "override_by", "override_at",
)  # fmt: skip

_ACCEPTED = (
    "EXISTS (SELECT 1 FROM candidate WHERE candidate.id = {row}.candidate_id "
    "AND candidate.status = 'accepted')"
)


def upgrade() -> None:
    op.create_table(
        "dataset_record",
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("record", sa.LargeBinary(), nullable=False),
        sa.Column("image_inputs", sa.Text(), nullable=True),
        sa.Column("stored_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"]),
        sa.PrimaryKeyConstraint("candidate_id"),
    )
    op.create_index(
        "ix_dataset_record_round_order", "dataset_record", ["round_id", "submitted_at", "candidate_id"]
    )
    op.create_table(
        "dataset_record_stale",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("candidate_id", sa.String(length=36), nullable=False),
        sa.Column("xact", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_dataset_record_stale_candidate_id", "dataset_record_stale", ["candidate_id"])
    op.create_index("ix_dataset_record_stale_xact", "dataset_record_stale", ["xact"])
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_triggers()
    else:
        _postgresql_triggers()
    # The records of what was accepted before, for a round's first export or a rebuild to write
    # (xact -1: no unit of work's own, so none writes a backlog of millions inside its commit).
    op.execute(
        "INSERT INTO dataset_record_stale (candidate_id, xact) "
        "SELECT id, -1 FROM candidate WHERE status = 'accepted'"
    )


def _sqlite_triggers() -> None:
    mark = "INSERT INTO dataset_record_stale (candidate_id) VALUES ({id});"
    columns = ", ".join(RECORD_COLUMNS)
    statements = [
        f"""CREATE TRIGGER dataset_record_candidate_insert AFTER INSERT ON candidate
        WHEN NEW.status = 'accepted' BEGIN {mark.format(id="NEW.id")} END""",
        f"""CREATE TRIGGER dataset_record_candidate_update AFTER UPDATE OF {columns} ON candidate
        WHEN NEW.status = 'accepted' OR OLD.status = 'accepted' BEGIN {mark.format(id="NEW.id")} END""",
        f"""CREATE TRIGGER dataset_record_candidate_delete AFTER DELETE ON candidate
        WHEN OLD.status = 'accepted' BEGIN {mark.format(id="OLD.id")} END""",
    ]
    for table in ("annotation", "capture"):
        statements += [
            f"""CREATE TRIGGER dataset_record_{table}_insert AFTER INSERT ON {table}
            WHEN {_ACCEPTED.format(row="NEW")} BEGIN {mark.format(id="NEW.candidate_id")} END""",
            f"""CREATE TRIGGER dataset_record_{table}_update AFTER UPDATE ON {table}
            WHEN {_ACCEPTED.format(row="NEW")} BEGIN {mark.format(id="NEW.candidate_id")} END""",
            f"""CREATE TRIGGER dataset_record_{table}_moved AFTER UPDATE OF candidate_id ON {table}
            WHEN OLD.candidate_id != NEW.candidate_id AND {_ACCEPTED.format(row="OLD")}
            BEGIN {mark.format(id="OLD.candidate_id")} END""",
            f"""CREATE TRIGGER dataset_record_{table}_delete AFTER DELETE ON {table}
            WHEN {_ACCEPTED.format(row="OLD")} BEGIN {mark.format(id="OLD.candidate_id")} END""",
        ]
    for statement in statements:
        op.execute(statement)


def _postgresql_triggers() -> None:
    # Each mark carries its transaction's id, so a unit of work writes (and removes) only its own:
    # two transactions never wait on each other's marks.
    op.execute(
        """
        CREATE FUNCTION dataset_record_mark_candidate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                IF OLD.status = 'accepted' THEN
                    INSERT INTO dataset_record_stale (candidate_id, xact) VALUES (OLD.id, txid_current());
                END IF;
            ELSIF TG_OP = 'INSERT' THEN
                IF NEW.status = 'accepted' THEN
                    INSERT INTO dataset_record_stale (candidate_id, xact) VALUES (NEW.id, txid_current());
                END IF;
            ELSIF NEW.status = 'accepted' OR OLD.status = 'accepted' THEN
                INSERT INTO dataset_record_stale (candidate_id, xact) VALUES (NEW.id, txid_current());
            END IF;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION dataset_record_mark_owner() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP IN ('UPDATE', 'DELETE') AND (TG_OP = 'DELETE' OR OLD.candidate_id <> NEW.candidate_id)
               AND EXISTS (SELECT 1 FROM candidate WHERE id = OLD.candidate_id AND status = 'accepted') THEN
                INSERT INTO dataset_record_stale (candidate_id, xact)
                VALUES (OLD.candidate_id, txid_current());
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE')
               AND EXISTS (SELECT 1 FROM candidate WHERE id = NEW.candidate_id AND status = 'accepted') THEN
                INSERT INTO dataset_record_stale (candidate_id, xact)
                VALUES (NEW.candidate_id, txid_current());
            END IF;
            RETURN NULL;
        END $$
        """
    )
    columns = ", ".join(RECORD_COLUMNS)
    op.execute(
        "CREATE TRIGGER dataset_record_candidate_insert_delete AFTER INSERT OR DELETE ON candidate "
        "FOR EACH ROW EXECUTE FUNCTION dataset_record_mark_candidate()"
    )
    op.execute(
        f"CREATE TRIGGER dataset_record_candidate_update AFTER UPDATE OF {columns} ON candidate "
        "FOR EACH ROW EXECUTE FUNCTION dataset_record_mark_candidate()"
    )
    for table in ("annotation", "capture"):
        op.execute(
            f"CREATE TRIGGER dataset_record_{table} AFTER INSERT OR UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION dataset_record_mark_owner()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("candidate_insert", "candidate_update", "candidate_delete"):
            op.execute(f"DROP TRIGGER IF EXISTS dataset_record_{name}")
        for table in ("annotation", "capture"):
            for when in ("insert", "update", "moved", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS dataset_record_{table}_{when}")
    else:
        op.execute("DROP TRIGGER IF EXISTS dataset_record_candidate_insert_delete ON candidate")
        op.execute("DROP TRIGGER IF EXISTS dataset_record_candidate_update ON candidate")
        for table in ("annotation", "capture"):
            op.execute(f"DROP TRIGGER IF EXISTS dataset_record_{table} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS dataset_record_mark_owner()")
        op.execute("DROP FUNCTION IF EXISTS dataset_record_mark_candidate()")
    op.drop_index("ix_dataset_record_stale_xact", table_name="dataset_record_stale")
    op.drop_index("ix_dataset_record_stale_candidate_id", table_name="dataset_record_stale")
    op.drop_table("dataset_record_stale")
    op.drop_index("ix_dataset_record_round_order", table_name="dataset_record")
    op.drop_table("dataset_record")
