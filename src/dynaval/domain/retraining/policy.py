"""A task type's retraining policy, as a lead sets it: retrain after every ``every`` newly accepted
examples, no more often than ``min_interval_s``, from a base (the open round's model, or the newest
shipped one), with the training settings of ``dynaval model train``; then ship the new model by
opening the next round on it (``next_round``, the Dynabench way) or by swapping it into the open
round (``swap``, the walkthrough's way). ``every`` None: off, the default.

The count of newly accepted examples starts again from the task type's accepted total when the
policy is set and each time it runs (``counted_from``): setting a policy never fires at once for
examples accepted before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dynaval.domain.errors import InvalidInput

MAX_EVERY = 1_000_000
MAX_INTERVAL_S = 30 * 24 * 3600
MAX_EPOCHS = 50
MAX_BATCH_SIZE = 512
MAX_FLIPS = 10_000


class ShipMode(StrEnum):
    NEXT_ROUND = "next_round"
    """Close the open round when the new model passes the gate; open the next one on it."""
    SWAP = "swap"
    """Replace the open round's model; each candidate keeps the hash of the model that scored it."""


class TrainFrom(StrEnum):
    ROUND = "round"
    """Fine-tune the model of the task type's open round (the one the new model would replace)."""
    SHIPPED = "shipped"
    """Fine-tune the newest shipped model of the task type."""


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"must be a whole number from {low} to {high}", field=name)
    return value


def _choice(value: Any, name: str, kind: type[StrEnum]) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InvalidInput(f"must be one of {', '.join(repr(k.value) for k in kind)}", field=name) from None


@dataclass(frozen=True)
class TrainingSettings:
    """What ``dynaval model train`` takes, less its data and base (the policy chooses those)."""

    epochs: int = 3
    seed: int = 13
    learning_rate: float | None = None
    """None: the task's default recipe (5e-5 for text, 1e-3 for images)."""
    batch_size: int = 16
    with_seed_set: bool = False

    def __post_init__(self) -> None:
        _whole(self.epochs, "epochs", 1, MAX_EPOCHS)
        _whole(self.seed, "seed", 0, 2**32 - 1)
        _whole(self.batch_size, "batch_size", 1, MAX_BATCH_SIZE)
        rate = self.learning_rate
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1
        ):
            raise InvalidInput("must be a number above 0 and at most 1, or null", field="learning_rate")
        if not isinstance(self.with_seed_set, bool):
            raise InvalidInput("must be true or false", field="with_seed_set")


@dataclass(frozen=True)
class Due:
    """Whether a policy should run now, and if not, what it waits for (in words)."""

    due: bool
    waiting_for: str


@dataclass(frozen=True)
class RetrainingPolicy:
    task_type: str
    every: int | None = None
    ship: ShipMode = ShipMode.NEXT_ROUND
    min_interval_s: int = 0
    base: TrainFrom = TrainFrom.ROUND
    max_flips: int = 0
    """The gate's allowance: suite cases the replaced model got right that the new one may get wrong."""
    training: TrainingSettings = field(default_factory=TrainingSettings)
    counted_from: int = 0
    """The task type's accepted examples when the count of new ones last started."""
    last_run_at: datetime | None = None
    updated_by: str = ""
    updated_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.every is not None:
            _whole(self.every, "every", 1, MAX_EVERY)
        _whole(self.min_interval_s, "min_interval_s", 0, MAX_INTERVAL_S)
        _whole(self.max_flips, "max_flips", 0, MAX_FLIPS)
        _choice(self.ship, "ship", ShipMode)
        _choice(self.base, "base", TrainFrom)

    @property
    def on(self) -> bool:
        return self.every is not None

    @classmethod
    def set_by(
        cls, task_type: str, settings: Mapping[str, Any], *, accepted: int, by: str, at: datetime
    ) -> RetrainingPolicy:
        """The policy a lead sets (every field checked, 422 naming it); its count starts now."""
        known = {
            "every",
            "ship",
            "min_interval_s",
            "base",
            "max_flips",
            *TrainingSettings.__dataclass_fields__,
        }
        for name in settings:
            if name not in known:
                raise InvalidInput(
                    f"is not a setting of a retraining policy ({', '.join(sorted(known))})", field=name
                )
        if "every" not in settings:
            raise InvalidInput(
                "is required: a number of newly accepted examples, or null (off)", field="every"
            )
        training = TrainingSettings(
            **{k: v for k, v in settings.items() if k in TrainingSettings.__dataclass_fields__}
        )
        return cls(
            task_type=task_type,
            every=settings["every"],
            ship=_choice(settings.get("ship", ShipMode.NEXT_ROUND), "ship", ShipMode),
            min_interval_s=_whole(settings.get("min_interval_s", 0), "min_interval_s", 0, MAX_INTERVAL_S),
            base=_choice(settings.get("base", TrainFrom.ROUND), "base", TrainFrom),
            max_flips=_whole(settings.get("max_flips", 0), "max_flips", 0, MAX_FLIPS),
            training=training,
            counted_from=accepted,
            updated_by=by,
            updated_at=at,
        )

    def new_examples(self, accepted: int) -> int:
        """How many examples were accepted since the count last started (never below 0: a decision
        that left ``accepted`` lowers the total)."""
        return max(0, accepted - self.counted_from)

    def due(self, accepted: int, now: datetime) -> Due:
        if self.every is None:
            return Due(False, "the policy is off")
        new = self.new_examples(accepted)
        if new < self.every:
            return Due(False, f"{self.every - new} more accepted examples ({new} of {self.every})")
        if self.last_run_at is not None:
            ready_at = self.last_run_at + timedelta(seconds=self.min_interval_s)
            if now < ready_at:
                return Due(False, f"the minimum interval: not before {ready_at.isoformat()}")
        return Due(True, "nothing: it is due")

    def ran(self, accepted: int, at: datetime) -> RetrainingPolicy:
        """The policy once a run started: its count starts again from ``accepted``."""
        return replace(self, counted_from=accepted, last_run_at=at)

    def settings(self) -> dict[str, Any]:
        """What a lead set, as ``PUT`` takes it (and ``GET`` shows it)."""
        return {
            "every": self.every,
            "ship": self.ship.value,
            "min_interval_s": self.min_interval_s,
            "base": self.base.value,
            "max_flips": self.max_flips,
            **asdict(self.training),
        }
