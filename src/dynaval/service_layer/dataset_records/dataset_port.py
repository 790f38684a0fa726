"""The round dataset's storage, as its use cases see it.

- :class:`DatasetReads`: the round's header; its accepted candidates with their votes, a page at a
  time (what a record is built from); and the kept records (what an export reads).
- :class:`RecordStore`: the kept records inside one write transaction, where they are written.

The adapters (:class:`~dynaval.adapters.db.dataset_query.DatasetQuery` and
:class:`~dynaval.adapters.db.dataset_records.SqlRecordStore`) read and write the service's database."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from dynaval.service_layer.dataset_records.stored_record import RoundValues

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


@dataclass(frozen=True)
class KeptRecord:
    """A kept record as stored (:mod:`dynaval.service_layer.dataset_records.stored_record`)."""

    candidate_id: str
    round_id: int
    record: bytes
    image_inputs: str | None
    """JSON of the inputs that name stored images, or None."""
    columns: bytes
    """The record's Parquet values, packed (``pack_columns(kept_columns(record))`` of
    :mod:`.stored_record`); empty where a record was kept without them, by an earlier version."""
    release_line: bytes = b""
    """The record's release line (``kept_release_line(record)`` of
    :mod:`dynaval.domain.releases.rows`); empty where a record was kept without one, by an earlier
    version."""


@dataclass(frozen=True)
class KeptLines:
    """A page of kept records as one piece of JSONL: each record's stored line and a newline."""

    lines: bytes
    count: int
    images: Sequence[tuple[int, str]]
    """(index of the line in the page, JSON of its inputs that name stored images), for the
    records that have such inputs (their URLs are signed when read); empty for text."""


@dataclass(frozen=True)
class ColumnPage:
    """A page of kept records as the Parquet file's columns, every hole filled: an Arrow record
    batch, which the service layer hands on without looking inside."""

    batch: Any
    count: int


class RecordStore(Protocol):
    """The kept records, inside one write transaction.

    The database marks a candidate stale on every change to it, its annotations or its capture
    while it is (or was) accepted; these methods take the marks and write the records again.
    """

    def take_own_stale(self) -> list[str]:
        """The candidates this transaction marked stale (their marks removed)."""

    def hold_round(self, round_id: int) -> None:
        """Hold the round's catch-up lock until the transaction ends: catch-ups and rebuild chunks of
        one round take turns, so none reads past records another is still writing."""

    def take_stale_of_round(self, round_id: int, limit: int) -> list[str]:
        """Up to ``limit`` candidates of the round marked stale by anyone (their marks removed)."""

    def clear_stale(self, candidate_ids: Sequence[str]) -> None:
        """Remove any mark of these candidates (their records are being written)."""

    def lock(self, candidate_ids: Sequence[str]) -> None:
        """Lock the candidates' rows until the transaction ends, so that what is read next is the
        newest committed state and no other transaction changes them before this one commits."""

    def accepted_pages(self, candidate_ids: Sequence[str]) -> list[tuple[RoundHeader, DatasetPage]]:
        """Those of the candidates that are accepted, with their votes, a page per round."""

    def kept(self, candidate_ids: Sequence[str]) -> dict[str, KeptRecord]:
        """The kept records of these candidates, where there are."""

    def replace(self, removed: Sequence[str], written: Sequence[KeptRecord]) -> None:
        """Remove the records of ``removed`` and write ``written`` (over any record they had)."""

    def round_ids(self) -> list[int]: ...

    def accepted_ids(self, round_id: int, *, after: object | None, limit: int) -> tuple[list[str], object]:
        """Up to ``limit`` of the round's accepted candidates after the position ``after`` (None:
        from the start), and the position after them (opaque; the same when none was left)."""

    def kept_not_accepted(self, round_id: int) -> list[str]:
        """The round's candidates that have a kept record but are not accepted (any more)."""


class DatasetReads(Protocol):
    """The reads a round dataset is built from."""

    def round(self, round_id: int) -> RoundHeader | None:
        """The round, or None when there is none with this id."""

    def count_accepted(self, round_id: int) -> int: ...

    def accepted_pages(self, round_id: int) -> Iterator[DatasetPage]:
        """The round's accepted candidates with their votes, a page at a time, in submission order."""

    def candidate(self, candidate_id: str) -> tuple[int, DatasetPage] | None:
        """Any candidate's round id and a page of it alone, or None."""

    def kept_lines(self, round_id: int) -> Iterator[KeptLines]:
        """The round's kept records, a page at a time, in submission order (each page read in a read
        transaction of its own, so that a slow reader holds none open between pages)."""

    def kept_columns(self, round_id: int, round_values: RoundValues) -> Iterator[ColumnPage]:
        """The round's kept records as Parquet columns, a page at a time, in submission order, with
        ``round_values`` filled in (and the ``round`` column added)."""

    def kept_release_lines(self, round_id: int) -> Iterator[KeptLines] | None:
        """The round's kept release lines (each with its newline), a page at a time, in submission
        order, holes and all; None when some kept record of the round has none (kept by an earlier
        version, and not written again since): then a build makes its rows from the records."""

    def any_stale(self, round_id: int) -> bool:
        """Whether any of the round's records is marked stale, read without a write transaction."""

    def record_writes(self) -> AbstractContextManager[RecordStore]:
        """A write transaction on the kept records, committed when the block ends without error."""
