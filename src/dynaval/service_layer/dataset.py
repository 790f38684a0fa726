"""The round dataset: accepted candidates with full provenance, streamed in pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dynaval.domain.candidate import Candidate, CandidateStatus
from dynaval.domain.errors import NotFound
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.round import Round
from dynaval.domain.votes import AnnotationRecord, current_votes
from dynaval.service_layer.services import Services

PAGE = 500


def count_accepted(services: Services, round_id: int) -> int:
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)
        return uow.candidates.count_with_status(round_id, CandidateStatus.ACCEPTED)


def iter_round_dataset(services: Services, round_id: int) -> Iterator[dict[str, Any]]:
    """Yield one provenance record per accepted candidate, ordered by submission, page by page."""
    secret = services.settings.pseudonym_secret
    after = None
    while True:
        with services.uow(read_only=True) as uow:
            round_ = uow.rounds.get(round_id)
            page = uow.candidates.page_with_status(
                round_id, CandidateStatus.ACCEPTED, after=after, limit=PAGE
            )
            if not page:
                return
            annotations = uow.candidates.annotations_of([c.id for c in page])
        for candidate in page:
            yield _record(secret, round_, candidate, annotations[candidate.id])
        last = page[-1]
        assert last.submitted_at is not None
        after = (last.submitted_at, last.id)


def provenance_record(services: Services, candidate_id: str) -> dict[str, Any]:
    """Any candidate's provenance record, accepted or not: the same fields as a dataset record."""
    with services.uow(read_only=True) as uow:
        candidate = uow.candidates.get(candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        round_ = uow.rounds.get(candidate.round_id)
        annotations = uow.candidates.annotations(candidate_id)
    return _record(services.settings.pseudonym_secret, round_, candidate, annotations)


def _record(
    secret: str, round_: Round, candidate: Candidate, annotations: list[AnnotationRecord]
) -> dict[str, Any]:
    votes = [
        {
            "annotator": pseudonym(secret, "annotator", vote.annotator),
            "label": vote.label,
            "flagged": vote.flagged,
            "flag_reason": vote.reason,
            "annotation_id": vote.annotation_id,
            "created_at": vote.created_at.isoformat() if vote.created_at else None,
            "updated_at": vote.updated_at.isoformat(),
            "lead_time_s": vote.lead_time_s,
        }
        for vote in current_votes(annotations)
    ]
    decision = dict(candidate.decision or {})
    decision.pop("ballots", None)
    decision.pop("excluded_annotators", None)
    return {
        "example_id": candidate.id,
        "round": {"id": round_.id, "name": round_.name, "state": round_.state.value},
        "task_type": round_.task_type,
        "inputs": dict(candidate.inputs),
        "writer_label": candidate.writer_label,
        "writer": writer_pseudonym(secret, candidate.writer_id, candidate.collected_by),
        # The collector that submitted it for that writer (the writer's identity is its word), or
        # None when the writer's own token did.
        "collected_by": candidate.collected_by,
        "submitted_at": candidate.submitted_at.isoformat() if candidate.submitted_at else None,
        "model": {
            "name": round_.model_name,
            "hash": round_.model_hash,
            "prediction": candidate.model_prediction,
            "probabilities": candidate.model_probabilities,
            "signature": candidate.model_signature,
            "fooled": candidate.fooled,
        },
        "label_studio": {
            "project_id": round_.label_studio_project_id,
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
            "policy": dict(round_.policy),
            "decided_at": candidate.decided_at.isoformat() if candidate.decided_at else None,
            "override": candidate.override.to_dict() if candidate.override else None,
        },
    }
