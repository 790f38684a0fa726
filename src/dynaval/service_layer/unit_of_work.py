"""The ports through which use cases reach storage: a unit of work and its repositories.

A use case opens a unit of work, loads domain objects from its repositories, calls their methods,
saves them and commits; nothing persists unless it commits. The SQL implementation
(:mod:`dynaval.adapters.db.unit_of_work`) holds every query and every dialect detail (upserts, row
locks, leases, Core statements for the busy paths); the unit tests run the same use cases on
in-memory fakes of these protocols (``tests/unit/fakes.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self

from dynaval.domain.agreement.encoding import VoteColumns
from dynaval.domain.audit import AuditEvent
from dynaval.domain.dashboard.lead_session import LeadSessionRecord
from dynaval.domain.health.near_duplicates import EarlierExample, NearDuplicateCheck
from dynaval.domain.regression.gate import GateResult
from dynaval.domain.regression.revalidation import Revalidation
from dynaval.domain.regression.suite import CaseResult, RegisteredModel, RegressionCase
from dynaval.domain.releases.release import Release, SplitKind
from dynaval.domain.releases.splits import FixedPlace
from dynaval.domain.validation.candidate import Candidate, CandidateStatus, DecisionEntry
from dynaval.domain.validation.capture import AcceptedCapture, Capture
from dynaval.domain.validation.gold import AnnotatorStatus, ExclusionEvent, GoldAnswer, GoldItem
from dynaval.domain.validation.round import Round
from dynaval.domain.validation.votes import AnnotationRecord

ANNOTATION_FIELDS = (
    "annotator_id", "label", "flagged", "flag_reason", "was_cancelled", "lead_time_s",
    "created_at", "updated_at",
)  # fmt: skip
"""The columns of a stored annotation that a read of Label Studio compares and writes."""


@dataclass
class StoredCandidate:
    """A candidate as a read of Label Studio needs it: the candidate (row-locked), and its stored
    annotations by id."""

    candidate: Candidate
    annotations: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Annotation id -> the columns of :data:`ANNOTATION_FIELDS` (times in UTC)."""
    late: set[int] = field(default_factory=set)
    """The ids of those annotations that were read after the round was frozen."""


@dataclass(frozen=True)
class LateAnnotation:
    """An annotation read after its round was frozen: kept, never counted."""

    annotation_id: int
    candidate_id: str
    annotator: str
    label: str | None
    was_cancelled: bool
    received_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "annotation_id": self.annotation_id,
            "candidate_id": self.candidate_id,
            "label": self.label,
            "was_cancelled": self.was_cancelled,
            "received_at": self.received_at.isoformat(),
        }


@dataclass(frozen=True)
class WrittenCandidate:
    """What a round's health figures need of one candidate (raw writer ids: the use case makes them
    pseudonymous)."""

    id: str
    inputs: dict[str, str]
    writer_id: str
    collected_by: str | None
    fooled: bool
    status: str


@dataclass
class VoteWrites:
    """What one chunk changes; :meth:`VoteStore.write` applies it all."""

    inserted: list[dict[str, Any]] = field(default_factory=list)
    updated: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """Candidate columns of a changed decision (``candidate_id``, ``status``, ``decision``,
    ``wanted_votes``, ``decided_at``, ``read_at``)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    read_only: list[dict[str, Any]] = field(default_factory=list)
    """Candidates whose decision stands: only when their copy was read (``candidate_id``, ``read_at``)."""


class RoundRepository(Protocol):
    def get(self, round_id: int, *, for_update: bool = False) -> Round:
        """The round, row-locked with ``for_update``; :class:`NotFound` naming ``round_id``."""

    def add(self, round_: Round) -> Round: ...

    def save(self, round_: Round) -> None: ...

    def all(self) -> list[Round]: ...

    def live_ids(self) -> list[int]: ...

    def take_push_lease(
        self, round_id: int, lease: datetime, *, now: datetime, respect_backoff: bool
    ) -> bool: ...

    def renew_push_lease(self, round_id: int, lease: datetime, renewed: datetime) -> bool: ...

    def release_push_lease(self, round_id: int, lease: datetime) -> None: ...


class CandidateRepository(Protocol):
    def get(self, candidate_id: str, *, for_update: bool = False) -> Candidate | None: ...

    def get_many(self, candidate_ids: Collection[str]) -> dict[str, Candidate]: ...

    def by_task(self, round_id: int, task_id: int) -> Candidate | None: ...

    def add(self, candidate: Candidate) -> None: ...

    def save(self, candidate: Candidate) -> None: ...

    def mark_push_attempted(self, candidate_ids: Collection[str], at: datetime) -> None:
        """Set ``push_attempted_at`` of these candidates (before their import is tried)."""

    def save_many(self, candidates: Sequence[Candidate]) -> None:
        """:meth:`save` for many candidates at once (loaded in this unit of work or an earlier one)."""

    def annotations(self, candidate_id: str) -> list[AnnotationRecord]: ...

    def annotations_of(self, candidate_ids: Collection[str]) -> dict[str, list[AnnotationRecord]]: ...

    def cancelled_annotations(self, candidate_id: str) -> int: ...

    def voters(self, candidate_id: str) -> int: ...

    def history(self, candidate_id: str) -> list[DecisionEntry]: ...

    def count_with_status(self, round_id: int, status: CandidateStatus) -> int: ...

    def submitted_counts(self, round_id: int, submitted_by: str) -> dict[tuple[str, bool], int]:
        """The round's candidates submitted under ``submitted_by`` (a token's name), by (status, fooled)."""

    def submitted_page(self, round_id: int, submitted_by: str, *, offset: int, limit: int) -> list[Candidate]:
        """The round's candidates submitted under ``submitted_by``, the newest first (by submission
        time, then id), ``limit`` of them after the first ``offset``."""

    def page_with_status(
        self, round_id: int, status: CandidateStatus, *, after: tuple[datetime, str] | None, limit: int
    ) -> list[Candidate]:
        """The round's candidates with ``status`` in (submitted, id) order, after ``after``."""

    def queued(self, round_id: int, limit: int) -> list[Candidate]: ...

    def left_scoring(self, older_than: datetime, limit: int) -> list[Candidate]: ...

    def wanting_more_votes(self, round_id: int) -> list[Candidate]: ...

    def annotated_by(self, round_id: int, annotator: str) -> list[str]: ...

    def annotators(self, round_id: int) -> set[str]:
        """Every raw annotator id with an annotation (or gold answer) in the round."""


class GoldRepository(Protocol):
    def add(self, item: GoldItem) -> None: ...

    def get(self, item_id: str, *, for_update: bool = False) -> GoldItem | None: ...

    def by_task(self, round_id: int, task_id: int) -> GoldItem | None: ...

    def to_push(self, round_id: int, limit: int) -> list[GoldItem]: ...

    def save(self, item: GoldItem) -> None: ...

    def answers_of_item(self, item_id: str) -> list[GoldAnswer]: ...

    def put_answer(self, round_id: int, answer: GoldAnswer, received_at: datetime) -> None: ...

    def delete_answer(self, annotation_id: int) -> None: ...

    def answers(self, round_id: int) -> list[tuple[GoldAnswer, str]]: ...


class AnnotatorRepository(Protocol):
    def excluded(self, round_id: int) -> frozenset[str]: ...

    def status(self, round_id: int, annotator: str) -> AnnotatorStatus | None: ...

    def statuses(self, round_id: int) -> dict[str, AnnotatorStatus]: ...

    def set_status(self, round_id: int, status: AnnotatorStatus) -> None: ...

    def log(self, event: ExclusionEvent) -> None: ...

    def events(self, round_id: int) -> list[ExclusionEvent]: ...


class AuditRepository(Protocol):
    def add(self, event: AuditEvent) -> None: ...

    def of_round(self, round_id: int) -> list[AuditEvent]: ...

    def of_candidate(self, candidate_id: str) -> list[AuditEvent]: ...


class TaskChecks(Protocol):
    """The tasks waiting to be read back, inside one unit of work."""

    def round_of_project(self, project_id: int) -> int | None:
        """The id of the round whose Label Studio project this is, or None."""

    def is_task_of_round(self, round_id: int, task_id: int) -> bool:
        """Whether the task is a candidate's or a gold item's of the round."""

    def tasks_of_annotations(self, round_id: int, annotation_ids: Collection[int]) -> set[int]:
        """The tasks of the round that hold any of these stored annotations (or gold answers). Ids
        the service never stored for this round lead nowhere."""

    def request(self, round_id: int, task_ids: Iterable[int], at: datetime) -> None:
        """Ask for these tasks of the round to be read back from Label Studio (again, if waiting)."""

    def pending(self, round_id: int, *, until: datetime, limit: int) -> list[int]:
        """Tasks of the round asked for at or before ``until``, the longest-waiting first."""

    def settle(self, round_id: int, task_ids: Collection[int], read_at: datetime) -> int:
        """Forget the requests that a read of Label Studio started at ``read_at`` answered. A request
        that came during the read stays: what it announced may be missing from the read."""

    def settle_round(self, round_id: int, read_at: datetime) -> int:
        """Forget every request of the round that a read of all its tasks, started at ``read_at``,
        answered."""

    def rounds_waiting(self) -> list[int]:
        """Rounds that have tasks waiting to be read back."""

    def waiting(self, round_id: int) -> tuple[int, datetime | None]:
        """How many of the round's tasks wait to be read back, and since when the longest has waited."""


class VoteStore(Protocol):
    """The votes read back from Label Studio, inside one unit of work (Core statements on its
    connection)."""

    def task_kinds(self, round_id: int, task_ids: Collection[int]) -> dict[int, str]:
        """For each of these tasks linked to the round: ``"candidate"`` or ``"gold"``."""

    def lock_candidates(self, round_id: int, task_ids: Collection[int]) -> dict[int, StoredCandidate]:
        """The round's candidates of these tasks, row-locked, with their stored annotations, by task id."""

    def annotation_owners(self, annotation_ids: Collection[int]) -> dict[int, str]:
        """The candidate each of these stored annotation ids belongs to."""

    def write(self, writes: VoteWrites) -> None:
        """Apply one chunk's changes, each kind with one ``executemany``."""


class RoundQueries(Protocol):
    def status_counts(self, round_id: int) -> dict[tuple[str, bool], int]:
        """Candidates of the round by (status, fooled)."""

    def labelled_votes(self, round_id: int) -> list[tuple[str, str, str]]:
        """Every annotator's current labelled vote in the round as (candidate, annotator, label),
        excluded annotators included.

        The same votes as :func:`dynaval.domain.validation.votes.current_votes` per candidate
        (latest by update time, then annotation id; an annotation with neither label nor flag is no
        vote; a flag-only latest vote hides an earlier label), read as plain columns and ordered by
        the database: a
        round of 250,000 annotations takes about a second, not the many that ORM rows would.
        """

    def counted_votes(
        self, round_id: int, writer_annotators: Mapping[str, str] | None = None
    ) -> list[tuple[str, str, str]]:
        """:meth:`labelled_votes` without the excluded annotators' votes, nor the writers' votes on
        their own examples (``writer_annotators``: Label Studio users by writer name): what the
        round counts."""

    def counted_vote_codes(
        self, round_id: int, writer_annotators: Mapping[str, str] | None = None
    ) -> VoteColumns:
        """:meth:`counted_votes` as integer columns (items and annotators numbered in the order
        :meth:`counted_votes` first gives them; labels as text): the round's alpha, exactly, without
        a tuple per vote."""

    def validated_candidates(self, round_id: int) -> int:
        """Candidates whose task is in Label Studio."""

    def annotation_count(self, round_id: int) -> int:
        """Non-cancelled annotations stored for the round, late ones left out."""

    def late_annotations(self, round_id: int, limit: int) -> tuple[int, list[LateAnnotation]]:
        """How many annotations were read after the round was frozen, and the latest ``limit`` of them."""

    def late_counts(self, round_ids: Sequence[int]) -> dict[int, int]:
        """Annotations read after each round was frozen, by round (0 for none)."""

    def writer_labels(self, round_id: int) -> list[tuple[str, str]]:
        """Every candidate of the round with its writer's label."""

    def written_candidates(self, round_id: int) -> list[WrittenCandidate]:
        """Every candidate of the round in submission order (time, then id): inputs, writer, fooled
        (a candidate not scored yet counts as not fooled, as in the counts), status."""

    def candidates_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """What :meth:`written_candidates` depends on: how many candidates, the latest submission
        and the latest scoring (cheap indexed queries)."""


class DashboardSessions(Protocol):
    """The lead's dashboard sessions (table ``dashboard_session``)."""

    def add(self, record: LeadSessionRecord) -> None: ...

    def get(self, id_hash: str) -> LeadSessionRecord | None: ...

    def touch(self, id_hash: str, now: datetime) -> None:
        """Note that the session was used at ``now`` (never moving ``last_seen_at`` back)."""

    def revoke(self, id_hash: str, now: datetime) -> None: ...

    def purge(self, now: datetime, *, idle: timedelta) -> None:
        """Delete the rows that can no longer hold: past their lifetime or their idle timeout.
        A revoked row stays until then, so the table shows recent logouts."""


class DashboardQueries(Protocol):
    """What the lead's dashboard reads: fingerprints of a round's votes, counts, the paged queue."""

    def votes_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """What the round's counted votes depend on: its annotations (how many, and the latest time
        one was stored or changed) and its exclusion log (every exclusion or reinstatement adds an
        event). Cheap indexed queries (a count and a max are faster apart than together)."""

    def annotators_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """The votes' fingerprint and the round's gold answers (gold accuracy is on the annotators page)."""

    def status_counts(self, round_ids: Sequence[int]) -> dict[int, dict[tuple[str, bool], int]]:
        """Candidates of each round by (status, fooled), read at once."""

    def queue_page(
        self,
        round_id: int,
        *,
        fields: Sequence[str],
        status: str,
        q: str,
        urgent: Sequence[str],
        offset: int,
        limit: int,
        by_status: Mapping[str, int] | None,
    ) -> tuple[list[Candidate], dict[str, list[AnnotationRecord]], int]:
        """One page of the round's candidates, ``urgent`` statuses first, then the rest, each by
        submission time; with their annotations, and the total the filters keep. ``q`` keeps
        candidates whose ``fields`` contain it (case-insensitive); ``by_status``, the round's counts
        when the caller has them, saves counting again."""

    def writer_by_validators(self, round_id: int) -> list[tuple[str, str, int]]:
        """Candidates by writer label and validators' majority label (each candidate's latest rule
        decision; candidates without a majority are left out)."""


class ReleaseRepository(Protocol):
    """Releases (never updated once added), their examples' places and writers' split kinds."""

    def add(self, release: Release, *, at: datetime) -> Release:
        """Store a new release; a second one with the same name and version fails on commit."""
        ...

    def get(self, release_id: int) -> Release:
        """The release; :class:`NotFound` naming ``release_id``."""
        ...

    def find(self, name: str, version: str) -> Release | None: ...

    def all(self, task_type: str | None = None) -> list[Release]:
        """Oldest first."""
        ...

    def writer_kinds(self, task_type: str) -> dict[str, SplitKind]: ...

    def places(self, release_id: int) -> dict[str, FixedPlace]: ...

    def add_places(self, release_id: int, splits: Mapping[str, str], withheld: Mapping[str, str]) -> None: ...

    def assign_writers(
        self, task_type: str, kinds: Mapping[str, SplitKind], *, release_id: int, at: datetime
    ) -> None:
        """Record new writers' kinds; a writer placed before fails on commit (the kind is sticky)."""
        ...


class CaptureRepository(Protocol):
    """Failure captures' provenance, beside the candidates they are validated as."""

    def add_many(self, captures: Sequence[Capture]) -> None:
        """Store them (their candidates first); a reference taken in the round meanwhile raises
        :class:`~dynaval.domain.errors.Conflict` naming ``reference``."""
        ...

    def get(self, candidate_id: str) -> Capture | None: ...

    def by_references(self, round_id: int, references: Collection[str]) -> dict[str, str]:
        """The ids of the round's captures with these references, by reference."""
        ...

    def accepted_captures(self, round_id: int | None = None) -> list[AcceptedCapture]:
        """Every accepted capture (of one round, or all): regression cases from production."""
        ...


class RegressionRepository(Protocol):
    """The regression suite: registered models, cases (only ever added; retired, never deleted),
    evaluation runs with each case's result, and gate runs."""

    def register(self, model: RegisteredModel) -> RegisteredModel:
        """Store the model unless its hash is known; the stored one either way."""
        ...

    def model(self, model_hash: str) -> RegisteredModel:
        """The model; :class:`NotFound` naming ``model``."""
        ...

    def models(self) -> list[RegisteredModel]:
        """Oldest first."""
        ...

    def save_model(self, model: RegisteredModel) -> None: ...

    def released_examples(self, release_id: int | None = None) -> Iterable[RegressionCase]:
        """Every dev and test example of every release (or of one), as a case not yet stored."""
        ...

    def add_cases(self, cases: Iterable[RegressionCase], *, at: datetime) -> int:
        """Add the cases the suite lacks; how many were added."""
        ...

    def case(self, case_id: str) -> RegressionCase:
        """The case; :class:`NotFound` naming ``case``."""
        ...

    def cases(
        self, *, retired: bool = False, suspect_only: bool = False, ids: Collection[str] | None = None
    ) -> list[RegressionCase]: ...

    def save_case(self, case: RegressionCase) -> None: ...

    def mark_suspect(self, case_ids: Collection[str]) -> int: ...

    def clear_suspects(self, still_suspect: Collection[str]) -> int: ...

    def start_run(self, model_hash: str, *, at: datetime) -> int: ...

    def add_results(self, run_id: int, results: Sequence[CaseResult]) -> None: ...

    def finish_run(self, run_id: int, *, at: datetime, case_count: int) -> None: ...

    def results(
        self,
        *,
        model_hash: str | None = None,
        case_id: str | None = None,
        case_ids: Collection[str] | None = None,
    ) -> list[CaseResult]:
        """Results of finished runs, in evaluation order (of one model, one case, or a few cases)."""
        ...

    def latest_outcomes(self) -> dict[str, dict[str, bool]]:
        """Case id -> model hash -> whether the model's latest result on it was right."""
        ...

    def results_fingerprint(self) -> tuple[int, int | None, int]:
        """Changes whenever an evaluation run finishes or a case is retired (cheap to read)."""
        ...

    def add_gate_run(
        self, *, candidate_hash: str, baseline: str, result: GateResult, by: str, at: datetime
    ) -> int: ...

    def gate_runs(self, limit: int = 100) -> list[dict[str, Any]]: ...


class RevalidationRepository(Protocol):
    """Which suite case each revalidation candidate stands for, until its outcome settles it."""

    def add_many(self, revalidations: Sequence[Revalidation]) -> None:
        """Store them; a case already under re-validation (another request, at the same moment):
        :class:`~dynaval.domain.errors.Conflict` naming ``cases``."""

    def open(self, *, round_id: int | None = None, for_update: bool = False) -> list[Revalidation]:
        """The unsettled ones (of one round, or all), row-locked with ``for_update``."""

    def of_cases(self, case_ids: Collection[str]) -> dict[str, Revalidation]:
        """Each case's latest re-validation, open or settled."""

    def save(self, revalidation: Revalidation) -> None: ...


class NearDuplicateIndex(Protocol):
    """The shared near-duplicate index at submission (every example's MinHash LSH band keys and
    vector, which each process holds in memory) and what each check found; see
    docs/near_duplicates.md."""

    def serialize_checks(self, task_type: str) -> None:
        """Hold, until this unit of work ends, the right to check and index new examples of
        ``task_type``: two submissions of one trick at the same moment are checked one after the
        other, so the second sees the first."""
        ...

    def add(
        self, candidate_id: str, task_type: str, keys: Collection[int], vector: bytes | None = None
    ) -> None:
        """Index a candidate (added in this unit of work, or stored earlier) under its band keys,
        with its vector for the semantic check (``None``: none computed)."""
        ...

    def add_many(self, examples: Sequence[tuple[str, str, Collection[int], bytes | None]]) -> None:
        """Index stored candidates in bulk: ``(candidate id, task type, keys, vector)``."""
        ...

    def examples(self, candidate_ids: Collection[str]) -> dict[str, EarlierExample]:
        """The stored examples with these ids."""
        ...

    def vectors_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        """The examples of ``task_type`` indexed after ``seq`` (a number that only grows):
        ``(seq, candidate id, vector)``, in order."""
        ...

    def keys_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        """The examples of ``task_type`` indexed after ``seq``: ``(seq, candidate id, band keys as
        stored by :func:`~dynaval.domain.health.band_keys.keys_to_bytes`)``, in order."""
        ...

    def without_vectors(self, limit: int) -> list[tuple[str, str, dict[str, str]]]:
        """Indexed examples with no vector: ``(id, task type, inputs)``."""
        ...

    def set_vectors(self, vectors: Sequence[tuple[str, str, bytes]]) -> None:
        """Give indexed examples their vectors ``(id, task type, vector)``, under a new ``seq``."""
        ...

    def unindexed(self, limit: int) -> list[tuple[str, str, dict[str, str]]]:
        """Stored candidates missing from the index ``(id, task type, inputs)``, oldest first."""
        ...

    def size(self) -> int:
        """How many examples the index holds."""
        ...

    def record(self, check: NearDuplicateCheck) -> None:
        """Keep what the check found for a candidate stored in this unit of work."""
        ...

    def checks_of(self, candidate_ids: Collection[str]) -> dict[str, NearDuplicateCheck]: ...

    def flagged(self, round_id: int, *, limit: int | None = None) -> list[str]:
        """The ids of the round's candidates flagged as near-duplicates, the earliest first (the
        first ``limit``, when given)."""
        ...

    def flagged_count(self, round_id: int) -> int:
        """How many of the round's candidates are flagged as near-duplicates."""
        ...

    def round_band_keys(self, round_id: int) -> dict[str, bytes | None]:
        """The stored band keys of the round's indexed candidates, by candidate id."""
        ...


class UnitOfWork(Protocol):
    """One transaction and its repositories; rolled back on leaving the block unless committed."""

    @property
    def rounds(self) -> RoundRepository: ...

    @property
    def candidates(self) -> CandidateRepository: ...

    @property
    def gold(self) -> GoldRepository: ...

    @property
    def annotators(self) -> AnnotatorRepository: ...

    @property
    def audit(self) -> AuditRepository: ...

    @property
    def votes(self) -> VoteStore: ...

    @property
    def task_checks(self) -> TaskChecks: ...

    @property
    def round_queries(self) -> RoundQueries: ...

    @property
    def dashboard(self) -> DashboardQueries: ...

    @property
    def dashboard_sessions(self) -> DashboardSessions: ...

    @property
    def releases(self) -> ReleaseRepository: ...

    @property
    def captures(self) -> CaptureRepository: ...

    @property
    def regression(self) -> RegressionRepository: ...

    @property
    def revalidations(self) -> RevalidationRepository: ...

    @property
    def near_duplicates(self) -> NearDuplicateIndex: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None: ...

    def commit(self) -> None:
        """Make the unit's writes durable; without it, leaving the block rolls them back."""

    def flush(self) -> None:
        """Send the pending writes inside the transaction (later reads of it see them)."""
