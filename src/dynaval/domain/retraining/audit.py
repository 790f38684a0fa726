"""The retraining audit log: every step of a policy's life (set, triggered, trained, evaluated,
gated, shipped or kept), with who or what did it and its figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class RetrainingStep(StrEnum):
    POLICY_SET = "policy-set"
    TRIGGERED = "triggered"
    TRAINED = "trained"
    GATED = "gated"
    SHIPPED = "shipped"
    KEPT = "kept"
    """The new model failed the gate: registered, not shipped; the detail names the flipped cases."""
    FAILED = "failed"


@dataclass(frozen=True)
class RetrainingEvent:
    task_type: str
    step: RetrainingStep
    by: str
    """A lead's name, or ``retraining`` for what the policy did by itself."""
    at: datetime
    detail: dict[str, Any] = field(default_factory=dict)
    job_id: int | None = None
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task_type": self.task_type,
            "step": self.step.value,
            "by": self.by,
            "at": self.at.isoformat(),
            "job_id": self.job_id,
            "detail": self.detail,
        }
