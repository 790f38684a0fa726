"""Re-validation of suspect regression cases: a lead sends them back to Label Studio, and their
outcome settles them (confirmed, or retired by the system).

Sending makes one new round of kind ``revalidation`` per task type (no model in the loop, as a
capture round has none) and stores each case as a candidate of it, exactly as a failure capture is
stored: the case's inputs, its gold label in the writer's label's place. From there the ordinary
push, blind tasks (the validators see the inputs only: not the label, not the case), votes, decision
rule, escalation and agreement apply. A revalidation round takes no captures and no writers'
candidates, is never released, and its accepted candidates do not join the suite as new cases.

Settling (:func:`settle_revalidations`) is idempotent and runs after every read of Label Studio that
changed a revalidation round's decisions, after a lead's override, in the periodic sweep, and on
demand (``dynaval suite settle``).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dynaval.domain.audit import AuditEvent
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput, NotFound
from dynaval.domain.regression.revalidation import (
    SYSTEM,
    Revalidation,
    RevalidationOutcome,
    outcome_of,
    revalidation_candidate,
    settle_case,
)
from dynaval.domain.regression.suite import RegressionCase
from dynaval.domain.validation.round import RoundKind
from dynaval.service_layer.regression.suite import RETIRE_ACTION
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork
from dynaval.service_layer.validation.rounds import create_round

SEND_ACTION = "send_to_revalidation"
CONFIRM_ACTION = "confirm_case"
MAX_CASES = 1000
"""Cases one request may name (a round holds any number; the suspects of a suite are few)."""


@dataclass(frozen=True)
class Sent:
    """What a send made: the revalidation rounds (one per task type) and the cases sent to each."""

    rounds: dict[int, list[str]]

    @property
    def cases(self) -> list[str]:
        return [case for cases in self.rounds.values() for case in cases]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": [{"id": round_id, "cases": cases} for round_id, cases in self.rounds.items()],
            "cases": self.cases,
        }


def _chosen(uow: UnitOfWork, case_ids: Sequence[str] | None) -> list[RegressionCase]:
    """The cases to send, each checked: named ones must be suspect, in the suite and not under
    re-validation (an error names ``cases`` and the id); without names, every such case."""
    if case_ids is None:
        suspects = uow.regression.cases(suspect_only=True)
        busy = {r.case_id for r in uow.revalidations.open()}
        return [c for c in suspects if c.id not in busy]
    if not case_ids:
        raise InvalidInput("cases must name at least one case (or be left out: every suspect)", field="cases")
    if len(case_ids) > MAX_CASES:
        raise InvalidInput(f"cases may name at most {MAX_CASES} cases", field="cases")
    if len(set(case_ids)) != len(case_ids):
        twice = next(c for c in case_ids if case_ids.count(c) > 1)
        raise InvalidInput(f"case {twice} is named twice", field="cases")
    chosen: list[RegressionCase] = []
    for case_id in case_ids:
        try:
            case = uow.regression.case(case_id)
        except NotFound:
            raise InvalidInput(f"the suite has no case {case_id}", field="cases") from None
        case.check_may_revalidate()
        chosen.append(case)
    under_way = uow.revalidations.of_cases(case_ids)
    for case in chosen:
        link = under_way.get(case.id)
        if link is not None and link.is_open:
            raise Conflict(
                f"case {case.id} is under re-validation already (round {link.round_id}, candidate "
                f"{link.candidate_id})",
                field="cases",
            )
    return chosen


def send_suspects_to_revalidation(
    services: Services, *, case_ids: Sequence[str] | None, by: str, name: str | None = None
) -> Sent:
    """Send suspect cases back to Label Studio, blind, in a new revalidation round per task type.

    ``case_ids`` None: every suspect case not retired, not confirmed and not under re-validation
    (none: nothing is made). Otherwise exactly those, each a suspect case still in the suite (422
    naming ``cases`` for an unknown id, 409 for a retired, unsuspected, confirmed one or one under
    re-validation). ``name`` (checked by the request model) names the rounds. Each case sent is
    logged in its round's audit log, by ``by``."""
    with services.uow(read_only=True) as uow:
        chosen = _chosen(uow, case_ids)
    by_task: dict[str, list[RegressionCase]] = defaultdict(list)
    for case in chosen:
        by_task[case.task_type].append(case)
    sent: dict[int, list[str]] = {}
    for task, cases in sorted(by_task.items()):
        title = name or f"re-validation of {len(cases)} suspect case{'s' if len(cases) != 1 else ''}"
        round_ = create_round(
            services, name=title, task=task, model="", policy=None, kind=RoundKind.REVALIDATION
        )
        assert round_.id is not None
        sent[round_.id] = _send(services, cases, round_id=round_.id, by=by)
        services.work.push_soon(round_.id)  # into Label Studio by the task queue
    return Sent(sent)


def _send(services: Services, cases: Sequence[RegressionCase], *, round_id: int, by: str) -> list[str]:
    """Store a candidate of the revalidation round for each case, its link and an audit event; the
    ids of the cases sent."""
    at = utcnow()
    with services.uow() as uow:
        # Checked again inside the transaction that stores them: a case sent meanwhile is
        # refused here (or by the unique index, if the other request has not committed yet).
        current = _chosen(uow, [c.id for c in cases])
        links = []
        for case in current:
            candidate = revalidation_candidate(
                case, candidate_id=str(uuid.uuid4()), round_id=round_id, by=by, at=at
            )
            uow.candidates.add(candidate)
            links.append(Revalidation(case.id, candidate.id, round_id, by, at))
            uow.audit.add(
                AuditEvent(
                    round_id=case.round_id,
                    candidate_id=case.id,
                    action=SEND_ACTION,
                    by=by,
                    reason=f"sent to revalidation round {round_id} as candidate {candidate.id}",
                    status_before="suspect",
                    status_after="under re-validation",
                    at=at,
                )
            )
        uow.revalidations.add_many(links)
        uow.commit()
    return [c.id for c in current]


@dataclass
class Settled:
    """What a settle pass did."""

    confirmed: int = 0
    retired: int = 0
    unresolved: int = 0
    waiting: int = 0
    """Re-validations whose candidate is not decided yet."""

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def settle_revalidations(services: Services, *, round_id: int | None = None) -> Settled:
    """Settle every re-validation (of one round, or all) whose round is frozen, its decisions final:
    accepted confirms the case, rejected retires it (by the system, the reason naming the round and
    the candidate, logged), an undecided candidate leaves it suspect (unresolved).
    Idempotent: a settled one is never settled again (row locks keep concurrent passes apart)."""
    done = Settled()
    with services.uow(read_only=True) as uow:  # the sweep's usual case, without a write transaction
        if not uow.revalidations.open(round_id=round_id):
            return done
    with services.uow() as uow:
        links = uow.revalidations.open(round_id=round_id, for_update=True)
        if not links:
            return done
        candidates = uow.candidates.get_many([r.candidate_id for r in links])
        frozen = {rid: not uow.rounds.get(rid).is_live for rid in {r.round_id for r in links}}
        at = utcnow()
        for link in links:
            candidate = candidates.get(link.candidate_id)
            outcome = (
                outcome_of(candidate.status, round_frozen=frozen[link.round_id])
                if candidate is not None
                else RevalidationOutcome.UNRESOLVED
            )
            if outcome is None:
                done.waiting += 1
                continue
            before = uow.regression.case(link.case_id)
            case, settled = settle_case(before, link, outcome, at=at)
            uow.revalidations.save(settled)
            if case != before:
                uow.regression.save_case(case)
                uow.audit.add(_settle_event(case, settled, outcome))
            setattr(done, outcome.value, getattr(done, outcome.value) + 1)
        uow.commit()
    return done


def _settle_event(case: RegressionCase, link: Revalidation, outcome: RevalidationOutcome) -> AuditEvent:
    assert link.settled_at is not None
    retired = outcome is RevalidationOutcome.RETIRED
    return AuditEvent(
        round_id=case.round_id,
        candidate_id=case.id,
        action=RETIRE_ACTION if retired else CONFIRM_ACTION,
        by=SYSTEM,
        reason=link.retire_reason()
        if retired
        else f"re-validation confirmed its label: revalidation round {link.round_id}, "
        f"candidate {link.candidate_id}",
        status_before="suspect",
        status_after="retired" if retired else "confirmed",
        at=link.settled_at,
    )


def settle_after_freeze(services: Services, round_id: int) -> None:
    """Settle a round's re-validations if it is a revalidation round (once it is frozen)."""
    with services.uow(read_only=True) as uow:
        kind = uow.rounds.get(round_id).kind
    if kind is RoundKind.REVALIDATION:
        settle_revalidations(services, round_id=round_id)


def suspect_queue(services: Services) -> list[dict[str, Any]]:
    """The suspect cases still in the suite, each with its re-validation state: ``not_sent``,
    ``under_revalidation`` (with the round, the candidate and its status) or ``unresolved`` (its last
    re-validation ended with its round frozen undecided; it may be sent again)."""
    with services.uow(read_only=True) as uow:
        cases = uow.regression.cases(suspect_only=True)
        links = uow.revalidations.of_cases([c.id for c in cases])
        candidates = uow.candidates.get_many([r.candidate_id for r in links.values()])
    queue = []
    for case in cases:
        link = links.get(case.id)
        state = "not_sent" if link is None else "under_revalidation" if link.is_open else "unresolved"
        revalidation = None
        if link is not None:
            candidate = candidates.get(link.candidate_id)
            revalidation = {**link.to_dict(), "status": candidate.status.value if candidate else None}
        queue.append({**case.to_dict(), "revalidation_state": state, "revalidation": revalidation})
    return queue
