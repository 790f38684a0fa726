"""A round's agreement figures: the engine's report over the round's counted votes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynaval.domain.agreement import AgreementReport, Id, Label, agreement_report
from dynaval.domain.agreement.dawid_skene import dawid_skene_beside_majority
from dynaval.domain.errors import InvalidInput
from dynaval.domain.provenance import pseudonym
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.rounds import validation_cost

MAX_RESAMPLES = 10_000
MAX_SEED = 2**63 - 1


def _pseudonymous(secret: str, votes: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The votes with pseudonymous annotator ids (one HMAC per annotator, not per vote)."""
    ids: dict[str, str] = {}
    for _item, annotator, _label in votes:
        if annotator not in ids:
            ids[annotator] = pseudonym(secret, "annotator", annotator)
    return [(item, ids[annotator], label) for item, annotator, label in votes]


@dataclass(frozen=True)
class _RoundVotes:
    votes: list[tuple[str, str, str]]
    writer_labels: dict[Id, Label]
    labels: list[str]
    cost: dict[str, Any]


def _read_round_votes(services: Services, round_id: int, bootstrap: int, seed: int) -> _RoundVotes:
    """One read of the round's counted votes (pseudonymous; excluded annotators left out, as in
    decisions), the writers' labels and the validation cost."""
    if not 0 <= bootstrap <= MAX_RESAMPLES:
        raise InvalidInput(f"bootstrap must be between 0 and {MAX_RESAMPLES}", field="bootstrap")
    if not 0 <= seed <= MAX_SEED:
        raise InvalidInput(f"seed must be between 0 and {MAX_SEED}", field="seed")
    secret = services.settings.pseudonym_secret
    links = services.writer_annotators()
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        votes = _pseudonymous(secret, uow.round_queries.counted_votes(round_id, links))
        writer_labels: dict[Id, Label] = dict(uow.round_queries.writer_labels(round_id))
        cost = validation_cost(round_, uow.round_queries.validated_candidates(round_id), len(votes))
    return _RoundVotes(votes, writer_labels, list(round_.labels), cost)


def _report(data: _RoundVotes, bootstrap: int, seed: int) -> AgreementReport:
    return agreement_report(
        data.votes,
        level="nominal",
        values=data.labels,
        bootstrap=bootstrap,
        seed=seed,
        writer_labels=data.writer_labels,
    )


def round_agreement_report(
    services: Services, round_id: int, *, bootstrap: int = 1000, seed: int = 0
) -> tuple[AgreementReport, dict[str, Any]]:
    """The engine's report over the round's counted votes, and the round's validation cost."""
    data = _read_round_votes(services, round_id, bootstrap, seed)
    return _report(data, bootstrap, seed), data.cost


def round_agreement(
    services: Services, round_id: int, *, bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """What ``GET /api/rounds/<id>/agreement`` answers: the report, the validation cost and
    Dawid-Skene beside the majority vote, all from one read of the votes."""
    data = _read_round_votes(services, round_id, bootstrap, seed)
    return {
        "round_id": round_id,
        **_report(data, bootstrap, seed).to_dict(),
        "validation_cost": data.cost,
        "dawid_skene": dawid_skene_beside_majority(data.votes, labels=data.labels) if data.votes else None,
    }
