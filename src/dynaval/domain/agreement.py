"""Round-level inter-annotator agreement: Krippendorff's alpha over stored votes.

The engine lives in :mod:`dynaval.domain.agreement_engine` (alpha at every level, bootstrap
interval, per-label/annotator/item breakdowns); this module re-exports it and keeps
:func:`nominal_alpha`, the small view the round summary uses. Degenerate data gets an explicit
reason instead of NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dynaval.domain.agreement_engine import (
    LEVELS,
    AgreementReport,
    AlphaEstimate,
    AnnotatorAgreement,
    ItemAgreement,
    LabelAgreement,
    Level,
    PairwiseAgreement,
    RunningAlpha,
    VoteColumns,
    agreement_report,
    round_alpha,
)

__all__ = [
    "LEVELS",
    "AgreementReport",
    "AlphaEstimate",
    "AlphaResult",
    "AnnotatorAgreement",
    "ItemAgreement",
    "LabelAgreement",
    "Level",
    "PairwiseAgreement",
    "RunningAlpha",
    "VoteColumns",
    "agreement_report",
    "nominal_alpha",
    "round_alpha",
]

NO_PAIRABLE_YET = "no item has two or more votes yet"


@dataclass(frozen=True)
class AlphaResult:
    alpha: float | None
    undefined_reason: str | None
    level: str
    items: int
    """Items with at least two votes (the only ones alpha can use)."""
    pairable_values: int
    """Votes on those items."""

    def to_dict(self) -> dict[str, object]:
        return {
            "alpha": self.alpha,
            "undefined_reason": self.undefined_reason,
            "level": self.level,
            "items": self.items,
            "pairable_values": self.pairable_values,
        }


def nominal_alpha(labels_by_item: Mapping[str, Sequence[str]], labels: Sequence[str]) -> AlphaResult:
    """Krippendorff's alpha (nominal) over each item's list of vote labels.

    Items with fewer than two votes carry no pairable value and are left out, as the
    coefficient prescribes (their labels are not checked). Returns ``alpha=None`` with a reason
    when alpha is undefined; a label outside ``labels`` on a pairable item raises ValueError.

    >>> votes = {"c1": ["pos", "pos"], "c2": ["pos", "neg", "pos"], "c3": ["neg", "neg"], "c4": ["pos"]}
    >>> result = nominal_alpha(votes, ["pos", "neg", "neu"])
    >>> round(result.alpha, 3), result.items, result.pairable_values
    (0.5, 3, 7)
    """
    rows = {item: votes for item, votes in labels_by_item.items() if len(votes) >= 2}
    if not rows:
        return AlphaResult(None, NO_PAIRABLE_YET, "nominal", 0, 0)
    triples = [(item, voter, label) for item, votes in rows.items() for voter, label in enumerate(votes)]
    estimate = round_alpha(triples, level="nominal", values=list(dict.fromkeys(labels)), bootstrap=0)
    return AlphaResult(
        estimate.alpha, estimate.undefined_reason, "nominal", estimate.items, estimate.pairable_values
    )
