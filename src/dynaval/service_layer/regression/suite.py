"""The regression suite's use cases: take cases from their sources, list them, retire one, and show a
case with its history.

The suite only grows. Its sources are functions of a unit of work that yield cases
(:data:`CASE_SOURCES`): the dev and test examples of every release, and the accepted failure
captures of every frozen capture round. Taking cases is idempotent: a case already in the suite is
left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from dynaval.domain.audit import AuditEvent
from dynaval.domain.clock import utcnow
from dynaval.domain.regression.suite import RegressionCase, case_history
from dynaval.domain.validation.round import RoundKind, RoundState
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

CaseSource = Callable[[UnitOfWork], Iterable[RegressionCase]]


def released_cases(uow: UnitOfWork) -> Iterable[RegressionCase]:
    """Every dev and test example of every release the service keeps."""
    return uow.regression.released_examples()


CAPTURE_SPLIT = "capture"
"""The split a failure capture's case is reported under (captures belong to no release split)."""


def captured_cases(uow: UnitOfWork) -> Iterable[RegressionCase]:
    """Every accepted failure capture of a frozen round (its decision is final then, as a released
    example's is), tagged with where it was found."""
    for round_ in uow.rounds.all():
        # A revalidation round's accepted candidates are suite cases already (confirmed), not new
        # ones (they have no capture row either; this says so where the suite is made).
        if round_.kind is RoundKind.REVALIDATION:
            continue
        if round_.state is not RoundState.FROZEN or round_.id is None:
            continue
        for capture in uow.captures.accepted_captures(round_.id):
            yield RegressionCase(
                id=capture.candidate_id,
                round_id=round_.id,
                split=CAPTURE_SPLIT,
                task_type=round_.task_type,
                inputs=dict(capture.inputs),
                label=capture.reported_label,
                source=f"capture:{capture.source.value}",
            )


CASE_SOURCES: tuple[CaseSource, ...] = (released_cases, captured_cases)
"""Where the suite takes its cases from, in order (a case is taken once, from its first source)."""

RETIRE_ACTION = "retire_case"


def take_cases(uow: UnitOfWork, *, at: datetime, sources: Iterable[CaseSource] = CASE_SOURCES) -> int:
    """Add to the suite every case its sources hold that it lacks, inside the caller's unit of work
    (a release's creation adds its cases in its own transaction); how many were added."""
    return sum(uow.regression.add_cases(source(uow), at=at) for source in sources)


def sync_suite(services: Services) -> int:
    """Take the cases the suite lacks (idempotent; evaluation runs it first)."""
    with services.uow() as uow:
        added = take_cases(uow, at=utcnow())
        uow.commit()
    return added


def list_cases(services: Services, *, retired: bool = False, suspect: bool = False) -> list[RegressionCase]:
    with services.uow(read_only=True) as uow:
        return uow.regression.cases(retired=retired, suspect_only=suspect)


def retire_case(services: Services, case_id: str, *, by: str, reason: str) -> RegressionCase:
    """A lead takes a case out of the suite, with a reason; logged in the audit log of its round."""
    with services.uow() as uow:
        before = uow.regression.case(case_id)
        now = utcnow()
        case = before.retire(by=by, reason=reason, at=now)
        uow.regression.save_case(case)
        uow.audit.add(
            AuditEvent(
                round_id=case.round_id,
                candidate_id=case.id,
                action=RETIRE_ACTION,
                by=by,
                reason=case.retired_reason or reason,
                status_before="in suite",
                status_after="retired",
                at=now,
            )
        )
        uow.commit()
    return case


def case_detail(services: Services, case_id: str) -> dict[str, Any]:
    """A case with its history and every result, in evaluation order."""
    with services.uow(read_only=True) as uow:
        case = uow.regression.case(case_id)
        results = uow.regression.results(case_id=case_id)
    return {
        **case.to_dict(),
        "history": case_history(case_id, results).to_dict(),
        "results": [
            {
                "model": r.model_hash,
                "run_id": r.run_id,
                "evaluated_at": r.evaluated_at.isoformat() if r.evaluated_at else None,
                "prediction": r.prediction,
                "correct": r.correct,
            }
            for r in results
        ],
    }
