"""Round metrics: counts by status, model error rate (MER) and verified model error rate (VMER)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundCounts:
    collected: int
    fooled: int
    by_status: dict[str, int]
    accepted_fooled: int

    @property
    def mer(self) -> float | None:
        """Fooled / collected: how often writers fooled the model, before validation."""
        return self.fooled / self.collected if self.collected else None

    @property
    def vmer(self) -> float | None:
        """Accepted fooled / collected. Unvalidated candidates never count as verified."""
        return self.accepted_fooled / self.collected if self.collected else None

    @property
    def still_in_validation(self) -> int:
        return sum(self.by_status.get(s, 0) for s in ("scoring", "queued", "in_validation", "escalated"))

    @property
    def unvalidated(self) -> int:
        """Left undecided when their round was frozen by force: never verified, never in a dataset."""
        return self.by_status.get("unvalidated", 0)

    def to_dict(self) -> dict[str, object]:
        return {
            "collected": self.collected,
            "fooled": self.fooled,
            "accepted_fooled": self.accepted_fooled,
            "still_in_validation": self.still_in_validation,
            "unvalidated": self.unvalidated,
            "by_status": dict(self.by_status),
            "mer": self.mer,
            "vmer": self.vmer,
        }


def round_counts(status_fooled_counts: Mapping[tuple[str, bool], int]) -> RoundCounts:
    """Fold (status, fooled) -> count rows into the round's figures."""
    by_status: dict[str, int] = {}
    fooled = accepted_fooled = collected = 0
    for (status, was_fooled), count in status_fooled_counts.items():
        by_status[status] = by_status.get(status, 0) + count
        collected += count
        if was_fooled:
            fooled += count
            if status == "accepted":
                accepted_fooled += count
    return RoundCounts(collected, fooled, dict(sorted(by_status.items())), accepted_fooled)
