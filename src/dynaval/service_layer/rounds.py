"""Round use cases: create, close, summarise."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from dynaval.adapters import task_checks
from dynaval.adapters.database import MAX_SERIAL_ID
from dynaval.adapters.orm import AnnotationRow, CandidateRow, RoundRow, as_utc, utcnow
from dynaval.domain.agreement import nominal_alpha
from dynaval.domain.errors import Conflict, InvalidInput, NotFound
from dynaval.domain.metrics import round_counts
from dynaval.domain.policy import RULE_VERSION, DecisionPolicy
from dynaval.domain.text import has_visible_character, normalised
from dynaval.service_layer.decisions import excluded_annotators
from dynaval.service_layer.services import Services

MAX_NAME_CHARS = 200


def resolve_model_folder(services: Services, model: str) -> Path:
    if model == "default":
        folder = services.settings.resolved_default_model_dir
        if not (folder / "config.json").is_file():
            raise InvalidInput(
                "the default model is not built yet; run `dynaval model build-default` "
                f"(expected in {folder})",
                field="model",
            )
        return folder
    folder = Path(model).expanduser()
    if not folder.is_absolute() or not folder.is_dir():
        raise InvalidInput(
            'model must be "default" or the absolute path of a local model folder', field="model"
        )
    if not (folder / "config.json").is_file():
        raise InvalidInput(f"no transformers model in {folder} (config.json missing)", field="model")
    return folder


def get_round(session: Session, round_id: int) -> RoundRow:
    # A larger id names no row; asking PostgreSQL for it would be an overflow error, not a 404.
    row = session.get(RoundRow, round_id) if 0 < round_id <= MAX_SERIAL_ID else None
    if row is None:
        raise NotFound(f"round {round_id} does not exist", field="round_id")
    return row


def create_round(
    services: Services, *, name: str, task: str, model: str, policy: dict[str, Any] | None
) -> RoundRow:
    """Validate everything first, then create the Label Studio project and webhook, then store."""
    name = normalised(name).strip()  # annotators see it (the project's title), and every dataset record
    if not has_visible_character(name):
        raise InvalidInput("name must not be empty: it has no visible character", field="name")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"name must be at most {MAX_NAME_CHARS} characters", field="name")
    task_type = services.catalog.get(task)
    decision_policy = DecisionPolicy.from_overrides(policy)
    folder = resolve_model_folder(services, model)
    predictor = services.models.get(folder).predictor
    if set(predictor.labels) != set(task_type.labels):
        raise InvalidInput(
            f"the model predicts {sorted(predictor.labels)} "
            f"but task {task!r} has labels {sorted(task_type.labels)}",
            field="model",
        )
    project_id = services.label_studio.create_project(
        title=f"dynaval: {name}"[:50], label_config=task_type.label_config, overlap=decision_policy.min_votes
    )
    webhook_id = services.label_studio.register_webhook(
        project_id=project_id,
        url=services.settings.public_url.rstrip("/") + "/webhooks/label-studio",
        secret=services.settings.webhook_secret,
    )
    with services.database.unit_of_work() as session:
        row = RoundRow(
            name=name,
            task_type=task,
            model_dir=str(folder),
            model_name=predictor.name,
            model_hash=predictor.model_hash,
            labels=list(task_type.labels),
            policy=decision_policy.to_dict(),
            label_studio_project_id=project_id,
            label_studio_webhook_id=webhook_id,
        )
        session.add(row)
        session.commit()
        session.refresh(row)
        return row


def close_round(services: Services, round_id: int) -> RoundRow:
    with services.database.unit_of_work() as session:
        row = session.exec(select(RoundRow).where(RoundRow.id == round_id).with_for_update()).first()
        if row is None:
            raise NotFound(f"round {round_id} does not exist", field="round_id")
        if row.state != "open":
            raise Conflict(f"round {round_id} is already {row.state}", field="round_id")
        row.state = "closed"
        row.closed_at = utcnow()
        session.add(row)
        session.commit()
        session.refresh(row)
        return row


def round_public(row: RoundRow, *, with_model_folder: bool) -> dict[str, Any]:
    """The round as the API shows it. The model's folder is a path on the server: only callers who
    run the service (leads) get it; everyone sees the model's name and content hash."""
    model: dict[str, Any] = {"name": row.model_name, "hash": row.model_hash}
    if with_model_folder:
        model["folder"] = row.model_dir
    return {
        "id": row.id,
        "name": row.name,
        "task": row.task_type,
        "state": row.state,
        "labels": list(row.labels),
        "model": model,
        "model_hash": row.model_hash,
        "policy": dict(row.policy),
        "rule_version": RULE_VERSION,
        "label_studio_project_id": row.label_studio_project_id,
        "created_at": row.created_at.isoformat(),
        "closed_at": row.closed_at.isoformat() if row.closed_at else None,
    }


def list_rounds(services: Services, *, with_model_folder: bool) -> list[dict[str, Any]]:
    with services.database.reading() as session:
        rows = session.exec(select(RoundRow).order_by(col(RoundRow.id))).all()
        return [round_public(r, with_model_folder=with_model_folder) for r in rows]


def current_labelled_votes(session: Session, round_id: int) -> list[tuple[str, str, str]]:
    """Every annotator's current labelled vote in the round as (candidate, annotator, label),
    excluded annotators included.

    The same votes as :func:`dynaval.domain.votes.current_votes` per candidate (latest by update
    time, then annotation id; an annotation with neither label nor flag is no vote; a flag-only
    latest vote hides an earlier label), read as plain columns and ordered by the database: a
    round of 250,000 annotations takes about a second, not the many that ORM rows would.
    """
    rows = session.exec(
        select(AnnotationRow.candidate_id, AnnotationRow.annotator_id, AnnotationRow.label)
        .where(
            AnnotationRow.round_id == round_id,
            col(AnnotationRow.was_cancelled).is_(False),
            col(AnnotationRow.label).is_not(None) | col(AnnotationRow.flagged).is_(True),
        )
        .order_by(
            col(AnnotationRow.candidate_id),
            col(AnnotationRow.annotator_id),
            col(AnnotationRow.updated_at),
            col(AnnotationRow.id),
        )
    ).all()
    latest: dict[tuple[str, str], str | None] = {}
    for candidate_id, annotator, label in rows:
        latest[(candidate_id, annotator)] = label  # ordered: the last one is the vote
    return [(c, a, label) for (c, a), label in latest.items() if label is not None]


def round_votes(session: Session, round_id: int) -> list[tuple[str, str, str]]:
    """The round's counted votes as (candidate, annotator, label): each annotator's latest
    non-cancelled labelled vote, excluded annotators left out."""
    excluded = excluded_annotators(session, round_id)
    return [vote for vote in current_labelled_votes(session, round_id) if vote[1] not in excluded]


def validation_cost(session: Session, round_row: RoundRow, votes: int) -> dict[str, Any]:
    """Votes adaptive overlap spent, against asking every validated candidate for ``max_votes``."""
    validated = session.exec(
        select(func.count())
        .select_from(CandidateRow)
        .where(CandidateRow.round_id == round_row.id, col(CandidateRow.label_studio_task_id).is_not(None))
    ).one()
    fixed = int(validated) * int(round_row.policy["max_votes"])
    return {
        "validated_candidates": int(validated),
        "votes": votes,
        "votes_at_fixed_max_overlap": fixed,
        "votes_saved": fixed - votes,
        "saved_share": (fixed - votes) / fixed if fixed else None,
    }


def round_summary(services: Services, round_id: int, *, with_model_folder: bool) -> dict[str, Any]:
    with services.database.reading() as session:
        row = get_round(session, round_id)
        grouped = session.exec(
            select(CandidateRow.status, CandidateRow.fooled, func.count())
            .where(CandidateRow.round_id == round_id)
            .group_by(col(CandidateRow.status), col(CandidateRow.fooled))
        ).all()
        counts = round_counts({(status, bool(fooled)): int(n) for status, fooled, n in grouped})
        votes = round_votes(session, round_id)
        labels_by_item: dict[str, list[str]] = defaultdict(list)
        for item, _annotator, label in votes:
            labels_by_item[item].append(label)
        alpha = nominal_alpha(labels_by_item, row.labels)
        cost = validation_cost(session, row, len(votes))
        annotations = session.exec(
            select(func.count())
            .select_from(AnnotationRow)
            .where(AnnotationRow.round_id == round_id, col(AnnotationRow.was_cancelled).is_(False))
        ).one()
        return {
            **round_public(row, with_model_folder=with_model_folder),
            "counts": counts.to_dict(),
            "mer": counts.mer,
            "vmer": counts.vmer,
            "annotations": int(annotations),
            "agreement": alpha.to_dict(),
            "validation_cost": cost,
            "verification": _verification_backlog(session, round_id),
        }


def _verification_backlog(session: Session, round_id: int) -> dict[str, Any]:
    """Tasks whose webhooks came but that were not read back from Label Studio yet: their votes
    are not counted until they are (seconds, normally)."""
    count, oldest = task_checks.waiting(session.connection(), round_id)
    return {"tasks_waiting": count, "oldest_waiting_since": as_utc(oldest).isoformat() if oldest else None}
