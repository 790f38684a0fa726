"""Database tables (SQLModel). Alembic migrations in ``dynaval/migrations`` create them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, LargeBinary, Text, UniqueConstraint, text
from sqlalchemy import false as sa_false
from sqlmodel import Field, SQLModel

from dynaval.domain.clock import utcnow

__all__ = ["utcnow"]  # one clock for the domain and the tables; adapters import it from here


def as_utc(value: datetime) -> datetime:
    """SQLite hands datetimes back without a zone; they were stored as UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class RoundRow(SQLModel, table=True):
    __tablename__ = "round"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=200)
    task_type: str = Field(max_length=40)
    state: str = Field(default="open", max_length=16)
    model_dir: str = Field(sa_column=Column(Text, nullable=False))
    model_name: str = Field(max_length=200)
    model_hash: str = Field(max_length=80)
    labels: list[str] = Field(sa_column=Column(JSON, nullable=False))
    policy: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    label_studio_project_id: int | None = Field(default=None, sa_type=BigInteger)
    label_studio_webhook_id: int | None = Field(default=None, sa_type=BigInteger)
    push_lease_until: datetime | None = None
    push_failures: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    """Pushes in a row that Label Studio failed; the next waits ``push_retry_base_s * 2**(n-1)``."""
    push_retry_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    closed_at: datetime | None = None
    frozen_at: datetime | None = None
    kind: str = Field(
        default="adversarial", max_length=16, sa_column_kwargs={"server_default": "adversarial"}
    )
    """``adversarial`` (writers fool the pinned model) or ``capture`` (reported production failures;
    no model: ``model_dir``, ``model_name`` and ``model_hash`` are empty)."""


class CandidateRow(SQLModel, table=True):
    __tablename__ = "candidate"
    __table_args__ = (
        # The counts by status (the round's figures) read this index alone.
        Index("ix_candidate_round_status_fooled", "round_id", "status", "fooled"),
        # The lead's decision queue pages a round in (submitted_at, id) order, all or by status;
        # the status in the second index lets it skip rows without reading the table.
        Index("ix_candidate_round_status_submitted", "round_id", "status", "submitted_at", "id"),
        Index("ix_candidate_round_submitted", "round_id", "submitted_at", "id", "status"),
        # A writer's own candidates in a round (the writer's page), newest first, and their counts.
        Index("ix_candidate_round_submitter", "round_id", "submitted_by", "submitted_at", "id"),
        UniqueConstraint("label_studio_task_id", name="uq_candidate_ls_task"),
    )

    id: str = Field(primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id", index=True)
    inputs: dict[str, str] = Field(sa_column=Column(JSON, nullable=False))
    writer_label: str = Field(max_length=100)
    writer_id: str = Field(max_length=200)
    """Who wrote it: the submitting token's name, or the writer a collector named."""
    submitted_by: str | None = Field(default=None, max_length=64)
    """The name of the token the candidate came with (a writer's, a collector's or a lead's); NULL
    for older candidates. A writer or collector reads back only what came under its name."""
    collected_by: str | None = Field(default=None, max_length=64)
    # Why the writer thinks the model is wrong (ANLI's "reason"); leads see it, validators never.
    rationale: str | None = Field(default=None, sa_column=Column(Text))
    """The collector's name when a collector submitted it for the writer ``writer_id`` names; NULL
    when the writer's own token (or a lead's) did, and for candidates from before collectors."""
    status: str = Field(max_length=20)
    model_prediction: str | None = Field(default=None, max_length=100)
    model_probabilities: dict[str, float] | None = Field(default=None, sa_column=Column(JSON))
    model_signature: str | None = Field(default=None, max_length=80)
    model_hash: str | None = Field(default=None, max_length=80)
    """The model that scored it (its round's when scored; a swap replaces the round's later)."""
    model_name: str | None = Field(default=None, max_length=200)
    fooled: bool | None = None
    submitted_at: datetime = Field(default_factory=utcnow)
    scored_at: datetime | None = None
    push_attempted_at: datetime | None = None
    pushed_at: datetime | None = None
    label_studio_task_id: int | None = Field(default=None, sa_type=BigInteger)
    wanted_votes: int = 0
    label_studio_overlap: int = 0
    decision: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    decided_at: datetime | None = None
    version: int = 0
    override_outcome: str | None = Field(default=None, max_length=20)
    """A lead's outcome (``accepted`` or ``rejected``); while set, vote changes leave the status alone."""
    override_reason: str | None = Field(default=None, sa_column=Column(Text))
    override_by: str | None = Field(default=None, max_length=64)
    override_at: datetime | None = None
    label_studio_read_at: datetime | None = None
    """When the copy of Label Studio's annotations that this candidate holds was read (the start of
    the read); an older read is never applied over it."""


class CaptureRow(SQLModel, table=True):
    """A failure capture's provenance, beside the candidate it is validated as (same id).

    A table of its own rather than columns on ``candidate``: the candidate table is the busy one
    (every push, vote and export reads it) and most of its rows are writers' candidates, which have
    none of these fields; and the rule that a reporter's ``reference`` names one capture per round
    is an index on this table alone. The reported label is the candidate's ``writer_label`` (it
    plays the writer's label's part in the decision), the reporter its ``submitted_by``."""

    __tablename__ = "capture"
    __table_args__ = (
        # A reference names one capture per round, whoever reports it at the same moment.
        Index(
            "uq_capture_round_reference",
            "round_id",
            "reference",
            unique=True,
            sqlite_where=text("reference IS NOT NULL"),
            postgresql_where=text("reference IS NOT NULL"),
        ),
        Index("ix_capture_round_source", "round_id", "source"),
    )

    candidate_id: str = Field(foreign_key="candidate.id", primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id")
    source: str = Field(max_length=16)
    observed_output: str = Field(sa_column=Column(Text, nullable=False))
    model_name: str = Field(max_length=200)
    model_version: str = Field(max_length=200)
    observed_at: datetime
    reference: str | None = Field(default=None, max_length=200)
    reporter: str = Field(max_length=64)
    reported_at: datetime = Field(default_factory=utcnow)


class AnnotationRow(SQLModel, table=True):
    """One Label Studio annotation as the service read it back from Label Studio with its own key
    (never from a webhook's content). Votes are derived from these rows."""

    __tablename__ = "annotation"
    # The dashboard's cache of round figures is keyed by the count and the latest of these per round.
    __table_args__ = (Index("ix_annotation_round_received", "round_id", "received_at"),)

    id: int = Field(primary_key=True, sa_type=BigInteger)
    candidate_id: str = Field(foreign_key="candidate.id", index=True, max_length=36)
    round_id: int = Field(foreign_key="round.id", index=True)
    annotator_id: str = Field(max_length=64)
    label: str | None = Field(default=None, max_length=100)
    flagged: bool = False
    flag_reason: str | None = Field(default=None, sa_column=Column(Text))
    was_cancelled: bool = False
    lead_time_s: float | None = None
    created_at: datetime
    updated_at: datetime
    received_at: datetime = Field(default_factory=utcnow)
    source: str = Field(default="reconcile", max_length=16)
    """Which read stored it: ``verification`` (a task a webhook named) or ``reconcile`` (every task)."""
    late: bool = Field(default=False, sa_column_kwargs={"server_default": sa_false()})
    """Read after its round was frozen: stored and shown, never counted (no vote, no decision)."""


class TaskCheckRow(SQLModel, table=True):
    """A Label Studio task whose annotations must be read back from Label Studio.

    A webhook only says that a task changed; its content is never stored. The task waits here until
    the service reads it with its own key (one row per task however many webhooks came). A read
    that started after ``requested_at`` settles the request; a webhook that arrives during a read
    keeps its row, so the task is read again.
    """

    __tablename__ = "task_check"
    __table_args__ = (Index("ix_task_check_round_requested", "round_id", "requested_at"),)

    task_id: int = Field(primary_key=True, sa_type=BigInteger)
    round_id: int = Field(foreign_key="round.id")
    requested_at: datetime = Field(default_factory=utcnow)


class DecisionRow(SQLModel, table=True):
    """History: every decision ever made for a candidate, with the votes it was made from."""

    __tablename__ = "decision"

    id: int | None = Field(default=None, primary_key=True)
    candidate_id: str = Field(foreign_key="candidate.id", index=True, max_length=36)
    outcome: str = Field(max_length=20)
    rule_version: str = Field(max_length=40)
    policy: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    ballots: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    figures: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    cause: str = Field(max_length=20)
    made_at: datetime = Field(default_factory=utcnow)


class GoldItemRow(SQLModel, table=True):
    """An item with a known label, mixed into a round's Label Studio project to check annotators.

    Its task looks exactly like a candidate's (``candidate_id`` and the text), so annotators cannot
    tell them apart.
    """

    __tablename__ = "gold_item"
    __table_args__ = (UniqueConstraint("label_studio_task_id", name="uq_gold_item_ls_task"),)

    id: str = Field(primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id", index=True)
    inputs: dict[str, str] = Field(sa_column=Column(JSON, nullable=False))
    label: str = Field(max_length=100)
    created_at: datetime = Field(default_factory=utcnow)
    push_attempted_at: datetime | None = None
    pushed_at: datetime | None = None
    label_studio_task_id: int | None = Field(default=None, sa_type=BigInteger)
    label_studio_read_at: datetime | None = None
    """As :attr:`CandidateRow.label_studio_read_at`, for the item's gold answers."""


class GoldAnswerRow(SQLModel, table=True):
    """One Label Studio annotation of a gold item (kept apart from candidate annotations)."""

    __tablename__ = "gold_answer"

    id: int = Field(primary_key=True, sa_type=BigInteger)
    gold_item_id: str = Field(foreign_key="gold_item.id", index=True, max_length=36)
    round_id: int = Field(foreign_key="round.id", index=True)
    annotator_id: str = Field(max_length=64)
    label: str | None = Field(default=None, max_length=100)
    was_cancelled: bool = False
    updated_at: datetime
    received_at: datetime = Field(default_factory=utcnow)


class AnnotatorStatusRow(SQLModel, table=True):
    """Whether an annotator's votes count in a round; changed by the gold rule or by a lead."""

    __tablename__ = "annotator_status"

    round_id: int = Field(foreign_key="round.id", primary_key=True)
    annotator_id: str = Field(primary_key=True, max_length=64)
    excluded: bool = False
    decided_by: str = Field(max_length=16)
    """``gold`` (the automatic rule) or ``lead`` (a lead's decision, which the rule then leaves alone)."""
    reason: str = Field(sa_column=Column(Text, nullable=False))
    changed_at: datetime = Field(default_factory=utcnow)


class ExclusionEventRow(SQLModel, table=True):
    """The log of every exclusion and reinstatement: who, when, why, and the gold figures then."""

    __tablename__ = "exclusion_event"

    id: int | None = Field(default=None, primary_key=True)
    round_id: int = Field(foreign_key="round.id", index=True)
    annotator_id: str = Field(max_length=64)
    excluded: bool
    decided_by: str = Field(max_length=16)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    gold_correct: int
    gold_total: int
    decisions_changed: int = 0
    made_at: datetime = Field(default_factory=utcnow)


class AuditEventRow(SQLModel, table=True):
    """The audit log of what leads did to candidates (overrides): who, when, why, status before and after."""

    __tablename__ = "audit_event"

    id: int | None = Field(default=None, primary_key=True)
    round_id: int = Field(foreign_key="round.id", index=True)
    candidate_id: str = Field(foreign_key="candidate.id", index=True, max_length=36)
    action: str = Field(max_length=40)
    by: str = Field(max_length=64)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    status_before: str = Field(max_length=20)
    status_after: str = Field(max_length=20)
    at: datetime = Field(default_factory=utcnow)


class DashboardSessionRow(SQLModel, table=True):
    """A lead's dashboard session. The browser's cookie holds a random id; this row holds only its
    SHA-256, so whoever reads the table (a backup, a log of statements) cannot use a session."""

    __tablename__ = "dashboard_session"

    id_hash: str = Field(primary_key=True, max_length=64)
    lead: str = Field(max_length=64)
    """The name the lead's token was configured under at the login (for operators)."""
    token_fingerprint: str = Field(max_length=64)
    """HMAC of the lead's token under the session key: the session holds while a configured lead
    token still has this fingerprint, so removing the token from the configuration ends it."""
    created_at: datetime = Field(default_factory=utcnow)
    last_seen_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)
    revoked_at: datetime | None = None
    """Set by the logout: the id is refused from then on, wherever it was copied to."""


class ReleaseRow(SQLModel, table=True):
    """A release: its manifest and where its files are kept. Never updated once inserted."""

    __tablename__ = "release"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_release_name_version"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=80)
    version: str = Field(max_length=64)
    task_type: str = Field(max_length=40, index=True)
    parent_id: int | None = Field(default=None, foreign_key="release.id")
    round_ids: list[int] = Field(sa_column=Column(JSON, nullable=False))
    manifest: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    content_hash: str = Field(max_length=80)
    folder: str = Field(sa_column=Column(Text, nullable=False))
    created_by: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow)


class ReleaseExampleRow(SQLModel, table=True):
    """Where a release put each accepted example of its rounds: a split, or withheld with a reason."""

    __tablename__ = "release_example"

    release_id: int = Field(foreign_key="release.id", primary_key=True)
    example_id: str = Field(primary_key=True, max_length=36)
    split: str | None = Field(default=None, max_length=40)
    withheld_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class WriterSplitRow(SQLModel, table=True):
    """A writer's split kind for a task type (train, dev or test): decided once, by the release that
    first placed them or at their first accepted example (``placed_by`` ``acceptance``, no release),
    and kept by every later release. The writer is their pseudonym."""

    __tablename__ = "writer_split"

    task_type: str = Field(primary_key=True, max_length=40)
    writer: str = Field(primary_key=True, max_length=80)
    kind: str = Field(max_length=8)
    release_id: int | None = Field(default=None, foreign_key="release.id")
    placed_by: str = Field(default="release", max_length=16, sa_column_kwargs={"server_default": "release"})
    assigned_at: datetime = Field(default_factory=utcnow)


class RegisteredModelRow(SQLModel, table=True):
    """A model known by the content hash of its folder; a lead may mark it shipped (once, logged)."""

    __tablename__ = "registered_model"

    hash: str = Field(primary_key=True, max_length=80)
    name: str = Field(max_length=200)
    folder: str = Field(sa_column=Column(Text, nullable=False))
    registered_at: datetime = Field(default_factory=utcnow)
    shipped: bool = Field(default=False, sa_column_kwargs={"server_default": sa_false()})
    shipped_at: datetime | None = None
    shipped_by: str | None = Field(default=None, max_length=64)
    shipped_reason: str | None = Field(default=None, sa_column=Column(Text))


class RegressionCaseRow(SQLModel, table=True):
    """A case of the regression suite; its id is the candidate's (or capture's) it came from. The
    suite only grows: a case leaves it only when a lead retires it (who, when, why stay here)."""

    __tablename__ = "regression_case"

    id: str = Field(primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id", index=True)
    split: str = Field(max_length=40)
    task_type: str = Field(max_length=40)
    inputs: dict[str, str] = Field(sa_column=Column(JSON, nullable=False))
    label: str = Field(max_length=100)
    source: str = Field(max_length=200)
    round_model_prediction: str | None = Field(default=None, max_length=100)
    added_at: datetime = Field(default_factory=utcnow)
    retired_at: datetime | None = None
    retired_by: str | None = Field(default=None, max_length=64)
    retired_reason: str | None = Field(default=None, sa_column=Column(Text))
    suspect: bool = Field(default=False, sa_column_kwargs={"server_default": sa_false()})
    confirmed: bool = Field(default=False, sa_column_kwargs={"server_default": sa_false()})


class EvaluationRunRow(SQLModel, table=True):
    """One model run over (part of) the suite."""

    __tablename__ = "evaluation_run"

    id: int | None = Field(default=None, primary_key=True)
    model_hash: str = Field(foreign_key="registered_model.hash", index=True, max_length=80)
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    case_count: int = 0


class CaseResultRow(SQLModel, table=True):
    """One model's answer on one case in one evaluation run."""

    __tablename__ = "case_result"
    __table_args__ = (Index("ix_case_result_model_case", "model_hash", "case_id", "run_id"),)

    run_id: int = Field(foreign_key="evaluation_run.id", primary_key=True)
    case_id: str = Field(foreign_key="regression_case.id", primary_key=True, max_length=36, index=True)
    model_hash: str = Field(max_length=80)
    prediction: str = Field(max_length=100)
    probabilities: dict[str, float] = Field(sa_column=Column(JSON, nullable=False))
    correct: bool


class GateRunRow(SQLModel, table=True):
    """A recorded gate decision with its flips and the figures beside it."""

    __tablename__ = "gate_run"

    id: int | None = Field(default=None, primary_key=True)
    candidate_hash: str = Field(max_length=80)
    baseline: str = Field(sa_column=Column(Text, nullable=False))
    max_flips: int
    passed: bool
    negative_flips: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    positive_flips: int
    per_round: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    mcnemar: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    created_by: str = Field(max_length=64)


class RevalidationRow(SQLModel, table=True):
    """A suspect case sent back to the validators as a candidate of a revalidation round (same id as
    the candidate), until its outcome settles it. A case has at most one open re-validation: the
    partial unique index decides, so two leads sending one case at once cannot both send it."""

    __tablename__ = "revalidation"
    __table_args__ = (
        Index(
            "uq_revalidation_open_case",
            "case_id",
            unique=True,
            sqlite_where=text("settled_at IS NULL"),
            postgresql_where=text("settled_at IS NULL"),
        ),
    )

    candidate_id: str = Field(foreign_key="candidate.id", primary_key=True, max_length=36)
    case_id: str = Field(foreign_key="regression_case.id", index=True, max_length=36)
    round_id: int = Field(foreign_key="round.id", index=True)
    sent_by: str = Field(max_length=64)
    sent_at: datetime = Field(default_factory=utcnow)
    settled_at: datetime | None = None
    outcome: str | None = Field(default=None, max_length=16)
    """``confirmed``, ``retired`` or ``unresolved`` once settled."""


class NearDuplicateExampleRow(SQLModel, table=True):
    """An example (a candidate or capture, release rows among them) in the near-duplicate index:
    written in the unit of work that stores the candidate. ``seq`` only grows, so a process tops
    up its in-memory band keys and vectors with the rows after the last it read; ``band_keys`` are
    the example's MinHash LSH band keys (sorted little-endian int64 bytes) for the lexical check;
    ``embedding`` is its vector (float16 bytes) for the semantic check, NULL until computed.
    ``seq`` is never handed out twice, even after its row is deleted (AUTOINCREMENT on SQLite; a
    sequence on PostgreSQL), since a row given its vector is written again under a new one."""

    __tablename__ = "near_duplicate_example"
    __table_args__ = (
        Index("ix_near_duplicate_example_task_seq", "task_type", "seq"),
        {"sqlite_autoincrement": True},
    )

    seq: int | None = Field(default=None, primary_key=True)
    candidate_id: str = Field(foreign_key="candidate.id", unique=True, max_length=36)
    task_type: str = Field(max_length=40)
    band_keys: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    embedding: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))


class NearDuplicateCheckRow(SQLModel, table=True):
    """What the check at submission found for a candidate that has near-duplicates (the matches,
    at most five, with the earlier examples' submitters), and whether its round's policy flagged it."""

    __tablename__ = "near_duplicate_check"
    __table_args__ = (Index("ix_near_duplicate_check_round_flagged", "round_id", "flagged"),)

    candidate_id: str = Field(foreign_key="candidate.id", primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id")
    flagged: bool = False
    matches: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    checked_at: datetime = Field(default_factory=utcnow)


class JobRow(SQLModel, table=True):
    """A job on the task queue (:mod:`dynaval.domain.jobs.job`): no two active ones share a key."""

    __tablename__ = "job"
    __table_args__ = (
        Index(
            "uq_job_active_key",
            "key",
            unique=True,
            sqlite_where=text("state IN ('queued', 'running')"),
            postgresql_where=text("state IN ('queued', 'running')"),
        ),
        Index("ix_job_state", "state"),
    )

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=16)
    key: str = Field(max_length=120)
    state: str = Field(max_length=16)
    params: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    attempts: int = 0
    progress: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    cancel_requested: bool = False
    log: list[str] = Field(sa_column=Column(JSON, nullable=False))
    created_by: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    finished_at: datetime | None = None


class RetrainingPolicyRow(SQLModel, table=True):
    """A task type's retraining policy (:mod:`dynaval.domain.retraining.policy`); no row: off."""

    __tablename__ = "retraining_policy"

    task_type: str = Field(primary_key=True, max_length=40)
    every: int | None = None
    ship: str = Field(max_length=16)
    min_interval_s: int
    base: str = Field(max_length=16)
    max_flips: int
    training: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    counted_from: int
    last_run_at: datetime | None = None
    updated_by: str = Field(max_length=64)
    updated_at: datetime | None = None


class RetrainingEventRow(SQLModel, table=True):
    """The retraining audit log (:mod:`dynaval.domain.retraining.audit`)."""

    __tablename__ = "retraining_event"

    id: int | None = Field(default=None, primary_key=True)
    task_type: str = Field(max_length=40, index=True)
    step: str = Field(max_length=20)
    by: str = Field(max_length=64)
    job_id: int | None = None
    detail: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    at: datetime = Field(default_factory=utcnow)


class TrainedExampleRow(SQLModel, table=True):
    """An accepted example a retraining run trained a model on (the first run that did): a release
    keeps its texts in train, so no later dev or test split holds a text a model learned."""

    __tablename__ = "trained_example"

    example_id: str = Field(primary_key=True, max_length=36)
    task_type: str = Field(max_length=40, index=True)
    job_id: int | None = None
    model_hash: str = Field(max_length=80)
    trained_at: datetime = Field(default_factory=utcnow)


class DatasetRecordRow(SQLModel, table=True):
    """An accepted example's provenance record as ``dynaval export`` writes it, kept as it is
    decided (:mod:`dynaval.service_layer.dataset_records`): written in the same transaction as every
    change that alters it, handed on by exports as it is.

    ``record`` is the record's JSON line without its round-level values (the round, its policy and
    Label Studio project) and its signed image URLs, which an export splices in from the round as
    it is when read (:mod:`dynaval.service_layer.dataset_records.stored_record`)."""

    __tablename__ = "dataset_record"
    __table_args__ = (Index("ix_dataset_record_round_order", "round_id", "submitted_at", "candidate_id"),)

    candidate_id: str = Field(primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id")
    submitted_at: datetime
    """The candidate's, copied as stored: an export reads in the decision queue's order."""
    record: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    image_inputs: str | None = Field(default=None, sa_column=Column(Text))
    """The inputs that name stored images, as JSON (``{field: ref}``); NULL for text."""
    stored_at: datetime = Field(default_factory=utcnow)


class DatasetRecordColumnsRow(SQLModel, table=True):
    """A kept record's Parquet values, packed (``pack_columns`` of
    :mod:`dynaval.service_layer.dataset_records.stored_record`), written with its line in the same
    transaction: a Parquet export reads a page of them as Arrow columns, in the same order as the
    lines, without decoding any record. A table of its own, so that a JSONL export's reads of the
    lines stay as short as the lines."""

    __tablename__ = "dataset_record_columns"
    __table_args__ = (
        Index("ix_dataset_record_columns_round_order", "round_id", "submitted_at", "candidate_id"),
    )

    candidate_id: str = Field(primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id")
    submitted_at: datetime
    """The candidate's, copied as stored (the order key, as ``dataset_record``'s)."""
    columns: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class DatasetRecordReleaseRow(SQLModel, table=True):
    """A kept record's release line (``kept_release_line`` of :mod:`dynaval.domain.releases.rows`),
    written with its record in the same transaction: a release build reads the round's lines in the
    same order as the records, without decoding any record or making its row again. A table of its
    own, as the Parquet values are, so that an export's reads stay as short as its values."""

    __tablename__ = "dataset_record_release"
    __table_args__ = (
        Index("ix_dataset_record_release_round_order", "round_id", "submitted_at", "candidate_id"),
    )

    candidate_id: str = Field(primary_key=True, max_length=36)
    round_id: int = Field(foreign_key="round.id")
    submitted_at: datetime
    """The candidate's, copied as stored (the order key, as ``dataset_record``'s)."""
    line: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class DatasetRecordStaleRow(SQLModel, table=True):
    """A candidate whose record must be written again: the database's triggers add one for every
    change to an accepted candidate, its annotations or its capture, whatever wrote it; the unit of
    work writes the records and removes these rows before it commits (migration 0024)."""

    __tablename__ = "dataset_record_stale"

    id: int | None = Field(
        default=None, primary_key=True, sa_type=BigInteger().with_variant(Integer(), "sqlite")
    )
    candidate_id: str = Field(max_length=36, index=True)
    xact: int | None = Field(default=None, sa_type=BigInteger, index=True)
    """PostgreSQL's id of the transaction that added it (each commits only its own); NULL on SQLite,
    which has one writer at a time."""
