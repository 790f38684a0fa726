"""The audit log: what leads did to candidates (overrides), who, when and why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class AuditEvent:
    """One lead action on a candidate, with its status before and after."""

    round_id: int
    candidate_id: str
    action: str
    by: str
    reason: str
    status_before: str
    status_after: str
    at: datetime
    id: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "round_id": self.round_id,
            "candidate_id": self.candidate_id,
            "action": self.action,
            "by": self.by,
            "reason": self.reason,
            "status_before": self.status_before,
            "status_after": self.status_after,
            "at": self.at.isoformat(),
        }
