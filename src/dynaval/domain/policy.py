"""The per-round decision policy and its validation."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import Any

from dynaval.domain.errors import InvalidInput

RULE_VERSION = "dynaval-majority/1"
"""Version of the decision rule in :mod:`dynaval.domain.decision`; bump on any change of behaviour."""

MAX_VOTES_LIMIT = 15
_FLOAT_FIELDS = frozenset({"accept_share", "gold_rate", "gold_min_accuracy"})


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
    """

    min_votes: int = 2
    max_votes: int = 3
    accept_share: float = 2 / 3
    flag_votes: int = 2
    validate_non_fooling: bool = False
    gold_rate: float = 0.1
    gold_min_items: int = 5
    gold_min_accuracy: float = 0.7

    def __post_init__(self) -> None:
        if not 1 <= self.min_votes <= MAX_VOTES_LIMIT:
            raise InvalidInput(f"min_votes must be between 1 and {MAX_VOTES_LIMIT}", field="policy.min_votes")
        if not self.min_votes <= self.max_votes <= MAX_VOTES_LIMIT:
            raise InvalidInput(
                f"max_votes must be between min_votes ({self.min_votes}) and {MAX_VOTES_LIMIT}",
                field="policy.max_votes",
            )
        if not 0.5 < self.accept_share <= 1:
            raise InvalidInput("accept_share must be above 0.5 and at most 1", field="policy.accept_share")
        if not 1 <= self.flag_votes <= MAX_VOTES_LIMIT:
            raise InvalidInput(
                f"flag_votes must be between 1 and {MAX_VOTES_LIMIT}", field="policy.flag_votes"
            )

        if not 0 <= self.gold_rate <= 0.5:
            raise InvalidInput("gold_rate must be between 0 and 0.5", field="policy.gold_rate")
        if not 1 <= self.gold_min_items <= 1000:
            raise InvalidInput("gold_min_items must be between 1 and 1000", field="policy.gold_min_items")
        if not 0 <= self.gold_min_accuracy <= 1:
            raise InvalidInput("gold_min_accuracy must be between 0 and 1", field="policy.gold_min_accuracy")

    @property
    def accept_fraction(self) -> Fraction:
        # Compare shares exactly: 2 of 3 votes must meet a 2/3 threshold despite float rounding.
        return _exact_share(self.accept_share)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any] | None) -> DecisionPolicy:
        """Build a policy from defaults plus a round's overrides, naming any bad field."""
        if overrides is None:
            return cls()
        if not isinstance(overrides, dict):
            raise InvalidInput("policy must be an object", field="policy")
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise InvalidInput(
                    f"unknown policy field; allowed: {', '.join(sorted(known))}", field=f"policy.{key}"
                )
            if key == "validate_non_fooling":
                if not isinstance(value, bool):
                    raise InvalidInput("must be true or false", field=f"policy.{key}")
            elif key in _FLOAT_FIELDS:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise InvalidInput("must be a number", field=f"policy.{key}")
                value = float(value)
            elif isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput("must be an integer", field=f"policy.{key}")
            values[key] = value
        return cls(**values)
