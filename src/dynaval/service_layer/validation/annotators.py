"""What a lead sees of a round's annotators: votes, agreement with the others, gold accuracy, exclusion."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dynaval.domain.provenance import pseudonym
from dynaval.service_layer.agreement.reports import round_agreement_report
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.annotator_exclusion import annotator_statuses


def annotators_report(services: Services, round_id: int) -> list[dict[str, Any]]:
    """One row per annotator who answered in the round, by pseudonymous id."""
    secret = services.settings.pseudonym_secret
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)
        votes: Counter[str] = Counter(a for _item, a, _label in uow.round_queries.labelled_votes(round_id))
        statuses = annotator_statuses(uow, round_id)
    agreement, _cost = round_agreement_report(services, round_id, bootstrap=0)
    with_others = {row.annotator: row for row in agreement.per_annotator}
    report = []
    for annotator in sorted(set(votes) | set(statuses)):
        status = statuses.get(annotator, {})
        public_id = pseudonym(secret, "annotator", annotator)
        compared = with_others.get(public_id)
        report.append(
            {
                "annotator": public_id,
                "votes": votes.get(annotator, 0),
                "agreement_with_others": compared.agreement_with_others if compared else None,
                "compared_items": compared.compared if compared else 0,
                "gold_correct": status.get("gold_correct", 0),
                "gold_total": status.get("gold_total", 0),
                "gold_accuracy": status.get("gold_accuracy"),
                "excluded": status.get("excluded", False),
                "excluded_by": status.get("excluded_by"),
                "exclusion_reason": status.get("exclusion_reason"),
            }
        )
    return report
