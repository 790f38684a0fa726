"""Candidate use cases: submit (score with the round's model) and read back."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlmodel import Session, col, select

from dynaval.adapters.orm import AnnotationRow, CandidateRow, RoundRow, utcnow
from dynaval.adapters.predictor import Prediction
from dynaval.domain.errors import Conflict, Forbidden, InvalidInput, NotFound, TooLarge, Unavailable
from dynaval.domain.policy import DecisionPolicy
from dynaval.domain.provenance import pseudonym, sign_prediction, writer_pseudonym
from dynaval.domain.text import has_visible_character, normalised
from dynaval.domain.votes import current_ballots
from dynaval.service_layer.decisions import annotation_records, decision_history, override_record
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services

MAX_WRITER_ID_CHARS = 200

ScoringCharge = Callable[[Sequence[str], str], None]
"""Charges the caller for the model work of scoring some texts (an error would name the field
given); raises to refuse. The HTTP routes pass ``dynaval.entrypoints.guards.charge_scoring``."""


def validated_inputs(
    services: Services, round_row: RoundRow, body: dict[str, Any], *, field_prefix: str = ""
) -> dict[str, str]:
    """The task type's data fields (e.g. ``text``) from a request body, each checked and
    NFC-normalised (the length limit counts what is stored)."""
    task_type = services.catalog.get(round_row.task_type)
    inputs: dict[str, str] = {}
    for name in task_type.data_fields:
        value = body.get(name)
        where = field_prefix + name
        if not isinstance(value, str):
            raise InvalidInput(f"{name} is required and must be a string", field=where)
        value = normalised(value)
        if not has_visible_character(value):
            raise InvalidInput(
                f"{name} must not be empty: it has no visible character (only spaces or invisible ones)",
                field=where,
            )
        if len(value) > services.settings.max_text_chars:
            raise TooLarge(
                f"{name} must be at most {services.settings.max_text_chars} characters", field=where
            )
        inputs[name] = value
    return inputs


def model_input(inputs: dict[str, str]) -> str:
    return "\n".join(inputs.values())


@dataclass(frozen=True)
class Submitter:
    """Who sends candidates, as their credential says: the token's name, and whether the token's
    role collects candidates for the writers it names (a collector) or submits its own (a writer,
    a lead)."""

    name: str
    collects_for_others: bool = False


def submit_candidate(
    services: Services,
    *,
    round_id: int,
    body: dict[str, Any],
    submitter: Submitter,
    charge: ScoringCharge | None = None,
) -> CandidateRow:
    """Store the candidate, score it with the round's model and tell whether it fooled the model.

    The writer is the submitter, unless the submitter is a collector, which names the writer in
    ``writer_id`` (see :func:`_writer_of`). A writer or collector reads back only the candidates
    submitted under their name. The candidate is stored (status ``scoring``) before the model runs,
    so a model failure loses nothing: the task queue's minute sweep scores it later. ``charge``, if
    given, is called once the candidate is checked and before it is stored; if it raises, nothing is.
    """
    return _submit(services, round_id, [(body, "")], submitter=submitter, charge=charge)[0]


def submit_candidates(
    services: Services,
    *,
    round_id: int,
    bodies: object,
    submitter: Submitter,
    charge: ScoringCharge | None = None,
) -> list[CandidateRow]:
    """:func:`submit_candidate` for a batch, all or nothing: every item is checked before any is
    stored (an error names ``candidates[i].field``), then all are stored in one transaction and
    scored together through the model's micro-batcher. Returns them in the order given. ``charge``
    is called once for the whole batch (naming ``candidates``)."""
    if not isinstance(bodies, list) or not bodies:
        raise InvalidInput("candidates must be a non-empty list of candidate objects", field="candidates")
    limit = services.settings.max_batch_size
    if len(bodies) > limit:
        raise TooLarge(
            f"a batch holds at most {limit} candidates; this one has {len(bodies)}", field="candidates"
        )
    where = [(body, f"candidates[{i}]") for i, body in enumerate(bodies)]
    return _submit(services, round_id, where, submitter=submitter, charge=charge, charge_field="candidates")


def _submit(
    services: Services,
    round_id: int,
    bodies: list[tuple[object, str]],
    *,
    submitter: Submitter,
    charge: ScoringCharge | None,
    charge_field: str | None = None,
) -> list[CandidateRow]:
    """Check every ``(body, where)``, charge for scoring them, store them all, then score them all."""
    with services.database.unit_of_work() as session:
        round_row = get_round(session, round_id)
        if round_row.state != "open":
            raise Conflict(f"round {round_id} is {round_row.state} and takes no candidates", field="round_id")
        rows = [
            _new_candidate(services, round_row, body, where=where, submitter=submitter)
            for body, where in bodies
        ]
        if charge is not None:
            field = charge_field or services.catalog.get(round_row.task_type).main_field
            charge([model_input(row.inputs) for row in rows], field)
        session.add_all(rows)
        session.commit()
        model_dir = round_row.model_dir
        policy = DecisionPolicy(**round_row.policy)
        model_hash = round_row.model_hash
        work = [(row.id, model_input(row.inputs)) for row in rows]
    predictions = services.models.get_path(model_dir).predict_many([text for _, text in work])
    scored = [
        _store_score(services, candidate_id, prediction, model_hash, policy)
        for (candidate_id, _), prediction in zip(work, predictions, strict=True)
    ]
    if any(row.status == "queued" for row in scored):
        services.work.push_soon(round_id)  # into Label Studio by the task queue, not in this request
    return scored


def _new_candidate(
    services: Services, round_row: RoundRow, body: object, *, where: str, submitter: Submitter
) -> CandidateRow:
    """A candidate row (not stored yet) from one request object, every field checked; an error
    names the field under ``where`` (``candidates[3].text``, or ``text`` when ``where`` is empty)."""
    prefix = f"{where}." if where else ""
    if not isinstance(body, dict):
        raise InvalidInput("each candidate must be an object", field=where or "body")
    inputs = validated_inputs(services, round_row, body, field_prefix=prefix)
    writer_label = body.get("writer_label")
    if not isinstance(writer_label, str) or writer_label not in round_row.labels:
        raise InvalidInput(
            f"writer_label must be one of: {', '.join(round_row.labels)}", field=prefix + "writer_label"
        )
    writer_id, collected_by = _writer_of(body, submitter, field=prefix + "writer_id")
    assert round_row.id is not None  # a stored round
    return CandidateRow(
        id=str(uuid.uuid4()),
        round_id=round_row.id,
        inputs=inputs,
        writer_label=writer_label,
        writer_id=writer_id,
        submitted_by=submitter.name,
        collected_by=collected_by,
        status="scoring",
    )


def _writer_of(body: dict[str, Any], submitter: Submitter, *, field: str) -> tuple[str, str | None]:
    """The candidate's writer and, when a collector submitted it, the collector's name.

    The identity comes from the credential: a writer (or a lead) is the writer, and may omit
    ``writer_id`` or give their own name; any other name is refused with 403. Only a collector
    names the writer, and must. ``null`` is the same as no ``writer_id``.
    """
    given = body.get("writer_id")
    if given is None:
        if submitter.collects_for_others:
            raise InvalidInput(
                "writer_id is required: a collector names the writer of each candidate", field=field
            )
        return submitter.name, None
    if not isinstance(given, str):
        raise InvalidInput("writer_id must be a string", field=field)
    writer_id = normalised(given).strip()
    if not has_visible_character(writer_id):
        raise InvalidInput("writer_id must not be empty", field=field)
    if len(writer_id) > MAX_WRITER_ID_CHARS:
        raise InvalidInput(f"writer_id must be at most {MAX_WRITER_ID_CHARS} characters", field=field)
    if submitter.collects_for_others:
        return writer_id, submitter.name
    if writer_id != submitter.name:
        raise Forbidden(
            "writer_id names another writer; your token says who you are: omit writer_id "
            "(only a collector's token submits for other writers)",
            field=field,
        )
    return submitter.name, None


def _store_score(
    services: Services, candidate_id: str, prediction: Prediction, model_hash: str, policy: DecisionPolicy
) -> CandidateRow:
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        if candidate.status != "scoring":
            return candidate
        fooled = prediction.label != candidate.writer_label
        candidate.model_prediction = prediction.label
        candidate.model_probabilities = prediction.probabilities
        candidate.model_signature = sign_prediction(
            services.settings.signing_secret,
            model_hash,
            candidate.inputs,
            prediction.label,
            prediction.probabilities,
        )
        candidate.fooled = fooled
        candidate.scored_at = utcnow()
        candidate.status = "queued" if fooled or policy.validate_non_fooling else "not_fooled"
        session.add(candidate)
        session.commit()
        session.refresh(candidate)
        return candidate


def score_pending(services: Services, *, older_than_s: float = 10.0, limit: int = 200) -> int:
    """Score candidates left in ``scoring`` by a model failure or a crash. Returns how many."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    with services.database.unit_of_work() as session:
        rows = session.exec(
            select(CandidateRow, RoundRow)
            .join(RoundRow, col(RoundRow.id) == CandidateRow.round_id)
            .where(CandidateRow.status == "scoring", col(CandidateRow.submitted_at) < cutoff)
            .limit(limit)
        ).all()
        work = [(c.id, c.inputs, r.model_dir, r.model_hash, DecisionPolicy(**r.policy)) for c, r in rows]
    done = 0
    for candidate_id, inputs, model_dir, model_hash, policy in work:
        try:
            prediction = services.models.get_path(model_dir).predict_one(model_input(inputs))
        except Unavailable:
            continue
        _store_score(services, candidate_id, prediction, model_hash, policy)
        done += 1
    return done


def candidate_public(services: Services, candidate: CandidateRow, *, session: Session) -> dict[str, Any]:
    """The candidate as the API shows it: votes by pseudonymous annotator, never raw identities."""
    secret = services.settings.pseudonym_secret
    ballots = current_ballots(annotation_records(session, candidate.id))
    decision = dict(candidate.decision) if candidate.decision else None
    if decision is not None:
        decision.pop("ballots", None)
        decision["excluded_annotators"] = [
            pseudonym(secret, "annotator", a) for a in decision.get("excluded_annotators", [])
        ]
        decision["decided_at"] = candidate.decided_at.isoformat() if candidate.decided_at else None
        decision["override"] = override_record(candidate)
    history = [
        {
            "outcome": d.outcome,
            "rule_version": d.rule_version,
            "cause": d.cause,
            "made_at": d.made_at.isoformat(),
        }
        for d in decision_history(session, candidate.id)
    ]
    cancelled = session.exec(
        select(AnnotationRow.id).where(
            AnnotationRow.candidate_id == candidate.id, col(AnnotationRow.was_cancelled).is_(True)
        )
    ).all()
    return {
        "id": candidate.id,
        "round_id": candidate.round_id,
        "status": candidate.status,
        "inputs": dict(candidate.inputs),
        "writer_label": candidate.writer_label,
        "writer": writer_pseudonym(secret, candidate.writer_id, candidate.collected_by),
        "collected_by": candidate.collected_by,
        "model_prediction": candidate.model_prediction,
        "model_probabilities": candidate.model_probabilities,
        "model_signature": candidate.model_signature,
        "fooled": candidate.fooled,
        "submitted_at": candidate.submitted_at.isoformat(),
        "label_studio_task_id": candidate.label_studio_task_id,
        "wanted_votes": candidate.wanted_votes,
        "votes": [
            {
                "annotator": pseudonym(secret, "annotator", b.annotator),
                "label": b.label,
                "flagged": b.flagged,
                "reason": b.reason,
            }
            for b in ballots
        ],
        "cancelled_annotations": len(cancelled),
        "agreement": (
            {
                "item_agreement": decision.get("item_agreement"),
                "majority_label": decision.get("majority_label"),
                "majority_share": decision.get("majority_share"),
                "writer_label_share": decision.get("writer_label_share"),
                "label_counts": decision.get("label_counts"),
            }
            if decision
            else None
        ),
        "decision": decision,
        "override": override_record(candidate),
        "history": history,
    }


def candidates_public(services: Services, candidate_ids: list[str]) -> list[dict[str, Any]]:
    """Candidates as the API shows them, in the order of ``candidate_ids``, read in one session."""
    with services.database.unit_of_work() as session:
        rows = [session.get(CandidateRow, candidate_id) for candidate_id in candidate_ids]
        return [candidate_public(services, row, session=session) for row in rows if row is not None]


def get_candidate(
    services: Services, candidate_id: str, *, only_submitted_by: str | None = None
) -> dict[str, Any]:
    """The candidate as the API shows it. With ``only_submitted_by`` (a writer's or collector's
    name), a candidate submitted under another name (or before submitters were recorded) is refused."""
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        if only_submitted_by is not None and candidate.submitted_by != only_submitted_by:
            raise Forbidden(
                f"candidate {candidate_id} is another writer's candidate; a writer or collector reads "
                "only the candidates submitted with its own token",
                field="Authorization",
            )
        return candidate_public(services, candidate, session=session)
