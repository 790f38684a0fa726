"""The ports through which use cases reach storage: a unit of work and its repositories.

Each room owns the ports of what it stores (``<room>/storage.py``); the unit of work holds one of
each. A use case opens a unit of work, loads domain objects from its repositories, calls their methods,
saves them and commits; nothing persists unless it commits. The SQL implementation
(:mod:`dynaval.adapters.db.unit_of_work`) holds every query and every dialect detail (upserts, row
locks, leases, Core statements for the busy paths); the unit tests run the same use cases on
in-memory fakes of these protocols (``tests/unit/fakes.py``).
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self

from dynaval.domain.audit import AuditEvent
from dynaval.service_layer.dashboard.storage import DashboardQueries, DashboardSessions
from dynaval.service_layer.health.storage import NearDuplicateIndex
from dynaval.service_layer.jobs.storage import JobRepository
from dynaval.service_layer.regression.storage import RegressionRepository, RevalidationRepository
from dynaval.service_layer.releases.storage import ReleaseRepository
from dynaval.service_layer.retraining.storage import RetrainingPolicyRepository
from dynaval.service_layer.validation.storage import (
    AnnotatorRepository,
    CandidateRepository,
    CaptureRepository,
    GoldRepository,
    RoundQueries,
    RoundRepository,
    TaskChecks,
    VoteStore,
)


class AuditRepository(Protocol):
    def add(self, event: AuditEvent) -> None: ...

    def of_round(self, round_id: int) -> list[AuditEvent]: ...

    def of_candidate(self, candidate_id: str) -> list[AuditEvent]: ...


class UnitOfWork(Protocol):
    """One transaction and its repositories; rolled back on leaving the block unless committed."""

    @property
    def rounds(self) -> RoundRepository: ...

    @property
    def candidates(self) -> CandidateRepository: ...

    @property
    def gold(self) -> GoldRepository: ...

    @property
    def annotators(self) -> AnnotatorRepository: ...

    @property
    def audit(self) -> AuditRepository: ...

    @property
    def votes(self) -> VoteStore: ...

    @property
    def task_checks(self) -> TaskChecks: ...

    @property
    def round_queries(self) -> RoundQueries: ...

    @property
    def dashboard(self) -> DashboardQueries: ...

    @property
    def dashboard_sessions(self) -> DashboardSessions: ...

    @property
    def releases(self) -> ReleaseRepository: ...

    @property
    def captures(self) -> CaptureRepository: ...

    @property
    def regression(self) -> RegressionRepository: ...

    @property
    def revalidations(self) -> RevalidationRepository: ...

    @property
    def near_duplicates(self) -> NearDuplicateIndex: ...

    @property
    def jobs(self) -> JobRepository: ...

    @property
    def retraining(self) -> RetrainingPolicyRepository: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None: ...

    def commit(self) -> None:
        """Make the unit's writes durable; without it, leaving the block rolls them back."""

    def flush(self) -> None:
        """Send the pending writes inside the transaction (later reads of it see them)."""
