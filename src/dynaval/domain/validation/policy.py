"""The per-round decision policy and its validation."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.domain.health.near_duplicates import (
    MIN_ROUND_THRESHOLD,
    NEAR_DUPLICATE_POLICIES,
    THRESHOLD,
    NearDuplicatePolicyName,
    NearDuplicateRule,
)
from dynaval.domain.images.near_copies import MAX_THRESHOLD as MAX_IMAGE_THRESHOLD
from dynaval.domain.images.near_copies import THRESHOLD as IMAGE_THRESHOLD
from dynaval.domain.images.near_copies import NearCopyRule

RULE_VERSION = "dynaval-majority/1"
"""Version of the decision rule in :mod:`dynaval.domain.validation.decision`; bump on any change of
behaviour."""

# The bounds of each threshold: the domain's invariants, and what the request model for a round's
# policy (``entrypoints/api/schemas.py``) checks and publishes.
MAX_VOTES_LIMIT = 15
ACCEPT_SHARE_ABOVE = 0.5
MAX_GOLD_RATE = 0.5
MAX_GOLD_MIN_ITEMS = 1000


@functools.lru_cache(maxsize=256)
def _exact_share(share: float) -> Fraction:
    """The fraction a share stands for (a policy is rebuilt for every decision, and finding the
    fraction cost a fifth of a push's CPU time)."""
    return Fraction(share).limit_denominator(1000)


@dataclass(frozen=True)
class DecisionPolicy:
    """Thresholds of the decision rule (defaults follow ANLI and Dynabench issue #157).

    - ``min_votes``: validators asked first; unanimous agreement with the writer accepts.
    - ``max_votes``: escalation asks for one more vote at a time up to this many.
    - ``accept_share``: share of the votes the writer's label needs once votes are complete.
    - ``flag_votes``: this many flags send the candidate to a lead.
    - ``validate_non_fooling``: also validate candidates that did not fool the model.
    - ``gold_rate``: share of the tasks pushed to Label Studio that are gold items (0 turns gold off).
    - ``gold_min_items``: gold answers an annotator gives before the gold rule may exclude them.
    - ``gold_min_accuracy``: below this gold accuracy an annotator's votes stop counting.
    - ``near_duplicates``: what a near-duplicate of an earlier example at submission leads to:
      ``allow`` (recorded only), ``flag`` (stored, marked, shown to leads first) or ``reject``
      (refused with 409, nothing stored); see docs/near_duplicates.md.
    - ``near_duplicate_lexical``: the lexical rule's threshold (smallest per-field word-bigram
      Jaccard) from which two examples are near-duplicates.
    - ``near_duplicate_semantic``: the cosine threshold of the semantic check (``None``: the
      domain's default).
    - ``near_duplicate_image_bits``: for image task types, how many of the 144 bits of their
      perceptual hashes two images may differ by and still be near-copies (0: the same look only).
    """

    min_votes: int = 2
    max_votes: int = 3
    accept_share: float = 2 / 3
    flag_votes: int = 2
    validate_non_fooling: bool = False
    gold_rate: float = 0.1
    gold_min_items: int = 5
    gold_min_accuracy: float = 0.7
    near_duplicates: NearDuplicatePolicyName = "flag"
    near_duplicate_lexical: float = THRESHOLD
    near_duplicate_semantic: float | None = None
    near_duplicate_image_bits: int = IMAGE_THRESHOLD

    def __post_init__(self) -> None:
        if not 1 <= self.min_votes <= MAX_VOTES_LIMIT:
            raise InvalidInput(f"min_votes must be between 1 and {MAX_VOTES_LIMIT}", field="policy.min_votes")
        if not self.min_votes <= self.max_votes <= MAX_VOTES_LIMIT:
            raise InvalidInput(
                f"max_votes must be between min_votes ({self.min_votes}) and {MAX_VOTES_LIMIT}",
                field="policy.max_votes",
            )
        if not ACCEPT_SHARE_ABOVE < self.accept_share <= 1:
            raise InvalidInput("accept_share must be above 0.5 and at most 1", field="policy.accept_share")
        if not 1 <= self.flag_votes <= MAX_VOTES_LIMIT:
            raise InvalidInput(
                f"flag_votes must be between 1 and {MAX_VOTES_LIMIT}", field="policy.flag_votes"
            )

        if not 0 <= self.gold_rate <= MAX_GOLD_RATE:
            raise InvalidInput(f"gold_rate must be between 0 and {MAX_GOLD_RATE}", field="policy.gold_rate")
        if not 1 <= self.gold_min_items <= MAX_GOLD_MIN_ITEMS:
            raise InvalidInput(
                f"gold_min_items must be between 1 and {MAX_GOLD_MIN_ITEMS}", field="policy.gold_min_items"
            )
        if not 0 <= self.gold_min_accuracy <= 1:
            raise InvalidInput("gold_min_accuracy must be between 0 and 1", field="policy.gold_min_accuracy")
        if self.near_duplicates not in NEAR_DUPLICATE_POLICIES:
            raise InvalidInput(
                f"near_duplicates must be one of: {', '.join(NEAR_DUPLICATE_POLICIES)}",
                field="policy.near_duplicates",
            )
        if not MIN_ROUND_THRESHOLD <= self.near_duplicate_lexical <= 1:
            raise InvalidInput(
                f"near_duplicate_lexical must be between {MIN_ROUND_THRESHOLD} and 1",
                field="policy.near_duplicate_lexical",
            )
        if self.near_duplicate_semantic is not None and not 0 < self.near_duplicate_semantic <= 1:
            raise InvalidInput(
                "near_duplicate_semantic must be above 0 and at most 1",
                field="policy.near_duplicate_semantic",
            )
        if not 0 <= self.near_duplicate_image_bits <= MAX_IMAGE_THRESHOLD:
            raise InvalidInput(
                f"near_duplicate_image_bits must be between 0 and {MAX_IMAGE_THRESHOLD}",
                field="policy.near_duplicate_image_bits",
            )

    @property
    def accept_fraction(self) -> Fraction:
        # Compare shares exactly: 2 of 3 votes must meet a 2/3 threshold despite float rounding.
        return _exact_share(self.accept_share)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def image_rule(self) -> NearCopyRule:
        """The near-copy rule of images at this round's threshold."""
        return NearCopyRule(threshold=self.near_duplicate_image_bits)

    @property
    def lexical_rule(self) -> NearDuplicateRule:
        """The lexical near-duplicate rule at this round's threshold."""
        return NearDuplicateRule(threshold=self.near_duplicate_lexical)

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any] | None) -> DecisionPolicy:
        """The defaults with a round's overrides. The request model checked each value's type and
        range (and that no other key is given); the rules between values (``max_votes`` at least
        ``min_votes``) are checked here, naming the field."""
        return cls(**(overrides or {}))
