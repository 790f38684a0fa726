"""A round's agreement figures: the engine's report over the round's counted votes."""

from __future__ import annotations

from typing import Any

from sqlmodel import select

from dynaval.adapters.orm import CandidateRow
from dynaval.domain.agreement_engine import AgreementReport, Id, Label, agreement_report
from dynaval.domain.dawid_skene import dawid_skene_beside_majority
from dynaval.domain.errors import InvalidInput
from dynaval.domain.provenance import pseudonym
from dynaval.service_layer.rounds import get_round, round_votes, validation_cost
from dynaval.service_layer.services import Services

MAX_RESAMPLES = 10_000


def _pseudonymous(secret: str, votes: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The votes with pseudonymous annotator ids (one HMAC per annotator, not per vote)."""
    ids: dict[str, str] = {}
    for _item, annotator, _label in votes:
        if annotator not in ids:
            ids[annotator] = pseudonym(secret, "annotator", annotator)
    return [(item, ids[annotator], label) for item, annotator, label in votes]


def round_agreement_report(
    services: Services, round_id: int, *, bootstrap: int = 1000, seed: int = 0
) -> tuple[AgreementReport, dict[str, Any]]:
    """The engine's report over the round's counted votes (pseudonymous annotators), and the
    round's validation cost. Excluded annotators' votes are left out, as in decisions."""
    if not 0 <= bootstrap <= MAX_RESAMPLES:
        raise InvalidInput(f"bootstrap must be between 0 and {MAX_RESAMPLES}", field="bootstrap")
    secret = services.settings.pseudonym_secret
    with services.database.unit_of_work() as session:
        round_row = get_round(session, round_id)
        votes = _pseudonymous(secret, round_votes(session, round_id))
        writer_labels: dict[Id, Label] = dict(
            session.exec(
                select(CandidateRow.id, CandidateRow.writer_label).where(CandidateRow.round_id == round_id)
            ).all()
        )
        cost = validation_cost(session, round_row, len(votes))
        labels = list(round_row.labels)
    report = agreement_report(
        votes,
        level="nominal",
        values=labels,
        bootstrap=bootstrap,
        seed=seed,
        writer_labels=writer_labels,
    )
    return report, cost


def round_agreement(
    services: Services, round_id: int, *, bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    report, cost = round_agreement_report(services, round_id, bootstrap=bootstrap, seed=seed)
    return {"round_id": round_id, **report.to_dict(), "validation_cost": cost}


def round_dawid_skene(services: Services, round_id: int) -> dict[str, Any] | None:
    """Dawid-Skene beside the majority vote over the round's counted votes (pseudonymous)."""
    secret = services.settings.pseudonym_secret
    with services.database.unit_of_work() as session:
        round_row = get_round(session, round_id)
        votes = _pseudonymous(secret, round_votes(session, round_id))
        labels = list(round_row.labels)
    return dawid_skene_beside_majority(votes, labels=labels) if votes else None
