"""Near-duplicates at submission: every new candidate or capture is compared with every earlier
example of its task type (every round's candidates and captures, release rows among them, and the
earlier items of its own batch), and its round's policy decides what a match leads to.

The lexical rule is the one releases use (:mod:`dynaval.domain.health.near_duplicates`, at the round's
threshold); the band keys of the shared index in the database
(:mod:`dynaval.adapters.health.near_duplicate_index`), held in each process's memory
(:mod:`dynaval.domain.health.band_keys`), find its candidates. Under ``reject`` a match refuses
the whole request (409 naming ``inputs``) before anything is stored; otherwise the new examples
are indexed, and their matches recorded (``flag`` also marks them), in the unit of work that
stores them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
import numpy.typing as npt

from dynaval.domain.errors import NearDuplicateRefused
from dynaval.domain.health.band_keys import BandKeyIndex
from dynaval.domain.health.minhash import band_keys
from dynaval.domain.health.near_duplicates import (
    MAX_REPORTED,
    EarlierExample,
    FieldShingles,
    NearDuplicateCheck,
    NearDuplicateMatch,
    NearDuplicateRule,
    best,
    field_shingles,
    lexical_matches,
)
from dynaval.domain.health.semantic_duplicates import SEMANTIC_THRESHOLD, field_cosines, to_bytes
from dynaval.domain.images.image import StoredImage
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.round import Round
from dynaval.service_layer.health import image_near_copies
from dynaval.service_layer.health.ports import SemanticIndex
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

REINDEX_BATCH = 2000
TOP_UP_PAGE = 50_000
"""Stored examples' band keys read per query when a process tops its in-memory keys up."""
LOOKUP_LIMIT = 200
"""At most this many earlier examples (those sharing the most band keys first) are confirmed per
check: a pattern repeated thousands of times still costs a bounded confirmation."""
Vector = npt.NDArray[numpy.float32]


@dataclass(frozen=True)
class Checked:
    """A new example, its band keys (an image: its fingerprint's bytes), its vector (semantic check
    on) and the near-duplicates found."""

    candidate: Candidate
    keys: list[int] | bytes
    vector: npt.NDArray[numpy.float32] | None
    matches: list[NearDuplicateMatch]


def check_new(
    services: Services,
    uow: UnitOfWork,
    round_: Round,
    task_type: TaskType,
    new: Sequence[tuple[Candidate, str]],
    encoded: Sequence[Vector | None] | None = None,
    known_images: Mapping[str, StoredImage] | None = None,
) -> list[Checked]:
    """Compare each ``(candidate, where)`` (not stored yet) with the earlier examples and the
    batch's earlier items, lexically and (``services.vectors`` set) semantically; an image task
    type's by their images (``known_images``: the new images, checked in this request; see
    :mod:`~dynaval.service_layer.health.image_near_copies`). ``encoded``: their vectors from
    :func:`encode_new`, computed before the write transaction opened (else they are encoded here).
    Under the round's ``reject`` policy the first one with a match raises
    :class:`~dynaval.domain.errors.NearDuplicateRefused`, naming ``<where>.inputs``."""
    # First: from here to the commit no other check of the task type runs, so the examples it
    # reads include every one stored before it.
    uow.near_duplicates.serialize_checks(round_.task_type)
    policy = round_.decision_policy
    if task_type.reads_images:
        return _checked_images(services, uow, round_, task_type, new, known_images or {})
    _top_up_band_keys(services.band_keys, uow, round_.task_type)
    vectors = _new_vectors(services, uow, round_, task_type, [c for c, _ in new], encoded)
    batch = _BatchCheck(
        uow,
        round_.task_type,
        task_type.data_fields,
        services.band_keys,
        services.vectors,
        policy.lexical_rule,
        policy.near_duplicate_semantic or SEMANTIC_THRESHOLD,
    )
    checked = []
    for (candidate, where), vector in zip(new, vectors, strict=True):
        keys, matches = batch.check(candidate, vector)
        if matches and policy.near_duplicates == "reject":
            raise _refused(candidate, matches, field=f"{where}.inputs" if where else "inputs")
        checked.append(Checked(candidate, keys, vector, matches))
    return checked


def _checked_images(
    services: Services,
    uow: UnitOfWork,
    round_: Round,
    task_type: TaskType,
    new: Sequence[tuple[Candidate, str]],
    known: Mapping[str, StoredImage],
) -> list[Checked]:
    policy = round_.decision_policy
    found = image_near_copies.check_images(
        uow, services.images.fingerprints, task_type, policy.image_rule, [c for c, _ in new], known
    )
    checked = []
    for (candidate, where), (fingerprint, matches) in zip(new, found, strict=True):
        if matches and policy.near_duplicates == "reject":
            raise _refused(candidate, matches, field=f"{where}.inputs" if where else "inputs")
        checked.append(Checked(candidate, fingerprint.to_bytes(), None, matches))
    return checked


def _new_vectors(
    services: Services,
    uow: UnitOfWork,
    round_: Round,
    task_type: TaskType,
    candidates: Sequence[Candidate],
    encoded: Sequence[Vector | None] | None,
) -> list[Vector | None]:
    """The candidates' vectors (``encoded``, else encoded now), once the process's semantic index
    holds every example stored before; none without a semantic check."""
    semantic = services.vectors
    if semantic is None:
        return [None] * len(candidates)
    width = len(task_type.data_fields)
    after = semantic.last_seq(round_.task_type, width)
    semantic.top_up(round_.task_type, width, uow.near_duplicates.vectors_after(round_.task_type, after))
    return list(encoded) if encoded is not None else encode_new(services, task_type, candidates)


@dataclass
class _BatchCheck:
    """The check of a batch's candidates, each against the earlier examples and the batch's earlier
    items."""

    uow: UnitOfWork
    task: str
    fields: Sequence[str]
    lexical: BandKeyIndex
    semantic: SemanticIndex | None
    rule: NearDuplicateRule
    threshold: float
    in_batch: list[tuple[EarlierExample, FieldShingles, Vector | None]] = field(default_factory=list)

    def check(
        self, candidate: Candidate, vector: Vector | None
    ) -> tuple[list[int], list[NearDuplicateMatch]]:
        """The candidate's band keys and the examples it repeats, most similar first."""
        fields = self.fields
        # The vector search runs on its own thread while the lexical half runs here.
        searching = None
        if self.semantic is not None and vector is not None:
            searching = self.semantic.matches_soon(
                self.task, len(fields), vector, threshold=self.threshold, limit=MAX_REPORTED
            )
        shingles = field_shingles(candidate.inputs, fields)
        keys = band_keys(shingles)
        found_ids = self.lexical.lookup(self.task, keys, limit=LOOKUP_LIMIT)
        stored = self.uow.near_duplicates.examples(found_ids)
        earlier = [(stored[i], field_shingles(stored[i].inputs, fields)) for i in found_ids if i in stored]
        matches = lexical_matches(shingles, earlier + [(e, s) for e, s, _v in self.in_batch], self.rule)
        if searching is not None and vector is not None:
            found = _semantic_matches(
                searching.result(), self.uow, len(fields), vector, self.threshold, self.in_batch
            )
            matches = best(matches + found)
        example = EarlierExample(candidate.id, candidate.round_id, candidate.inputs, candidate.submitted_by)
        self.in_batch.append((example, shingles, vector))
        return keys, matches


def _top_up_band_keys(lexical: BandKeyIndex, uow: UnitOfWork, task: str) -> None:
    """Add the task type's examples stored since the last this process read, a page at a time (the
    first check of a process reads them all)."""
    while True:
        rows = uow.near_duplicates.keys_after(task, lexical.last_seq(task), limit=TOP_UP_PAGE)
        lexical.top_up(task, rows)
        if len(rows) < TOP_UP_PAGE:
            return


def encode_new(services: Services, task_type: TaskType, new: Sequence[Candidate]) -> list[Vector | None]:
    """The new examples' vectors (``None`` each when the semantic check is off, or for images): the
    model's work, done before a write transaction opens so that no write waits for it."""
    if services.vectors is None or task_type.reads_images:
        return [None] * len(new)
    return list(services.vectors.encode([c.inputs for c in new], task_type.data_fields))


def _semantic_matches(
    hits: Sequence[tuple[str, float]],
    uow: UnitOfWork,
    fields: int,
    vector: npt.NDArray[numpy.float32],
    threshold: float,
    in_batch: Sequence[tuple[EarlierExample, FieldShingles, npt.NDArray[numpy.float32] | None]],
) -> list[NearDuplicateMatch]:
    """The stored examples the vector search found (``hits``: id and smallest field cosine) and the
    batch's earlier items whose every field's cosine with ``vector`` reaches ``threshold``."""
    found = uow.near_duplicates.examples([key for key, _ in hits])
    matches = [
        NearDuplicateMatch(key, found[key].round_id, value, "semantic", found[key].submitted_by)
        for key, value in hits
        if key in found
    ]
    for example, _shingles, its_vector in in_batch:
        if its_vector is not None and (value := field_cosines(vector, its_vector, fields)) >= threshold:
            matches.append(
                NearDuplicateMatch(
                    example.id, example.round_id, round(value, 4), "semantic", example.submitted_by
                )
            )
    return matches


def index_new(uow: UnitOfWork, round_: Round, checked: Sequence[Checked]) -> None:
    """Index the new examples (added to ``uow`` already) and record their matches."""
    flag = round_.decision_policy.near_duplicates == "flag"
    for item in checked:
        vector = to_bytes(item.vector) if item.vector is not None else None
        uow.near_duplicates.add(item.candidate.id, round_.task_type, item.keys, vector)
        if item.matches:
            uow.near_duplicates.record(
                NearDuplicateCheck(
                    item.candidate.id, item.candidate.round_id, tuple(item.matches), flagged=flag
                )
            )


def _refused(candidate: Candidate, matches: list[NearDuplicateMatch], *, field: str) -> NearDuplicateRefused:
    first = matches[0]
    shown = [m.shown_to(candidate.submitted_by) for m in matches]
    whose = f"your example {first.id} (round {first.round_id})" if "id" in shown[0] else "an earlier example"
    return NearDuplicateRefused(
        f"these inputs are a near-duplicate of {whose}: {first.kind} similarity {first.similarity:.2f}; "
        "this round refuses near-duplicates, so nothing was stored: write a different example",
        field=field,
        near_duplicates=shown,
    )


def shown(uow: UnitOfWork, candidate_ids: Collection[str], viewer: str | None) -> dict[str, dict[str, Any]]:
    """Each candidate's near-duplicate findings as ``viewer`` (``None``: a lead) may see them:
    ``{"near_duplicates": [...], "near_duplicate_flagged": bool}``; a candidate without matches
    gets an empty list."""
    checks = uow.near_duplicates.checks_of(candidate_ids)
    return {
        c: {
            "near_duplicates": checks[c].shown_to(viewer) if c in checks else [],
            "near_duplicate_flagged": checks[c].flagged if c in checks else False,
        }
        for c in candidate_ids
    }


def findings(
    services: Services, candidate_ids: Sequence[str], viewer: str | None
) -> list[list[dict[str, Any]]]:
    """The near-duplicates of each candidate as ``viewer`` may see them, in the order given."""
    with services.uow(read_only=True) as uow:
        found = shown(uow, candidate_ids, viewer)
    return [found[c]["near_duplicates"] for c in candidate_ids]


def flagged_candidates(services: Services, round_id: int, *, limit: int | None = None) -> dict[str, Any]:
    """The round's candidates flagged as near-duplicates, the earliest first, as a lead sees them:
    what to look at first before validators' time is spent on a repeated pattern. ``total`` counts
    them all; ``limit`` keeps the first that many in ``candidates`` (the dashboard's panel)."""
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)  # 404 for no such round
        ids = uow.near_duplicates.flagged(round_id, limit=limit)
        total = len(ids) if limit is None else uow.near_duplicates.flagged_count(round_id)
        found = uow.candidates.get_many(ids)
        checks = uow.near_duplicates.checks_of(ids)
    return {
        "round_id": round_id,
        "total": total,
        "candidates": [_flagged_public(found[c], checks[c]) for c in ids if c in found and c in checks],
    }


def _flagged_public(candidate: Candidate, check: NearDuplicateCheck) -> dict[str, Any]:
    return {
        "id": candidate.id,
        "status": candidate.status.value,
        "inputs": dict(candidate.inputs),
        "writer_label": candidate.writer_label,
        "submitted_at": candidate.submitted_at.isoformat() if candidate.submitted_at else None,
        "near_duplicates": check.shown_to(None),
    }


def reindex(services: Services, *, batch: int = REINDEX_BATCH) -> int:
    """Add every stored candidate missing from the index (those stored before the index existed,
    or restored from a backup without it), a batch per transaction, with its vector when the
    semantic check is on (and give a vector to those indexed while it was off). Returns how many
    examples were added or given a vector; a second run finds none."""
    done = 0
    while added := _index_missing(services, batch):
        done += added
    while services.vectors is not None and (given := _vectorize_missing(services, batch)):
        done += given
    return done


def _index_missing(services: Services, batch: int) -> int:
    """Index up to ``batch`` stored candidates missing from the index; how many."""
    with services.uow() as uow:
        missing = uow.near_duplicates.unindexed(batch)
        if not missing:
            return 0
        vectors = _vectors_of(services, missing)
        uow.near_duplicates.add_many(
            [
                (candidate_id, task, _index_keys(services, task, inputs), vector)
                for (candidate_id, task, inputs), vector in zip(missing, vectors, strict=True)
            ]
        )
        uow.commit()
    return len(missing)


def _index_keys(services: Services, task: str, inputs: dict[str, str]) -> list[int] | bytes:
    """A stored example's keys in the index: a text's band keys, an image's fingerprint."""
    if task in services.catalog.names() and (task_type := services.catalog.get(task)).reads_images:
        return image_near_copies.stored_fingerprint(services.images, inputs[task_type.main_field])
    return band_keys(field_shingles(inputs, _fields(services, task, inputs)))


def _image_tasks(services: Services) -> list[str]:
    return [name for name in services.catalog.names() if services.catalog.get(name).reads_images]


def _vectorize_missing(services: Services, batch: int) -> int:
    """Give up to ``batch`` indexed examples without a vector (indexed while the semantic check was
    off) their vector; how many were looked at. Images have no vector."""
    with services.uow() as uow:
        missing = uow.near_duplicates.without_vectors(batch, passing_over=_image_tasks(services))
        if not missing:
            return 0
        vectors = _vectors_of(services, missing)
        uow.near_duplicates.set_vectors(
            [(c, task, v) for (c, task, _inputs), v in zip(missing, vectors, strict=True) if v is not None]
        )
        uow.commit()
    return len(missing)


def _vectors_of(
    services: Services, examples: Sequence[tuple[str, str, dict[str, str]]]
) -> list[bytes | None]:
    """The stored form of each example's vector (``None`` each when the semantic check is off).
    Each task type's examples are encoded together, over its fields."""
    stored: list[bytes | None] = [None] * len(examples)
    if services.vectors is None:
        return stored
    positions_by_task: dict[str, list[int]] = {}
    for position, (_candidate_id, task, _inputs) in enumerate(examples):
        positions_by_task.setdefault(task, []).append(position)
    images = set(_image_tasks(services))
    for task, positions in positions_by_task.items():
        if task in images:
            continue  # an image has no vector
        inputs = [examples[position][2] for position in positions]
        encoded = services.vectors.encode(inputs, _fields(services, task, inputs[0]))
        for position, vector in zip(positions, encoded, strict=True):
            stored[position] = to_bytes(vector)
    return stored


def _fields(services: Services, task: str, inputs: dict[str, str]) -> Sequence[str]:
    """The task type's fields in its order (a task type no longer installed: the stored keys)."""
    if task in services.catalog.names():
        return services.catalog.get(task).data_fields
    return sorted(inputs)
