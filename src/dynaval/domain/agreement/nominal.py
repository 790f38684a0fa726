"""Round-level inter-annotator agreement: Krippendorff's alpha over stored votes.

The engine lives in :mod:`dynaval.domain.agreement` (alpha at every level, bootstrap
interval, per-label/annotator/item breakdowns); this module re-exports it and keeps
:func:`nominal_alpha` and :func:`nominal_alpha_of_columns`, the small view the round summary
uses. Degenerate data gets an explicit reason instead of NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dynaval.domain.agreement import (
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
    "nominal_alpha_of_columns",
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
    columns = VoteColumns(
        items=[item for item, item_labels in labels_by_item.items() for _label in item_labels],
        annotators=[voter for item_labels in labels_by_item.values() for voter in range(len(item_labels))],
        labels=[label for item_labels in labels_by_item.values() for label in item_labels],
    )
    return nominal_alpha_of_columns(columns, labels)


def nominal_alpha_of_columns(votes: VoteColumns, labels: Sequence[str]) -> AlphaResult:
    """:func:`nominal_alpha` of votes kept as columns (items, annotators, labels), the way a large
    round's votes are read without a tuple each: the same items left out (those with fewer than
    two votes, their labels not checked), the same checks, the same figures.

    >>> votes = VoteColumns(items=[1, 1, 2, 2, 2, 3, 3, 4], annotators=list("abcdecdf"),
    ...                     labels=["pos", "pos", "pos", "neg", "pos", "neg", "neg", "pos"])
    >>> result = nominal_alpha_of_columns(votes, ["pos", "neg", "neu"])
    >>> round(result.alpha, 3), result.items, result.pairable_values
    (0.5, 3, 7)
    """
    items = np.asarray(votes.items)
    if not len(items):
        return AlphaResult(None, NO_PAIRABLE_YET, "nominal", 0, 0)
    _ids, where, counts = np.unique(items, return_inverse=True, return_counts=True)
    pairable = counts[where] >= 2
    if not pairable.any():
        return AlphaResult(None, NO_PAIRABLE_YET, "nominal", 0, 0)
    kept = VoteColumns(
        items=items[pairable],
        annotators=np.asarray(votes.annotators)[pairable],
        labels=np.asarray(votes.labels)[pairable],
    )
    estimate = round_alpha(kept, level="nominal", values=list(dict.fromkeys(labels)), bootstrap=0)
    return AlphaResult(
        estimate.alpha, estimate.undefined_reason, "nominal", estimate.items, estimate.pairable_values
    )
