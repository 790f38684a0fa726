"""The retraining room's storage port."""

from __future__ import annotations

from typing import Protocol

from dynaval.domain.retraining.audit import RetrainingEvent
from dynaval.domain.retraining.policy import RetrainingPolicy


class RetrainingPolicyRepository(Protocol):
    def get(self, task_type: str, *, for_update: bool = False) -> RetrainingPolicy | None:
        """The task type's policy (None: never set, which is off). ``for_update``: its row stays
        locked until the unit of work ends."""
        ...

    def save(self, policy: RetrainingPolicy) -> None:
        """Store the policy, a new one or a change of the stored one."""
        ...

    def turned_on(self) -> list[RetrainingPolicy]:
        """Every policy that is on, by task type."""
        ...

    def log(self, event: RetrainingEvent) -> None:
        """Add a step to the retraining audit log."""
        ...

    def events(self, task_type: str, limit: int) -> list[RetrainingEvent]:
        """The task type's newest ``limit`` steps, newest first."""
        ...
