"""The validation room's storage ports: rounds, candidates, their votes read back from Label Studio,
gold, annotators, captures and the rounds' read models. Reached through the
:class:`~dynaval.service_layer.unit_of_work.UnitOfWork`; the SQL adapters are in
:mod:`dynaval.adapters.db`."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from dynaval.domain.agreement.encoding import VoteColumns
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

    def last_read(self, round_id: int, task_ids: Collection[int]) -> dict[int, datetime]:
        """When the stored copy of each of these candidates' tasks of the round was read from Label
        Studio (the read's start); a task never read, or a gold item's, is absent."""

    def request_each(self, round_id: int, times: Mapping[int, datetime]) -> None:
        """:meth:`request` for many tasks of the round at once, each at its own time (task -> time)."""

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

    def status_counts_by_model(self, round_id: int) -> dict[tuple[str, str], dict[tuple[str, bool], int]]:
        """The round's scored candidates by the model that scored them ``(hash, name)``, each by
        (status, fooled); in the order the models first scored one."""

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
