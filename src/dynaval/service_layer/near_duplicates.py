"""Near-duplicates at submission: every new candidate or capture is compared with every earlier
example of its task type (every round's candidates and captures, release rows among them, and the
earlier items of its own batch), and its round's policy decides what a match leads to.

The lexical rule is the one releases use (:mod:`dynaval.domain.near_duplicates`, at the round's
threshold); the shared index in the database finds its candidates
(:mod:`dynaval.adapters.near_duplicate_index`). Under ``reject`` a match refuses the whole request
(409 naming ``inputs``) before anything is stored; otherwise the new examples are indexed, and their
matches recorded (``flag`` also marks them), in the unit of work that stores them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from dynaval.adapters.minhash_index import band_keys
from dynaval.domain.candidate import Candidate
from dynaval.domain.errors import NearDuplicateRefused
from dynaval.domain.near_duplicates import (
    EarlierExample,
    FieldShingles,
    NearDuplicateCheck,
    NearDuplicateMatch,
    field_shingles,
    lexical_matches,
)
from dynaval.domain.round import Round
from dynaval.domain.task_type import TaskType
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

REINDEX_BATCH = 2000


@dataclass(frozen=True)
class Checked:
    """A new example, its band keys and the near-duplicates found for it."""

    candidate: Candidate
    keys: list[int]
    matches: list[NearDuplicateMatch]


def check_new(
    uow: UnitOfWork, round_: Round, task_type: TaskType, new: Sequence[tuple[Candidate, str]]
) -> list[Checked]:
    """Compare each ``(candidate, where)`` (not stored yet) with the earlier examples and the
    batch's earlier items. Under the round's ``reject`` policy the first one with a match raises
    :class:`~dynaval.domain.errors.NearDuplicateRefused`, naming ``<where>.inputs``."""
    policy = round_.decision_policy
    rule = policy.lexical_rule
    fields = task_type.data_fields
    in_batch: list[tuple[EarlierExample, FieldShingles]] = []
    checked = []
    for candidate, where in new:
        shingles = field_shingles(candidate.inputs, fields)
        keys = band_keys(shingles)
        earlier = [
            (e, field_shingles(e.inputs, fields)) for e in uow.near_duplicates.lookup(round_.task_type, keys)
        ]
        matches = lexical_matches(shingles, earlier + in_batch, rule)
        if matches and policy.near_duplicates == "reject":
            raise _refused(candidate, matches, field=f"{where}.inputs" if where else "inputs")
        checked.append(Checked(candidate, keys, matches))
        in_batch.append(
            (
                EarlierExample(candidate.id, candidate.round_id, candidate.inputs, candidate.submitted_by),
                shingles,
            )
        )
    return checked


def index_new(uow: UnitOfWork, round_: Round, checked: Sequence[Checked]) -> None:
    """Index the new examples (added to ``uow`` already) and record their matches."""
    flag = round_.decision_policy.near_duplicates == "flag"
    for item in checked:
        uow.near_duplicates.add(item.candidate.id, round_.task_type, item.keys)
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


def flagged_candidates(services: Services, round_id: int) -> dict[str, Any]:
    """The round's candidates flagged as near-duplicates, the earliest first, as a lead sees them:
    what to look at first before validators' time is spent on a repeated pattern."""
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)  # 404 for no such round
        ids = uow.near_duplicates.flagged(round_id)
        found = uow.candidates.get_many(ids)
        checks = uow.near_duplicates.checks_of(ids)
    return {
        "round_id": round_id,
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
    or restored from a backup without it), a batch per transaction. Returns how many were added;
    a second run adds none."""
    added = 0
    while True:
        with services.uow() as uow:
            missing = uow.near_duplicates.unindexed(batch)
            if not missing:
                return added
            uow.near_duplicates.add_many(
                [
                    (candidate_id, task, band_keys(field_shingles(inputs, _fields(services, task, inputs))))
                    for candidate_id, task, inputs in missing
                ]
            )
            uow.commit()
        added += len(missing)


def _fields(services: Services, task: str, inputs: dict[str, str]) -> Sequence[str]:
    """The task type's fields in its order (a task type no longer installed: the stored keys)."""
    if task in services.catalog.names():
        return services.catalog.get(task).data_fields
    return sorted(inputs)
