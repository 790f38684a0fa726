"""In-memory fakes of our own ports, for the use cases' unit tests (no database, no Label Studio).

:class:`FakeStore` holds what the repositories would store; each :class:`FakeUnitOfWork` works on
a copy of it and writes the copy back only on commit, so a use case that fails half-way leaves the
store as it was, as a rolled-back transaction would. The same use cases run on the SQL unit of work
in the integration and end-to-end tests.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from dynaval.adapters.label_config import LabelConfigCatalog
from dynaval.adapters.label_studio import ExportedTask, LabelStudioUnavailable
from dynaval.adapters.predictor import ModelRegistry
from dynaval.domain.audit import AuditEvent
from dynaval.domain.errors import Conflict, NotFound
from dynaval.domain.health.band_keys import keys_to_bytes
from dynaval.domain.health.near_duplicates import EarlierExample, NearDuplicateCheck
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import Candidate, CandidateStatus, DecisionEntry
from dynaval.domain.validation.capture import AcceptedCapture, Capture
from dynaval.domain.validation.gold import AnnotatorStatus, ExclusionEvent, GoldAnswer, GoldItem
from dynaval.domain.validation.round import Round
from dynaval.domain.validation.votes import AnnotationRecord
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.storage import ANNOTATION_FIELDS, StoredCandidate, VoteWrites
from dynaval.settings import Settings

REPO = Path(__file__).resolve().parents[2]


@dataclass
class FakeStore:
    rounds: dict[int, Round] = field(default_factory=dict)
    leases: dict[int, datetime | None] = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    annotations: dict[str, list[AnnotationRecord]] = field(default_factory=dict)
    history: dict[str, list[DecisionEntry]] = field(default_factory=dict)
    gold: dict[str, GoldItem] = field(default_factory=dict)
    gold_answers: dict[int, GoldAnswer] = field(default_factory=dict)
    statuses: dict[tuple[int, str], AnnotatorStatus] = field(default_factory=dict)
    exclusion_events: list[ExclusionEvent] = field(default_factory=list)
    audit: list[AuditEvent] = field(default_factory=list)
    task_checks: dict[tuple[int, int], datetime] = field(default_factory=dict)
    """(round id, task id) -> when its read-back was asked for."""
    captures: dict[str, Capture] = field(default_factory=dict)
    near_duplicate_examples: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)
    """candidate id -> (task type, band keys)"""
    near_duplicate_checks: dict[str, NearDuplicateCheck] = field(default_factory=dict)
    near_duplicate_vectors: list[tuple[str, str, bytes | None]] = field(default_factory=list)
    """(candidate id, task type, vector) in the order stored; a position is its seq (from 1)."""
    commits: int = 0


class FakeRounds:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def get(self, round_id: int, *, for_update: bool = False) -> Round:
        if round_id not in self.store.rounds:
            raise NotFound(f"round {round_id} does not exist", field="round_id")
        return copy.deepcopy(self.store.rounds[round_id])

    def add(self, round_: Round) -> Round:
        round_.id = max(self.store.rounds, default=0) + 1
        self.store.rounds[round_.id] = copy.deepcopy(round_)
        return round_

    def save(self, round_: Round) -> None:
        assert round_.id is not None
        self.store.rounds[round_.id] = copy.deepcopy(round_)

    def all(self) -> list[Round]:
        return [copy.deepcopy(r) for _, r in sorted(self.store.rounds.items())]

    def live_ids(self) -> list[int]:
        return [i for i, r in sorted(self.store.rounds.items()) if r.is_live]

    def take_push_lease(
        self, round_id: int, lease: datetime, *, now: datetime, respect_backoff: bool
    ) -> bool:
        held = self.store.leases.get(round_id)
        if held is not None and held >= now:
            return False
        retry_at = self.store.rounds[round_id].push_retry_at
        if respect_backoff and retry_at is not None and retry_at > now:
            return False
        self.store.leases[round_id] = lease
        return True

    def renew_push_lease(self, round_id: int, lease: datetime, renewed: datetime) -> bool:
        if self.store.leases.get(round_id) != lease:
            return False
        self.store.leases[round_id] = renewed
        return True

    def release_push_lease(self, round_id: int, lease: datetime) -> None:
        if self.store.leases.get(round_id) == lease:
            self.store.leases[round_id] = None


class FakeCandidates:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def get(self, candidate_id: str, *, for_update: bool = False) -> Candidate | None:
        found = self.store.candidates.get(candidate_id)
        return copy.deepcopy(found) if found is not None else None

    def get_many(self, candidate_ids: Collection[str]) -> dict[str, Candidate]:
        return {
            c: copy.deepcopy(self.store.candidates[c]) for c in candidate_ids if c in self.store.candidates
        }

    def by_task(self, round_id: int, task_id: int) -> Candidate | None:
        for c in self.store.candidates.values():
            if c.round_id == round_id and c.label_studio_task_id == task_id:
                return copy.deepcopy(c)
        return None

    def add(self, candidate: Candidate) -> None:
        self.save(candidate)

    def save(self, candidate: Candidate) -> None:
        self.store.history.setdefault(candidate.id, []).extend(candidate.history)
        candidate.history.clear()
        self.store.candidates[candidate.id] = copy.deepcopy(candidate)

    def mark_push_attempted(self, candidate_ids: Collection[str], at: datetime) -> None:
        for candidate_id in candidate_ids:
            self.store.candidates[candidate_id].push_attempted_at = at

    def save_many(self, candidates: Sequence[Candidate]) -> None:
        for candidate in candidates:
            self.save(candidate)

    def annotations(self, candidate_id: str) -> list[AnnotationRecord]:
        return list(self.store.annotations.get(candidate_id, []))

    def annotations_of(self, candidate_ids: Collection[str]) -> dict[str, list[AnnotationRecord]]:
        return {c: self.annotations(c) for c in candidate_ids}

    def cancelled_annotations(self, candidate_id: str) -> int:
        return sum(1 for a in self.annotations(candidate_id) if a.was_cancelled)

    def voters(self, candidate_id: str) -> int:
        return len({a.annotator for a in self.annotations(candidate_id) if not a.was_cancelled})

    def history(self, candidate_id: str) -> list[DecisionEntry]:
        return list(self.store.history.get(candidate_id, []))

    def _of_round(self, round_id: int) -> list[Candidate]:
        return [copy.deepcopy(c) for c in self.store.candidates.values() if c.round_id == round_id]

    def count_with_status(self, round_id: int, status: CandidateStatus) -> int:
        return sum(1 for c in self._of_round(round_id) if c.status is status)

    def submitted_counts(self, round_id: int, submitted_by: str) -> dict[tuple[str, bool], int]:
        counts: dict[tuple[str, bool], int] = {}
        for c in self._of_round(round_id):
            if c.submitted_by == submitted_by:
                key = (c.status.value, bool(c.fooled))
                counts[key] = counts.get(key, 0) + 1
        return counts

    def submitted_page(self, round_id: int, submitted_by: str, *, offset: int, limit: int) -> list[Candidate]:
        found = sorted(
            (c for c in self._of_round(round_id) if c.submitted_by == submitted_by),
            key=lambda c: (c.submitted_at, c.id),
            reverse=True,
        )
        return found[offset : offset + limit]

    def page_with_status(
        self, round_id: int, status: CandidateStatus, *, after: tuple[datetime, str] | None, limit: int
    ) -> list[Candidate]:
        found = sorted(
            (c for c in self._of_round(round_id) if c.status is status),
            key=lambda c: (c.submitted_at, c.id),
        )
        if after is not None:
            found = [c for c in found if c.submitted_at is not None and (c.submitted_at, c.id) > after]
        return found[:limit]

    def queued(self, round_id: int, limit: int) -> list[Candidate]:
        found = [c for c in self._of_round(round_id) if c.status is CandidateStatus.QUEUED]
        return sorted(found, key=lambda c: (c.submitted_at, c.id))[:limit]

    def left_scoring(self, older_than: datetime, limit: int) -> list[Candidate]:
        found = [
            copy.deepcopy(c)
            for c in self.store.candidates.values()
            if c.status is CandidateStatus.SCORING
            and c.submitted_at is not None
            and c.submitted_at < older_than
        ]
        return found[:limit]

    def wanting_more_votes(self, round_id: int) -> list[Candidate]:
        return [
            c
            for c in self._of_round(round_id)
            if c.label_studio_task_id is not None and c.wants_more_annotations
        ]

    def annotated_by(self, round_id: int, annotator: str) -> list[str]:
        return sorted(
            cid
            for cid, records in self.store.annotations.items()
            if self.store.candidates[cid].round_id == round_id
            and any(a.annotator == annotator for a in records)
        )

    def annotators(self, round_id: int) -> set[str]:
        voters = {
            a.annotator
            for cid, records in self.store.annotations.items()
            if self.store.candidates[cid].round_id == round_id
            for a in records
        }
        return voters | {
            a.annotator
            for a in self.store.gold_answers.values()
            if self.store.gold[a.gold_item_id].round_id == round_id
        }


class FakeGold:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def add(self, item: GoldItem) -> None:
        self.store.gold[item.id] = copy.deepcopy(item)

    def get(self, item_id: str, *, for_update: bool = False) -> GoldItem | None:
        found = self.store.gold.get(item_id)
        return copy.deepcopy(found) if found is not None else None

    def by_task(self, round_id: int, task_id: int) -> GoldItem | None:
        for g in self.store.gold.values():
            if g.round_id == round_id and g.label_studio_task_id == task_id:
                return copy.deepcopy(g)
        return None

    def to_push(self, round_id: int, limit: int) -> list[GoldItem]:
        found = [
            g for g in self.store.gold.values() if g.round_id == round_id and g.label_studio_task_id is None
        ]
        return [copy.deepcopy(g) for g in found[: max(limit, 0)]]

    def save(self, item: GoldItem) -> None:
        self.store.gold[item.id] = copy.deepcopy(item)

    def answers_of_item(self, item_id: str) -> list[GoldAnswer]:
        return [a for a in self.store.gold_answers.values() if a.gold_item_id == item_id]

    def put_answer(self, round_id: int, answer: GoldAnswer, received_at: datetime) -> None:
        self.store.gold_answers[answer.annotation_id] = answer

    def delete_answer(self, annotation_id: int) -> None:
        self.store.gold_answers.pop(annotation_id, None)

    def answers(self, round_id: int) -> list[tuple[GoldAnswer, str]]:
        return [
            (a, self.store.gold[a.gold_item_id].label)
            for a in self.store.gold_answers.values()
            if self.store.gold[a.gold_item_id].round_id == round_id
        ]


class FakeAnnotators:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def excluded(self, round_id: int) -> frozenset[str]:
        return frozenset(a for (r, a), s in self.store.statuses.items() if r == round_id and s.excluded)

    def status(self, round_id: int, annotator: str) -> AnnotatorStatus | None:
        return self.store.statuses.get((round_id, annotator))

    def statuses(self, round_id: int) -> dict[str, AnnotatorStatus]:
        return {a: s for (r, a), s in self.store.statuses.items() if r == round_id}

    def set_status(self, round_id: int, status: AnnotatorStatus) -> None:
        self.store.statuses[(round_id, status.annotator)] = status

    def log(self, event: ExclusionEvent) -> None:
        self.store.exclusion_events.append(event)

    def events(self, round_id: int) -> list[ExclusionEvent]:
        return [e for e in self.store.exclusion_events if e.round_id == round_id]


class FakeAudit:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def add(self, event: AuditEvent) -> None:
        self.store.audit.append(dataclasses.replace(event, id=len(self.store.audit) + 1))

    def of_round(self, round_id: int) -> list[AuditEvent]:
        return [e for e in self.store.audit if e.round_id == round_id]

    def of_candidate(self, candidate_id: str) -> list[AuditEvent]:
        return [e for e in self.store.audit if e.candidate_id == candidate_id]


def _columns(record: AnnotationRecord) -> dict[str, Any]:
    """A stored annotation's columns, as :class:`StoredCandidate` holds them."""
    columns = {
        "annotator_id": record.annotator,
        "label": record.label,
        "flagged": record.flagged,
        "flag_reason": record.reason,
        "was_cancelled": record.was_cancelled,
        "lead_time_s": record.lead_time_s,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }
    assert tuple(columns) == ANNOTATION_FIELDS
    return columns


def _record(annotation_id: int, values: dict[str, Any], *, late: bool) -> AnnotationRecord:
    return AnnotationRecord(
        annotation_id=annotation_id,
        annotator=values["annotator_id"],
        label=values["label"],
        flagged=values["flagged"],
        reason=values["flag_reason"],
        was_cancelled=values["was_cancelled"],
        updated_at=values["updated_at"],
        created_at=values["created_at"],
        lead_time_s=values["lead_time_s"],
        late=late,
    )


class FakeVoteStore:
    """The votes read back from Label Studio: the store's annotations, written as the SQL store does."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def task_kinds(self, round_id: int, task_ids: Collection[int]) -> dict[int, str]:
        kinds = {
            c.label_studio_task_id: "candidate"
            for c in self.store.candidates.values()
            if c.round_id == round_id and c.label_studio_task_id in task_ids
        }
        kinds.update(
            (g.label_studio_task_id, "gold")
            for g in self.store.gold.values()
            if g.round_id == round_id and g.label_studio_task_id in task_ids
        )
        return {task: kind for task, kind in kinds.items() if task is not None}

    def lock_candidates(self, round_id: int, task_ids: Collection[int]) -> dict[int, StoredCandidate]:
        found: dict[int, StoredCandidate] = {}
        for c in self.store.candidates.values():
            if c.round_id == round_id and c.label_studio_task_id in task_ids:
                records = self.store.annotations.get(c.id, [])
                found[c.label_studio_task_id] = StoredCandidate(
                    copy.deepcopy(c),
                    {r.annotation_id: _columns(r) for r in records},
                    {r.annotation_id for r in records if r.late},
                )
        return found

    def annotation_owners(self, annotation_ids: Collection[int]) -> dict[int, str]:
        return {
            r.annotation_id: cid
            for cid, records in self.store.annotations.items()
            for r in records
            if r.annotation_id in annotation_ids
        }

    def write(self, writes: VoteWrites) -> None:
        gone = set(writes.deleted)
        for cid, records in self.store.annotations.items():
            self.store.annotations[cid] = [r for r in records if r.annotation_id not in gone]
        for row in writes.inserted:
            values = {name: row[name] for name in ANNOTATION_FIELDS}
            self.store.annotations.setdefault(row["candidate_id"], []).append(
                _record(row["id"], values, late=row["late"])
            )
        for row in writes.updated:
            for records in self.store.annotations.values():
                for i, r in enumerate(records):
                    if r.annotation_id == row["id"]:
                        values = {name: row[name] for name in ANNOTATION_FIELDS}
                        records[i] = _record(r.annotation_id, values, late=r.late)
        for d in writes.decisions:
            c = self.store.candidates[d["candidate_id"]]
            c.status = CandidateStatus(d["status"])
            c.decision = d["decision"]
            c.wanted_votes = d["wanted_votes"]
            c.decided_at = d["decided_at"]
            c.label_studio_read_at = d["read_at"]
            c.version += 1
        for h in writes.history:
            entry = DecisionEntry(**{k: v for k, v in h.items() if k != "candidate_id"})
            self.store.history.setdefault(h["candidate_id"], []).append(entry)
        for r in writes.read_only:
            self.store.candidates[r["candidate_id"]].label_studio_read_at = r["read_at"]


class FakeTaskChecks:
    """The tasks waiting to be read back (only what the reads use)."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def request(self, round_id: int, task_ids: Sequence[int], at: datetime) -> None:
        self.request_each(round_id, dict.fromkeys(task_ids, at))

    def last_read(self, round_id: int, task_ids: Collection[int]) -> dict[int, datetime]:
        return {
            c.label_studio_task_id: c.label_studio_read_at
            for c in self.store.candidates.values()
            if c.round_id == round_id
            and c.label_studio_task_id in task_ids
            and c.label_studio_read_at is not None
        }

    def request_each(self, round_id: int, times: Mapping[int, datetime]) -> None:
        for task_id, at in times.items():  # a request waiting keeps the later time, as stored
            waiting = self.store.task_checks.get((round_id, task_id))
            self.store.task_checks[(round_id, task_id)] = at if waiting is None else max(waiting, at)

    def pending(self, round_id: int, *, until: datetime, limit: int) -> list[int]:
        waiting = sorted(
            (at, task) for (r, task), at in self.store.task_checks.items() if r == round_id and at <= until
        )
        return [task for _at, task in waiting[:limit]]

    def settle(self, round_id: int, task_ids: Collection[int], read_at: datetime) -> int:
        settled = [
            key
            for key, at in self.store.task_checks.items()
            if key[0] == round_id and key[1] in task_ids and at <= read_at
        ]
        for key in settled:
            del self.store.task_checks[key]
        return len(settled)

    def settle_round(self, round_id: int, read_at: datetime) -> int:
        return self.settle(round_id, [t for r, t in self.store.task_checks if r == round_id], read_at)


class FakeCaptures:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def add_many(self, captures: Sequence[Capture]) -> None:
        for capture in captures:
            if capture.reference is not None and self.by_references(capture.round_id, [capture.reference]):
                raise Conflict("a reference is already taken", field="reference")
            self.store.captures[capture.candidate_id] = capture

    def get(self, candidate_id: str) -> Capture | None:
        return self.store.captures.get(candidate_id)

    def by_references(self, round_id: int, references: Collection[str]) -> dict[str, str]:
        return {
            c.reference: c.candidate_id
            for c in self.store.captures.values()
            if c.round_id == round_id and c.reference is not None and c.reference in references
        }

    def accepted_captures(self, round_id: int | None = None) -> list[AcceptedCapture]:
        return [
            AcceptedCapture(c.candidate_id, c.round_id, dict(cand.inputs), cand.writer_label, c.source)
            for c in self.store.captures.values()
            if (cand := self.store.candidates[c.candidate_id]).status is CandidateStatus.ACCEPTED
            and round_id in (None, c.round_id)
        ]


class FakeNearDuplicateIndex:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def serialize_checks(self, task_type: str) -> None:
        """One thread at a time uses the fake store: nothing to hold."""

    def add(
        self, candidate_id: str, task_type: str, keys: Collection[int] | bytes, vector: bytes | None = None
    ) -> None:
        assert candidate_id not in self.store.near_duplicate_examples, f"{candidate_id} is indexed already"
        assert not isinstance(keys, bytes), "the fake indexes texts' band keys only"
        self.store.near_duplicate_examples[candidate_id] = (task_type, frozenset(keys))
        self.store.near_duplicate_vectors.append((candidate_id, task_type, vector))

    def add_many(self, examples: Sequence[tuple[str, str, Collection[int] | bytes, bytes | None]]) -> None:
        for candidate_id, task_type, keys, vector in examples:
            self.add(candidate_id, task_type, keys, vector)

    def examples(self, candidate_ids: Collection[str]) -> dict[str, EarlierExample]:
        found = (self.store.candidates[c] for c in candidate_ids if c in self.store.candidates)
        return {c.id: EarlierExample(c.id, c.round_id, dict(c.inputs), c.submitted_by) for c in found}

    def vectors_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        rows = [
            (i, c, v)
            for i, (c, t, v) in enumerate(self.store.near_duplicate_vectors, start=1)
            if t == task_type and i > seq
        ]
        return rows[:limit] if limit is not None else rows

    def vectors_of(self, candidate_ids: Collection[str]) -> dict[str, bytes]:
        latest = {c: v for c, _t, v in self.store.near_duplicate_vectors}
        return {c: v for c in candidate_ids if (v := latest.get(c)) is not None}

    def keys_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        rows = [
            (i, c, keys_to_bytes(self.store.near_duplicate_examples[c][1]))
            for i, (c, t, _v) in enumerate(self.store.near_duplicate_vectors, start=1)
            if t == task_type and i > seq
        ]
        return rows[:limit] if limit is not None else rows

    def without_vectors(
        self, limit: int, *, passing_over: Collection[str] = ()
    ) -> list[tuple[str, str, dict[str, str]]]:
        latest = {c: (t, v) for c, t, v in self.store.near_duplicate_vectors}
        missing = [
            (c, t, dict(self.store.candidates[c].inputs))
            for c, (t, v) in latest.items()
            if v is None and t not in passing_over
        ]
        return missing[:limit]

    def set_vectors(self, vectors: Sequence[tuple[str, str, bytes]]) -> None:
        self.store.near_duplicate_vectors.extend(vectors)

    def unindexed(self, limit: int) -> list[tuple[str, str, dict[str, str]]]:
        missing = [
            c for c in self.store.candidates.values() if c.id not in self.store.near_duplicate_examples
        ]
        missing.sort(key=lambda c: (c.submitted_at or datetime.min.replace(tzinfo=UTC), c.id))
        return [(c.id, self.store.rounds[c.round_id].task_type, dict(c.inputs)) for c in missing[:limit]]

    def size(self) -> int:
        return len(self.store.near_duplicate_examples)

    def record(self, check: NearDuplicateCheck) -> None:
        self.store.near_duplicate_checks[check.candidate_id] = check

    def checks_of(self, candidate_ids: Collection[str]) -> dict[str, NearDuplicateCheck]:
        return {
            c: self.store.near_duplicate_checks[c]
            for c in candidate_ids
            if c in self.store.near_duplicate_checks
        }

    def flagged(self, round_id: int, *, limit: int | None = None) -> list[str]:
        checks = self.store.near_duplicate_checks.values()
        ids = [c.candidate_id for c in checks if c.round_id == round_id and c.flagged]
        earliest = datetime.min.replace(tzinfo=UTC)
        ordered = sorted(ids, key=lambda c: (self.store.candidates[c].submitted_at or earliest, c))
        return ordered if limit is None else ordered[:limit]

    def flagged_count(self, round_id: int) -> int:
        return len(self.flagged(round_id))

    def round_band_keys(self, round_id: int) -> dict[str, bytes | None]:
        return {
            c: keys_to_bytes(keys)
            for c, (_task, keys) in sorted(self.store.near_duplicate_examples.items())
            if c in self.store.candidates and self.store.candidates[c].round_id == round_id
        }


class FakeUnitOfWork:
    """A unit of work on a copy of the store: committed, the copy becomes the store."""

    def __init__(self, store: FakeStore) -> None:
        self._shared = store

    def __enter__(self) -> Self:
        self._work = copy.deepcopy(self._shared)
        self.rounds = FakeRounds(self._work)
        self.candidates = FakeCandidates(self._work)
        self.gold = FakeGold(self._work)
        self.annotators = FakeAnnotators(self._work)
        self.audit = FakeAudit(self._work)
        self.votes = FakeVoteStore(self._work)
        self.task_checks = FakeTaskChecks(self._work)
        self.captures = FakeCaptures(self._work)
        self.near_duplicates = FakeNearDuplicateIndex(self._work)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        pass  # not committed: the copy is dropped

    def commit(self) -> None:
        self._work.commits = self._shared.commits + 1
        for name in (f.name for f in dataclasses.fields(FakeStore)):
            setattr(self._shared, name, copy.deepcopy(getattr(self._work, name)))

    def flush(self) -> None:
        pass


@dataclass
class RecordedWork:
    """The work queue port, recording what the use cases ask for."""

    pushes: list[int] = field(default_factory=list)
    escalations: list[int] = field(default_factory=list)
    verifications: list[int] = field(default_factory=list)

    def push_soon(self, round_id: int) -> None:
        self.pushes.append(round_id)

    def escalate_soon(self, round_id: int) -> None:
        self.escalations.append(round_id)

    def verify_soon(self, round_id: int) -> None:
        self.verifications.append(round_id)

    def hint_soon(self, round_id: int, task_ids: Collection[int], at: datetime) -> bool:
        return False  # no worker here: the webhook records its tasks itself


@dataclass
class FakeLabelStudio:
    """Our Label Studio port: tasks imported, overlaps asked for, and a switch that makes it fail."""

    down: bool = False
    tasks: dict[str, int] = field(default_factory=dict)
    """candidate or gold item id -> task id"""
    overlaps: dict[int, tuple[int, bool]] = field(default_factory=dict)
    imports: int = 0
    users: dict[str, int] = field(default_factory=dict)
    """Label Studio users' ids by email."""
    user_lookups: int = 0
    exported: list[ExportedTask] = field(default_factory=list)
    updated_data: dict[int, dict[str, Any]] = field(default_factory=dict)
    """What Label Studio holds of the project's tasks and their annotations (read back as is)."""

    def _check(self) -> None:
        if self.down:
            raise LabelStudioUnavailable("Label Studio could not be reached to import tasks: ConnectError")

    def import_tasks(self, *, project_id: int, tasks: list[dict[str, Any]]) -> list[int]:
        self._check()
        self.imports += 1
        ids = []
        for task in tasks:
            self.tasks[task["candidate_id"]] = 1000 + len(self.tasks)
            ids.append(self.tasks[task["candidate_id"]])
        return ids

    def update_task_data(self, *, task_id: int, data: Mapping[str, Any]) -> None:
        self._check()
        self.updated_data[task_id] = dict(data)

    def find_tasks(self, *, project_id: int, candidate_ids: list[str]) -> dict[str, int]:
        self._check()
        return {c: self.tasks[c] for c in candidate_ids if c in self.tasks}

    def set_task_overlap(self, *, task_id: int, overlap: int, is_labeled: bool) -> None:
        self._check()
        self.overlaps[task_id] = (overlap, is_labeled)

    def read_tasks(self, *, project_id: int, task_ids: list[int], task_type: TaskType) -> list[ExportedTask]:
        self._check()
        return [task for task in self.exported if task.task_id in task_ids]

    def export_tasks(self, *, project_id: int, task_type: TaskType) -> list[ExportedTask]:
        self._check()
        return list(self.exported)

    def task_url(self, project_id: int, task_id: int) -> str:
        return f"http://label-studio.invalid/projects/{project_id}/data?task={task_id}"

    def user_ids_by_email(self) -> dict[str, int]:
        self._check()
        self.user_lookups += 1
        return dict(self.users)


def fake_services(store: FakeStore, label_studio: FakeLabelStudio | None = None, **settings: Any) -> Services:
    """Services whose storage is ``store``, with a recording work queue and no model."""
    values: dict[str, Any] = {"development": True, "pseudonym_secret": "p" * 20, "signing_secret": "s" * 20}
    values.update(settings)

    def no_model(folder: Path) -> Any:
        raise AssertionError(f"no model is loaded in these tests ({folder})")

    return Services(
        settings=Settings(**values),
        catalog=LabelConfigCatalog(REPO / "label_config"),
        label_studio=label_studio or FakeLabelStudio(),  # type: ignore[arg-type]
        models=ModelRegistry(factory=no_model),
        uow=lambda *, read_only=False, wait_for_writers=True: FakeUnitOfWork(store),  # type: ignore[arg-type,return-value]
        work=RecordedWork(),
    )
