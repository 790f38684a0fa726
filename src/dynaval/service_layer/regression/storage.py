"""The regression room's storage ports: the model catalog, the suite's cases, evaluation and gate
runs, and re-validations."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from dynaval.domain.regression.gate import GateResult
from dynaval.domain.regression.revalidation import Revalidation
from dynaval.domain.regression.suite import CaseResult, RegisteredModel, RegressionCase


class RegressionRepository(Protocol):
    """The regression suite: registered models, cases (only ever added; retired, never deleted),
    evaluation runs with each case's result, and gate runs."""

    def register(self, model: RegisteredModel) -> RegisteredModel:
        """Store the model unless its hash is known; the stored one either way."""
        ...

    def model(self, model_hash: str) -> RegisteredModel:
        """The model; :class:`NotFound` naming ``model``."""
        ...

    def models(self) -> list[RegisteredModel]:
        """Oldest first."""
        ...

    def save_model(self, model: RegisteredModel) -> None: ...

    def released_examples(self) -> Iterable[RegressionCase]:
        """Every dev and test example of every release, as a case not yet stored."""
        ...

    def add_released_cases(self, release_id: int, *, at: datetime) -> int:
        """:meth:`add_cases` of the release's examples among :meth:`released_examples`, copied by
        the database."""
        ...

    def add_cases(self, cases: Iterable[RegressionCase], *, at: datetime) -> int:
        """Add the cases the suite lacks; how many were added."""
        ...

    def case(self, case_id: str) -> RegressionCase:
        """The case; :class:`NotFound` naming ``case``."""
        ...

    def cases(
        self, *, retired: bool = False, suspect_only: bool = False, ids: Collection[str] | None = None
    ) -> list[RegressionCase]: ...

    def save_case(self, case: RegressionCase) -> None: ...

    def mark_suspect(self, case_ids: Collection[str]) -> int: ...

    def clear_suspects(self, still_suspect: Collection[str]) -> int: ...

    def start_run(self, model_hash: str, *, at: datetime) -> int: ...

    def add_results(self, run_id: int, results: Sequence[CaseResult]) -> None: ...

    def finish_run(self, run_id: int, *, at: datetime, case_count: int) -> None: ...

    def results(
        self,
        *,
        model_hash: str | None = None,
        case_id: str | None = None,
        case_ids: Collection[str] | None = None,
    ) -> list[CaseResult]:
        """Results of finished runs, in evaluation order (of one model, one case, or a few cases)."""
        ...

    def latest_outcomes(self) -> dict[str, dict[str, bool]]:
        """Case id -> model hash -> whether the model's latest result on it was right."""
        ...

    def results_fingerprint(self) -> tuple[int, int | None, int]:
        """Changes whenever an evaluation run finishes or a case is retired (cheap to read)."""
        ...

    def add_gate_run(
        self, *, candidate_hash: str, baseline: str, result: GateResult, by: str, at: datetime
    ) -> int: ...

    def gate_runs(self, limit: int = 100) -> list[dict[str, Any]]: ...

    def latest_gate_run_of_each(self) -> dict[str, dict[str, Any]]:
        """Per candidate hash, its latest gate run (as :meth:`gate_runs` gives it)."""
        ...


class RevalidationRepository(Protocol):
    """Which suite case each revalidation candidate stands for, until its outcome settles it."""

    def add_many(self, revalidations: Sequence[Revalidation]) -> None:
        """Store them; a case already under re-validation (another request, at the same moment):
        :class:`~dynaval.domain.errors.Conflict` naming ``cases``."""

    def open(self, *, round_id: int | None = None, for_update: bool = False) -> list[Revalidation]:
        """The unsettled ones (of one round, or all), row-locked with ``for_update``."""

    def of_cases(self, case_ids: Collection[str]) -> dict[str, Revalidation]:
        """Each case's latest re-validation, open or settled."""

    def save(self, revalidation: Revalidation) -> None: ...
