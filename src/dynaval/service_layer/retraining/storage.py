"""The retraining room's storage port."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
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

    def record_trained(
        self,
        task_type: str,
        example_ids: Collection[str],
        *,
        job_id: int | None,
        model_hash: str,
        at: datetime,
    ) -> None:
        """The examples a run trained a model on (an example trained on before keeps its first run)."""
        ...

    def trained_ids(self, task_type: str) -> set[str]:
        """Every example of the task type a run trained a model on."""
        ...

    def events(self, task_type: str, limit: int) -> list[RetrainingEvent]:
        """The task type's newest ``limit`` steps, newest first."""
        ...
