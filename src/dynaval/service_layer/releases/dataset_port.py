"""The round dataset's reads, as the releases room's use cases see them: the round's header, and its
accepted candidates with their votes a page at a time. The adapter
(:class:`~dynaval.adapters.db.dataset_query.DatasetQuery`) reads them from the service's database."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

CANDIDATE_FIELDS = (
    "id", "inputs", "writer_label", "rationale", "writer_id", "collected_by", "submitted_at",
    "model_prediction", "model_probabilities", "model_signature", "fooled", "label_studio_task_id",
    "decision", "decided_at", "override_outcome", "override_reason", "override_by", "override_at",
    "capture_source", "capture_reference", "capture_observed_output", "capture_model_name",
    "capture_model_version", "capture_observed_at",
)  # fmt: skip
"""The order of a candidate row's values (times as ISO text, JSON decoded); the query's own page key
follows them."""

VOTE_FIELDS = (
    "candidate_id", "annotation_id", "annotator_id", "label", "flagged", "flag_reason", "lead_time_s",
    "created_at", "updated_at",
)  # fmt: skip
"""The order of a vote row's values (times as ISO text)."""


@dataclass(frozen=True)
class RoundHeader:
    """What a provenance record takes from the round."""

    id: int
    name: str
    state: str
    task_type: str
    model_name: str
    model_hash: str
    policy: dict[str, Any]
    label_studio_project_id: int | None


@dataclass(frozen=True)
class DatasetPage:
    candidates: Sequence[Sequence[Any]]
    """Rows of :data:`CANDIDATE_FIELDS`, in (``submitted_at``, ``id``) order."""
    votes: Sequence[Sequence[Any]]
    """Rows of :data:`VOTE_FIELDS` of these candidates' counting annotations, by candidate id, then
    annotator, each annotator's latest first: the first row of each (candidate, annotator) is the
    vote; the rows after it are annotations it superseded."""


class DatasetReads(Protocol):
    """The reads a round dataset is built from."""

    def round(self, round_id: int) -> RoundHeader | None:
        """The round, or None when there is none with this id."""

    def count_accepted(self, round_id: int) -> int: ...

    def accepted_pages(self, round_id: int) -> Iterator[DatasetPage]:
        """The round's accepted candidates with their votes, a page at a time, in submission order."""

    def candidate(self, candidate_id: str) -> tuple[int, DatasetPage] | None:
        """Any candidate's round id and a page of it alone, or None."""
