"""Keeping the round dataset's records: written when a decision is made, rebuilt on demand.

Every change that alters a record (an acceptance, a decision that leaves ``accepted``, an override,
an annotator excluded or reinstated, the gold rule, a late or re-read vote, a reconcile, a writer's
linked account, a revalidation) changes the candidate, its annotations or its capture. The
database marks the candidate stale on each such change, whatever wrote it (migration 0024), and
the unit of work calls :func:`keep_records` just before it commits: the records are written in the
same transaction as the change, so a record never disagrees with the decision beside it. What a
round's records take from the round itself (its state, policy, project) is read when exported.

:func:`rebuild_records` writes every record of a round again from scratch with the same builder
and reports what differed: after a change of ``DYNAVAL_PSEUDONYM_SECRET``, a restore, or a new
record format. :func:`bring_round_up_to_date` writes a round's records that are still marked stale
(those of an upgrade, or of a write made outside a unit of work) before an export reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from dynaval.domain.errors import NotFound
from dynaval.domain.releases.rows import kept_release_line
from dynaval.service_layer.dataset_records.dataset_port import DatasetReads, KeptRecord, RecordStore
from dynaval.service_layer.dataset_records.record_builder import RecordBuilder
from dynaval.service_layer.dataset_records.stored_record import (
    image_inputs,
    kept_columns,
    pack_columns,
    stored_form,
)

if TYPE_CHECKING:
    from dynaval.settings import Settings

log = logging.getLogger(__name__)

CHUNK = 2000
"""Candidates written per transaction by a rebuild or a catch-up."""


@dataclass
class RecordChanges:
    """What writing a set of records changed."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0

    def extend(self, other: RecordChanges) -> None:
        self.added += other.added
        self.changed += other.changed
        self.removed += other.removed
        self.unchanged += other.unchanged

    @property
    def differed(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)


def keep_records(store: RecordStore, settings: Settings) -> RecordChanges:
    """Write the records of the candidates this transaction marked stale (called before a commit)."""
    return write_records(store, settings, store.take_own_stale())


def write_records(store: RecordStore, settings: Settings, candidate_ids: Iterable[str]) -> RecordChanges:
    """Build these candidates' records as they are now and write those that differ from the kept
    ones; remove the records of those that are no longer accepted. A chunk of them at a time, so
    that a change to many (an annotator excluded from a large round) holds a chunk's records in
    memory, not all of them."""
    ids = sorted(set(candidate_ids))
    changes = RecordChanges()
    store.lock(ids)
    for start in range(0, len(ids), CHUNK):
        changes.extend(_write_chunk(store, settings, ids[start : start + CHUNK]))
    return changes


def _write_chunk(store: RecordStore, settings: Settings, ids: Sequence[str]) -> RecordChanges:
    changes = RecordChanges()
    kept = store.kept(ids)
    built = _built(store, settings, ids)
    written = []
    for candidate_id, record in built.items():
        before = kept.get(candidate_id)
        if before is None:
            changes.added.append(candidate_id)
        elif before != record:
            changes.changed.append(candidate_id)
        else:
            changes.unchanged += 1
            continue
        written.append(record)
    changes.removed = [candidate_id for candidate_id in kept if candidate_id not in built]
    if written or changes.removed:
        store.replace(changes.removed, written)
    return changes


def _built(store: RecordStore, settings: Settings, ids: Sequence[str]) -> dict[str, KeptRecord]:
    built: dict[str, KeptRecord] = {}
    for header, page in store.accepted_pages(ids):
        builder = RecordBuilder(settings, header)
        for record in builder.page(page):
            images = image_inputs(record)
            candidate_id = record["example_id"]
            built[candidate_id] = KeptRecord(
                candidate_id=candidate_id,
                round_id=header.id,
                record=stored_form(record),
                image_inputs=orjson.dumps(images, option=orjson.OPT_SORT_KEYS).decode() if images else None,
                columns=pack_columns(kept_columns(record)),
                release_line=_release_line(record),
            )
    return built


def _release_line(record: dict[str, Any]) -> bytes:
    """The record's kept release line; a record no release row can be made of (none is known) keeps
    a line that names only its example, which a build makes from the record instead (and fails on
    there, as it would have), rather than this commit failing and its decision with it."""
    try:
        return kept_release_line(record)
    except (KeyError, TypeError, ValueError):
        log.warning(
            "no release line kept for %s: a release makes its row from its record", record["example_id"]
        )
        return orjson.dumps({"example_id": record["example_id"]})


def bring_round_up_to_date(reads: DatasetReads, settings: Settings, round_id: int) -> int:
    """Write the round's records still marked stale, a chunk per transaction; how many.

    A read looks for marks first: an export of a round with none (the usual case) takes no write
    lock (SQLite's is the database's one), so writers and webhooks never wait for it. A mark it
    misses was committed after the read began, as the catch-up itself would miss it."""
    if not reads.any_stale(round_id):
        return 0
    done = 0
    while True:
        with reads.record_writes() as store:
            store.hold_round(round_id)
            ids = store.take_stale_of_round(round_id, CHUNK)
            if not ids:
                return done
            write_records(store, settings, ids)
        done += len(ids)


@dataclass
class RebuildReport:
    rounds: list[int]
    checked: int
    changes: RecordChanges


def rebuild_records(reads: DatasetReads, settings: Settings, round_id: int | None = None) -> RebuildReport:
    """Write every record of the round (of every round when None) again from the stored
    candidates and votes, a chunk per transaction, and report what differed from the kept ones."""
    if round_id is not None and reads.round(round_id) is None:
        raise NotFound(f"round {round_id} does not exist", field="round")
    if round_id is not None:
        rounds = [round_id]
    else:
        with reads.record_writes() as store:
            rounds = store.round_ids()
    changes = RecordChanges()
    checked = 0
    for current in rounds:
        after: object | None = None
        while True:
            with reads.record_writes() as store:
                store.hold_round(current)
                ids, after = store.accepted_ids(current, after=after, limit=CHUNK)
                if not ids:
                    break
                store.clear_stale(ids)
                changes.extend(write_records(store, settings, ids))
            checked += len(ids)
        with reads.record_writes() as store:  # those that left "accepted": their records go
            gone = store.kept_not_accepted(current)
        for start in range(0, len(gone), CHUNK):
            with reads.record_writes() as store:
                store.hold_round(current)
                chunk = gone[start : start + CHUNK]
                store.clear_stale(chunk)
                changes.extend(write_records(store, settings, chunk))
            checked += len(chunk)
    return RebuildReport(rounds=rounds, checked=checked, changes=changes)
