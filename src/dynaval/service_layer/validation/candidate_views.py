"""What a reader is shown of candidates: the API's view of one (votes by pseudonym, never a raw
identity), a submitter's own list with their figures, and the read use cases that give them. The
dashboard shows the same view of a candidate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dynaval.domain.errors import Forbidden, NotFound
from dynaval.domain.images.image import is_image_ref
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.decision import Ballot
from dynaval.domain.validation.metrics import round_counts
from dynaval.domain.validation.votes import current_ballots
from dynaval.service_layer.health import near_duplicates
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork


def candidate_public(
    services: Services, uow: UnitOfWork, candidate: Candidate, *, viewer: str | None = None
) -> dict[str, Any]:
    """The candidate as the API shows it: votes by pseudonymous annotator, never raw identities.
    ``viewer`` is the token's name of a writer, collector or reporter reading it (``None``: a lead):
    of its near-duplicates, a viewer sees the ids of its own earlier examples only."""
    secret = services.settings.pseudonym_secret
    decision = _decision_public(secret, candidate)
    return {
        "id": candidate.id,
        "round_id": candidate.round_id,
        "status": candidate.status.value,
        "inputs": dict(candidate.inputs),
        **image_urls(services, candidate.inputs),
        "writer_label": candidate.writer_label,
        "writer": writer_pseudonym(secret, candidate.writer_id, candidate.collected_by),
        "collected_by": candidate.collected_by,
        "rationale": candidate.rationale,
        "model_prediction": candidate.model_prediction,
        "model_probabilities": candidate.model_probabilities,
        "model_signature": candidate.model_signature,
        "fooled": candidate.fooled,
        "submitted_at": _iso(candidate.submitted_at),
        "label_studio_task_id": candidate.label_studio_task_id,
        "wanted_votes": candidate.wanted_votes,
        "votes": _votes_public(secret, current_ballots(uow.candidates.annotations(candidate.id))),
        "cancelled_annotations": uow.candidates.cancelled_annotations(candidate.id),
        "agreement": _agreement_public(decision),
        "decision": decision,
        "override": candidate.override.to_dict() if candidate.override else None,
        "history": _history_public(uow, candidate.id),
        # A failure capture's provenance (null for a writer's candidate); its reported label is
        # ``writer_label`` and its reporter ``writer``, as the decision rule reads them.
        "capture": _capture_public(uow, candidate),
        # The earlier examples it repeats (at most five, most similar first), and whether its
        # round's policy flagged it for leads.
        **near_duplicates.shown(uow, [candidate.id], viewer)[candidate.id],
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def _decision_public(secret: str, candidate: Candidate) -> dict[str, Any] | None:
    """The decision's figures, its annotators by pseudonym and without the ballots."""
    if not candidate.decision:
        return None
    decision = dict(candidate.decision)
    decision.pop("ballots", None)
    decision["excluded_annotators"] = [
        pseudonym(secret, "annotator", a) for a in decision.get("excluded_annotators", [])
    ]
    own = decision.pop("own_vote_ignored", None)
    # The annotator whose vote did not count because they wrote the example (None: no such vote).
    decision["own_vote_ignored"] = pseudonym(secret, "annotator", own) if own is not None else None
    decision["decided_at"] = _iso(candidate.decided_at)
    decision["override"] = candidate.override.to_dict() if candidate.override else None
    return decision


def _votes_public(secret: str, ballots: Sequence[Ballot]) -> list[dict[str, Any]]:
    return [
        {
            "annotator": pseudonym(secret, "annotator", b.annotator),
            "label": b.label,
            "flagged": b.flagged,
            "reason": b.reason,
        }
        for b in ballots
    ]


def _agreement_public(decision: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not decision:
        return None
    names = ("item_agreement", "majority_label", "majority_share", "writer_label_share", "label_counts")
    return {name: decision.get(name) for name in names}


def _history_public(uow: UnitOfWork, candidate_id: str) -> list[dict[str, Any]]:
    return [
        {
            "outcome": d.outcome,
            "rule_version": d.rule_version,
            "cause": d.cause,
            "made_at": d.made_at.isoformat(),
        }
        for d in uow.candidates.history(candidate_id)
    ]


def _capture_public(uow: UnitOfWork, candidate: Candidate) -> dict[str, Any] | None:
    capture = uow.captures.get(candidate.id)
    if capture is None:
        return None
    return {**capture.to_dict(), "reported_label": candidate.writer_label}


def candidates_public(
    services: Services, candidate_ids: list[str], *, viewer: str | None = None
) -> list[dict[str, Any]]:
    """Candidates as the API shows them (to ``viewer``, see :func:`candidate_public`), in the order
    of ``candidate_ids``, read in one unit of work."""
    with services.uow(read_only=True) as uow:
        found = uow.candidates.get_many(candidate_ids)
        return [candidate_public(services, uow, found[c], viewer=viewer) for c in candidate_ids if c in found]


def get_candidate(
    services: Services,
    candidate_id: str,
    *,
    only_submitted_by: str | None = None,
    viewer: str | None = None,
) -> dict[str, Any]:
    """The candidate as the API shows it. With ``only_submitted_by`` (a writer's or collector's
    name), a candidate submitted under another name (or before submitters were recorded) is refused.
    ``viewer`` (or else ``only_submitted_by``) is who reads it (see :func:`candidate_public`)."""
    with services.uow(read_only=True) as uow:
        candidate = uow.candidates.get(candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        if only_submitted_by is not None and candidate.submitted_by != only_submitted_by:
            raise Forbidden(
                f"candidate {candidate_id} is another writer's candidate; a writer, collector or "
                "reporter reads only the candidates submitted with its own token",
                field="Authorization",
            )
        return candidate_public(services, uow, candidate, viewer=viewer or only_submitted_by)


def image_urls(services: Services, inputs: Mapping[str, str]) -> dict[str, Any]:
    """``{"image_urls": {field: signed URL}}`` for the inputs that are stored images (an image task
    type's), to show them to whoever may read the candidate; nothing for texts."""
    urls = {
        name: stored_images.image_url(services.settings, value)
        for name, value in inputs.items()
        if is_image_ref(value)
    }
    return {"image_urls": urls} if urls else {}


def own_candidate_public(services: Services, candidate: Candidate) -> dict[str, Any]:
    """A candidate as its own submitter sees it in a list: what they wrote, what the model answered,
    and where validation stands (the votes are on ``GET /api/candidates/<id>``)."""
    return {
        "id": candidate.id,
        "status": candidate.status.value,
        "inputs": dict(candidate.inputs),
        **image_urls(services, candidate.inputs),
        "writer_label": candidate.writer_label,
        "model_prediction": candidate.model_prediction,
        "model_probabilities": candidate.model_probabilities,
        "fooled": candidate.fooled,
        "submitted_at": candidate.submitted_at.isoformat() if candidate.submitted_at else None,
        "decided_at": candidate.decided_at.isoformat() if candidate.decided_at else None,
        "rationale": candidate.rationale,
    }


def own_candidates(
    services: Services, round_id: int, *, submitted_by: str, page: int = 1, limit: int = 20
) -> dict[str, Any]:
    """The candidates submitted under ``submitted_by`` (a token's name) in the round, the newest
    first, one page of ``limit``; and that submitter's own figures: how many they submitted, how
    many fooled the model (MER: fooled / submitted) and how many of those validation accepted
    (VMER: accepted fooled / submitted), computed as the round's are over the round's candidates.
    No one else's candidate is read."""
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)  # 404 for no such round
        counts = round_counts(uow.candidates.submitted_counts(round_id, submitted_by))
        found = uow.candidates.submitted_page(round_id, submitted_by, offset=(page - 1) * limit, limit=limit)
    return {
        "round_id": round_id,
        "counts": counts.to_dict(),
        "mer": counts.mer,
        "vmer": counts.vmer,
        "total": counts.collected,
        "page": page,
        "limit": limit,
        "candidates": [own_candidate_public(services, c) for c in found],
    }
