"""Round-level inter-annotator agreement: Krippendorff's alpha over stored votes.

The ``krippendorff`` package is the reference implementation; we hand it value counts
(items x labels) rather than an annotators x items matrix, so memory grows with the number of
items, not with the number of annotators. Degenerate data gets an explicit reason instead of NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import krippendorff
import numpy as np


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
    coefficient prescribes. Returns ``alpha=None`` with a reason when alpha is undefined.
    """
    index = {label: i for i, label in enumerate(labels)}
    rows = [votes for votes in labels_by_item.values() if len(votes) >= 2]
    pairable = sum(len(votes) for votes in rows)
    if not rows:
        return AlphaResult(None, "no item has two or more votes yet", "nominal", 0, 0)
    unknown = {label for votes in rows for label in votes if label not in index}
    if unknown:
        raise ValueError(f"votes carry labels outside the task's label set: {sorted(unknown)}")
    counts = np.zeros((len(rows), len(labels)), dtype=np.int64)
    for row, votes in enumerate(rows):
        for label in votes:
            counts[row, index[label]] += 1
    used = int(np.count_nonzero(counts.sum(axis=0)))
    if used < 2:
        return AlphaResult(
            None,
            "every vote carries the same label, so there is no expected disagreement to compare with",
            "nominal",
            len(rows),
            pairable,
        )
    value = float(krippendorff.alpha(value_counts=counts, level_of_measurement="nominal"))
    if math.isnan(value):  # defensive: the checks above should make this unreachable
        return AlphaResult(None, "alpha is undefined for these votes", "nominal", len(rows), pairable)
    return AlphaResult(value, None, "nominal", len(rows), pairable)
