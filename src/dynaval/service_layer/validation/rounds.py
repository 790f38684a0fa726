"""Round use cases: create, close, freeze, list, summarise."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dynaval.domain.agreement.nominal import nominal_alpha_of_columns
from dynaval.domain.audit import AuditEvent
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.labels import LabelMapping
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import WAITING_AT_FREEZE, CandidateStatus
from dynaval.domain.validation.metrics import round_counts
from dynaval.domain.validation.policy import RULE_VERSION, DecisionPolicy
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.service_layer.regression.model_catalog import register_in
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

log = logging.getLogger(__name__)

FORCED_FREEZE = "forced-freeze"
"""The audit action of a candidate left unvalidated by a forced freeze."""
FREEZE_PAGE = 500
LATE_SHOWN = 100
"""Late annotations a round's summary lists (the newest); the count covers them all."""


def resolve_model_folder(services: Services, model: str, *, task: str) -> Path:
    """The folder of the model a round pins: ``default`` is the task's default model."""
    if model == "default":
        folder = services.settings.default_model_dir_for(task)
        if not services.models.look_at(folder).has_model:
            raise InvalidInput(
                f"the default {task} model is not built yet; run `dynaval model build-default --task {task}` "
                f"(expected in {folder})",
                field="model",
            )
        return folder
    folder = Path(model).expanduser()
    if not folder.is_absolute() or not services.models.look_at(folder).is_dir:
        raise InvalidInput(
            'model must be "default" or the absolute path of a local model folder', field="model"
        )
    if not services.models.look_at(folder).has_model:
        raise InvalidInput(f"no transformers model in {folder} (config.json missing)", field="model")
    return folder


def create_round(
    services: Services,
    *,
    name: str,
    task: str,
    model: str,
    policy: Mapping[str, Any] | None,
    kind: RoundKind = RoundKind.ADVERSARIAL,
) -> Round:
    """Check what the request model cannot (the task type, the model, the policy's values against
    one another) before anything is made, then create the Label Studio project and webhook, then
    store. ``name`` comes checked by the request model: readable text, NFC, stripped (annotators see
    it as the project's title, and every dataset record carries it). A capture round has no model
    (the request model refuses one): nothing is loaded for it, and its model fields stay empty."""
    task_type = services.catalog.get(task)
    decision_policy = DecisionPolicy.from_overrides(policy)
    pinned = _pinned_model(services, task_type, model) if kind is RoundKind.ADVERSARIAL else None
    project_id, webhook_id = _label_studio_project(services, name, task_type, decision_policy)
    with services.uow() as uow:
        round_ = uow.rounds.add(
            Round(
                name=name,
                task_type=task,
                model_dir=str(pinned.folder) if pinned else "",
                model_name=pinned.name if pinned else "",
                model_hash=pinned.hash if pinned else "",
                labels=list(task_type.labels),
                policy=decision_policy.to_dict(),
                label_studio_project_id=project_id,
                label_studio_webhook_id=webhook_id,
                kind=kind,
            )
        )
        if pinned:  # the pinned model joins the model catalog (by its content hash) with the round
            register_in(uow, folder=pinned.folder, model_hash=pinned.hash, name=pinned.name)
        uow.commit()
        return round_


def _label_studio_project(
    services: Services, name: str, task_type: TaskType, policy: DecisionPolicy
) -> tuple[int, int]:
    """The round's Label Studio project, asking ``min_votes`` annotators per task, and its webhook."""
    project_id = services.label_studio.create_project(
        title=f"dynaval: {name}"[:50], label_config=task_type.label_config, overlap=policy.min_votes
    )
    webhook_id = services.label_studio.register_webhook(
        project_id=project_id,
        url=services.settings.public_url.rstrip("/") + "/webhooks/label-studio",
        secret=services.settings.webhook_secret,
    )
    return project_id, webhook_id


@dataclass(frozen=True)
class _PinnedModel:
    folder: Path
    name: str
    hash: str


def _pinned_model(services: Services, task_type: TaskType, model: str) -> _PinnedModel:
    """The model a new round of ``task_type`` pins, loaded and checked: a classifier reads one text or
    a pair, and its labels must cover the task's."""
    fields = task_type.data_fields
    if len(fields) > 2:
        raise InvalidInput(
            f"task {task_type.name} shows {len(fields)} input fields ({', '.join(fields)}); "
            "a sequence classifier reads one text or a pair of texts",
            field="task",
        )
    folder = resolve_model_folder(services, model, task=task_type.name)
    predictor = services.models.get(folder).predictor
    if predictor.input_kind is not task_type.input_kind:
        reads = {"image": "an image", "text": "texts"}
        raise InvalidInput(
            f"task {task_type.name} shows {reads[task_type.input_kind]}, and the model in {folder.name} "
            f"reads {reads[predictor.input_kind]}: pin a model of the task's kind (an image task needs "
            "an AutoModelForImageClassification folder with its image processor)",
            field="model",
        )
    LabelMapping.between(predictor.labels, task_type.labels, task=task_type.name)
    return _PinnedModel(folder, predictor.name, predictor.model_hash)


def close_round(services: Services, round_id: int) -> Round:
    """``open`` → ``closed``: no more candidates; validation goes on."""
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id, for_update=True)
        round_.close(utcnow())
        uow.rounds.save(round_)
        uow.commit()
        return round_


@dataclass(frozen=True)
class Frozen:
    """A freeze's outcome: the round, and how many candidates it left unvalidated."""

    round: Round
    unvalidated: int


def freeze_round(
    services: Services, round_id: int, *, by: str, force: bool = False, reason: str | None = None
) -> Frozen:
    """``closed`` → ``frozen``: nothing changes a decision any more (overrides, votes, escalations,
    the gold rule), and the round's dataset may be released.

    Refused (409, nothing written) for an open or a frozen round, and while candidates still wait for
    votes (or for their push, or the model), unless a lead forces it with a ``reason`` (checked by
    the request model: readable text, NFC; required, 422 naming ``reason``). A forced freeze leaves
    those candidates ``unvalidated`` (never accepted, so in no dataset), each with a decision entry
    and an audit event naming who and why, and logs one line.

    The round's push lease is held meanwhile, so no push is half-way through moving a queued
    candidate into Label Studio while it is left unvalidated.
    """
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)  # an unknown round: 404 before anything is taken
    lease = utcnow() + timedelta(
        seconds=services.settings.push_lease_s, microseconds=random.randrange(1_000_000)
    )
    with services.uow() as uow:
        taken = uow.rounds.take_push_lease(round_id, lease, now=utcnow(), respect_backoff=False)
        uow.commit()
    if not taken:
        raise Conflict(
            f"round {round_id} is being pushed into Label Studio; freeze it again in a moment",
            field="round_id",
        )
    try:
        frozen = _freeze_under_lease(services, round_id, by=by, force=force, reason=reason)
    finally:
        with services.uow() as uow:
            uow.rounds.release_push_lease(round_id, lease)
            uow.commit()
    for after_freeze in services.after_freeze:  # a revalidation round's decisions settle its cases
        after_freeze(round_id)
    return frozen


def _freeze_under_lease(
    services: Services, round_id: int, *, by: str, force: bool, reason: str | None
) -> Frozen:
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id, for_update=True)
        waiting = sum(uow.candidates.count_with_status(round_id, s) for s in WAITING_AT_FREEZE)
        now = utcnow()
        round_.freeze(now, waiting=waiting, force=force, reason=reason)
        left = 0
        if waiting:
            assert reason is not None  # Round.freeze refuses a forced freeze without one
            for status in WAITING_AT_FREEZE:
                left += _leave_unvalidated(uow, round_id, status, by=by, reason=reason, at=now)
        uow.rounds.save(round_)
        uow.commit()
    if left:
        log.warning(
            "round %s frozen by force by %s, %d candidate(s) left unvalidated; reason: %s",
            round_id,
            by,
            left,
            reason,
        )
    else:
        log.info("round %s frozen by %s", round_id, by)
    return Frozen(round_, left)


def _leave_unvalidated(
    uow: UnitOfWork, round_id: int, status: CandidateStatus, *, by: str, reason: str, at: datetime
) -> int:
    """Leave every candidate of the round with ``status`` unvalidated, a page at a time."""
    left = 0
    while True:
        # Each page leaves ``status``, so the next page is again the first.
        page = uow.candidates.page_with_status(round_id, status, after=None, limit=FREEZE_PAGE)
        if not page:
            return left
        locked = []
        for found in page:
            # Row-locked and read again: a read of Label Studio may have decided it meanwhile.
            candidate = uow.candidates.get(found.id, for_update=True)
            if candidate is None or candidate.status is not status:
                continue
            locked.append(candidate)
            before = candidate.leave_unvalidated(by=by, reason=reason, at=at)
            uow.audit.add(
                AuditEvent(
                    round_id=round_id,
                    candidate_id=candidate.id,
                    action=FORCED_FREEZE,
                    by=by,
                    reason=reason,
                    status_before=before.value,
                    status_after=candidate.status.value,
                    at=at,
                )
            )
        if not locked:
            return left
        uow.candidates.save_many(locked)
        uow.flush()
        left += len(locked)


def round_public(services: Services, round_: Round, *, with_model_folder: bool) -> dict[str, Any]:
    """The round as the API shows it. The model's folder is a path on the server: only callers who
    run the service (leads) get it; everyone sees the model's name and content hash. ``inputs`` are
    the task type's data fields in order (``text``; ``premise``, ``hypothesis``): the keys of a
    candidate's ``inputs``, which a front end such as the writers' page builds its form from
    (``input_kind``: texts, or an image to draw); ``fields`` describes them, and the optional
    ``rationale``, as ``GET /api/task-types`` does."""
    model: dict[str, Any] | None = None
    if round_.has_model:  # a capture round has none
        model = {"name": round_.model_name, "hash": round_.model_hash}
        if with_model_folder:
            model["folder"] = round_.model_dir
    return {
        "id": round_.id,
        "name": round_.name,
        "kind": round_.kind.value,
        "task": round_.task_type,
        "state": round_.state.value,
        "inputs": list(services.catalog.get(round_.task_type).data_fields),
        "input_kind": str(services.catalog.get(round_.task_type).input_kind),
        "labels": list(round_.labels),
        "fields": services.catalog.get(round_.task_type).fields(),
        "model": model,
        "model_hash": round_.model_hash if round_.has_model else None,
        "policy": dict(round_.policy),
        "rule_version": RULE_VERSION,
        "label_studio_project_id": round_.label_studio_project_id,
        "created_at": round_.created_at.isoformat() if round_.created_at else None,
        "closed_at": round_.closed_at.isoformat() if round_.closed_at else None,
        "frozen_at": round_.frozen_at.isoformat() if round_.frozen_at else None,
    }


def check_round_exists(services: Services, round_id: int) -> None:
    """:class:`~dynaval.domain.errors.NotFound` naming ``round_id`` unless the round exists."""
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)


def list_rounds(services: Services, *, with_model_folder: bool) -> list[dict[str, Any]]:
    with services.uow(read_only=True) as uow:
        return [round_public(services, r, with_model_folder=with_model_folder) for r in uow.rounds.all()]


def validation_cost(round_: Round, validated: int, votes: int) -> dict[str, Any]:
    """Votes adaptive overlap spent, against asking every validated candidate for ``max_votes``."""
    fixed = validated * int(round_.policy["max_votes"])
    return {
        "validated_candidates": validated,
        "votes": votes,
        "votes_at_fixed_max_overlap": fixed,
        "votes_saved": fixed - votes,
        "saved_share": (fixed - votes) / fixed if fixed else None,
    }


def _by_model(uow: UnitOfWork, round_id: int) -> list[dict[str, Any]]:
    """The round's MER and VMER per model that scored its candidates, in the order they scored."""
    out = []
    for (model_hash, name), by_status in uow.round_queries.status_counts_by_model(round_id).items():
        counts = round_counts(by_status)
        out.append(
            {
                "model": {"hash": model_hash, "name": name},
                "collected": counts.collected,
                "fooled": counts.fooled,
                "mer": counts.mer,
                "vmer": counts.vmer,
            }
        )
    return out


def round_summary(services: Services, round_id: int, *, with_model_folder: bool) -> dict[str, Any]:
    links = services.writer_annotators()
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        counts = round_counts(uow.round_queries.status_counts(round_id))
        # As integer columns: a million candidates' votes as tuples would take gigabytes.
        votes = uow.round_queries.counted_vote_codes(round_id, links)
        alpha = nominal_alpha_of_columns(votes, round_.labels)
        cost = validation_cost(round_, uow.round_queries.validated_candidates(round_id), len(votes.items))
        waiting, oldest = uow.task_checks.waiting(round_id)
        late_total, late = uow.round_queries.late_annotations(round_id, LATE_SHOWN)
        return {
            **round_public(services, round_, with_model_folder=with_model_folder),
            "counts": counts.to_dict(),
            "mer": counts.mer,
            "vmer": counts.vmer,
            # Which model each MER was measured against: one entry per model that scored candidates
            # of the round (two or more once a retraining policy's swap replaced its model).
            "by_model": _by_model(uow, round_id),
            "annotations": uow.round_queries.annotation_count(round_id),
            # Read after the round was frozen: stored, never counted (the newest LATE_SHOWN listed).
            "late_annotations": {"count": late_total, "latest": [a.to_dict() for a in late]},
            "agreement": alpha.to_dict(),
            "validation_cost": cost,
            # Tasks whose webhooks came but that were not read back from Label Studio yet: their
            # votes are not counted until they are (a second or two, normally).
            "verification": {
                "tasks_waiting": waiting,
                "oldest_waiting_since": oldest.isoformat() if oldest else None,
            },
        }
