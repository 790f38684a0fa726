"""The round dataset: accepted candidates with full provenance, streamed in pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import func
from sqlmodel import col, select

from dynaval.adapters.orm import AnnotationRow, CandidateRow, RoundRow
from dynaval.domain.errors import NotFound
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.votes import current_votes
from dynaval.service_layer.decisions import annotation_records_of, override_record
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services

PAGE = 500


def count_accepted(services: Services, round_id: int) -> int:
    with services.database.reading() as session:
        get_round(session, round_id)
        return int(
            session.exec(
                select(func.count())
                .select_from(CandidateRow)
                .where(CandidateRow.round_id == round_id, CandidateRow.status == "accepted")
            ).one()
        )


def iter_round_dataset(services: Services, round_id: int) -> Iterator[dict[str, Any]]:
    """Yield one provenance record per accepted candidate, ordered by submission, page by page."""
    secret = services.settings.pseudonym_secret
    with services.database.reading() as session:
        round_row = get_round(session, round_id)
        round_info = {"id": round_row.id, "name": round_row.name, "state": round_row.state}
    after: tuple[Any, str] | None = None
    while True:
        with services.database.reading() as session:
            statement = select(CandidateRow).where(
                CandidateRow.round_id == round_id, CandidateRow.status == "accepted"
            )
            if after is not None:
                statement = statement.where(
                    (col(CandidateRow.submitted_at) > after[0])
                    | ((col(CandidateRow.submitted_at) == after[0]) & (col(CandidateRow.id) > after[1]))
                )
            page = session.exec(
                statement.order_by(col(CandidateRow.submitted_at), col(CandidateRow.id)).limit(PAGE)
            ).all()
            if not page:
                return
            annotations: dict[str, list[AnnotationRow]] = {}
            for row in session.exec(
                select(AnnotationRow).where(col(AnnotationRow.candidate_id).in_([c.id for c in page]))
            ).all():
                annotations.setdefault(row.candidate_id, []).append(row)
            for candidate in page:
                yield _record(secret, round_row, round_info, candidate, annotations.get(candidate.id, []))
            after = (page[-1].submitted_at, page[-1].id)


def provenance_record(services: Services, candidate_id: str) -> dict[str, Any]:
    """Any candidate's provenance record, accepted or not: the same fields as a dataset record."""
    with services.database.reading() as session:
        candidate = session.get(CandidateRow, candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        round_row = get_round(session, candidate.round_id)
        annotations = session.exec(
            select(AnnotationRow).where(AnnotationRow.candidate_id == candidate_id)
        ).all()
        round_info = {"id": round_row.id, "name": round_row.name, "state": round_row.state}
        return _record(
            services.settings.pseudonym_secret, round_row, round_info, candidate, list(annotations)
        )


def _record(
    secret: str,
    round_row: RoundRow,
    round_info: dict[str, Any],
    candidate: CandidateRow,
    annotations: list[AnnotationRow],
) -> dict[str, Any]:
    by_id = {a.id: a for a in annotations}
    votes = []
    for vote in current_votes(annotation_records_of(annotations)):
        row = by_id[vote.annotation_id]
        votes.append(
            {
                "annotator": pseudonym(secret, "annotator", vote.annotator),
                "label": vote.label,
                "flagged": vote.flagged,
                "flag_reason": vote.reason,
                "annotation_id": row.id,
                "created_at": row.created_at.isoformat(),
                "updated_at": row.updated_at.isoformat(),
                "lead_time_s": row.lead_time_s,
            }
        )
    decision = dict(candidate.decision or {})
    decision.pop("ballots", None)
    decision.pop("excluded_annotators", None)
    return {
        "example_id": candidate.id,
        "round": round_info,
        "task_type": round_row.task_type,
        "inputs": dict(candidate.inputs),
        "writer_label": candidate.writer_label,
        "writer": writer_pseudonym(secret, candidate.writer_id, candidate.collected_by),
        # The collector that submitted it for that writer (the writer's identity is its word), or
        # None when the writer's own token did.
        "collected_by": candidate.collected_by,
        "submitted_at": candidate.submitted_at.isoformat(),
        "model": {
            "name": round_row.model_name,
            "hash": round_row.model_hash,
            "prediction": candidate.model_prediction,
            "probabilities": candidate.model_probabilities,
            "signature": candidate.model_signature,
            "fooled": candidate.fooled,
        },
        "label_studio": {
            "project_id": round_row.label_studio_project_id,
            "task_id": candidate.label_studio_task_id,
        },
        "votes": votes,
        "agreement": {
            "item_agreement": decision.get("item_agreement"),
            "majority_label": decision.get("majority_label"),
            "majority_share": decision.get("majority_share"),
            "writer_label_share": decision.get("writer_label_share"),
            "label_counts": decision.get("label_counts"),
        },
        "decision": {
            # The rule's; a lead's override, which decides the status, is recorded beside it.
            "outcome": decision.get("outcome"),
            "reason": decision.get("reason"),
            "rule_version": decision.get("rule_version"),
            "policy": dict(round_row.policy),
            "decided_at": candidate.decided_at.isoformat() if candidate.decided_at else None,
            "override": override_record(candidate),
        },
    }
