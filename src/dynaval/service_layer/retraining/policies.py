"""A task type's retraining policy: a lead sets and reads it, and the task queue starts its runs.

A run is a job (``retrain:<task type>``, so two never train one policy at once), started by
:func:`start_due_runs` after each read-back of votes and in the minute's sweep. The job, its
trigger and the policy's new count are stored in one unit of work: a run is started once for the
examples that made it due, and the count of new examples starts again from there. What a run does
is :mod:`dynaval.model_training.retraining_run`'s affair.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, NotFound
from dynaval.domain.jobs.job import Job, JobKind
from dynaval.domain.retraining.audit import RetrainingEvent, RetrainingStep
from dynaval.domain.retraining.policy import RetrainingPolicy
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.round import Round, RoundKind, RoundState
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

log = logging.getLogger(__name__)

BY_POLICY = "retraining"
"""Who the audit log and the model catalog name for what a policy did by itself."""
EVENTS_SHOWN = 50
RECENT_RUNS = 10


def job_key(task_type: str) -> str:
    return f"{JobKind.RETRAIN.value}:{task_type}"


def accepted_examples(uow: UnitOfWork, task_type: str) -> int:
    """The task type's accepted examples, over its adversarial rounds."""
    return sum(
        uow.candidates.count_with_status(r.id, CandidateStatus.ACCEPTED)
        for r in uow.rounds.all()
        if r.task_type == task_type and r.kind is RoundKind.ADVERSARIAL and r.id is not None
    )


def open_round(uow: UnitOfWork, task_type: str) -> Round | None:
    """The task type's newest open adversarial round: the one whose model a run would replace."""
    rounds = [
        r
        for r in uow.rounds.all()
        if r.task_type == task_type and r.kind is RoundKind.ADVERSARIAL and r.state is RoundState.OPEN
    ]
    return max(rounds, key=lambda r: r.id or 0, default=None)


def _check_task_type(services: Services, task_type: str) -> None:
    """404 naming ``task_type`` for a task type the service does not know."""
    known = services.catalog.names()
    if task_type not in known:
        raise NotFound(f"no task type {task_type!r} (known: {', '.join(known)})", field="task_type")


def set_policy(
    services: Services, task_type: str, settings: Mapping[str, Any], *, by: str
) -> RetrainingPolicy:
    """Set the task type's policy (every value checked first; ``{"every": null}`` turns it off). Its
    count of newly accepted examples starts now."""
    _check_task_type(services, task_type)
    now = utcnow()
    with services.uow() as uow:
        policy = RetrainingPolicy.set_by(
            task_type, settings, accepted=accepted_examples(uow, task_type), by=by, at=now
        )
        stored = uow.retraining.get(task_type, for_update=True)
        if stored is not None:  # the minimum interval counts from the last run, whoever set it since
            policy = replace(policy, last_run_at=stored.last_run_at)
        uow.retraining.save(policy)
        uow.retraining.log(
            RetrainingEvent(task_type, RetrainingStep.POLICY_SET, by=by, at=now, detail=policy.settings())
        )
        uow.commit()
    log.warning("retraining policy of %s set by %s: %s", task_type, by, policy.settings())
    return policy


def policy_view(services: Services, task_type: str) -> dict[str, Any]:
    """The policy as set, where its count stands, whether it is due (or what it waits for), its
    recent runs and its audit log."""
    _check_task_type(services, task_type)
    with services.uow(read_only=True) as uow:
        policy = uow.retraining.get(task_type) or RetrainingPolicy(task_type)
        accepted = accepted_examples(uow, task_type)
        round_ = open_round(uow, task_type)
        events = uow.retraining.events(task_type, EVENTS_SHOWN)
        runs = uow.jobs.latest_with_key(job_key(task_type), RECENT_RUNS)
    due = policy.due(accepted, utcnow())
    waiting_for = due.waiting_for
    if due.due and round_ is None:
        waiting_for = "an open adversarial round of the task type (the model a new one would replace)"
    return {
        "task_type": task_type,
        "policy": policy.settings(),
        "on": policy.on,
        "accepted": accepted,
        "new_examples": policy.new_examples(accepted) if policy.on else 0,
        "due": due.due and round_ is not None,
        "waiting_for": waiting_for,
        "open_round": None
        if round_ is None
        else {"id": round_.id, "name": round_.name, "model": round_.model_hash},
        "last_run_at": None if policy.last_run_at is None else policy.last_run_at.isoformat(),
        "updated_by": policy.updated_by or None,
        "updated_at": None if policy.updated_at is None else policy.updated_at.isoformat(),
        "runs": [job.to_dict() for job in runs],
        "events": [event.to_dict() for event in events],
    }


def start_due_runs(services: Services) -> list[int]:
    """Start a run of every policy that is due (and has an open round to retrain for); the ids of
    the jobs started."""
    with services.uow(read_only=True) as uow:
        task_types = [policy.task_type for policy in uow.retraining.turned_on()]
    started = []
    for task_type in task_types:
        try:
            job = _start_if_due(services, task_type)
        except Exception:  # one policy's trouble holds neither the others nor the caller's read-back
            log.exception("retraining of %s: could not check whether a run is due", task_type)
            continue
        if job is not None and job.id is not None:
            started.append(job.id)
    return started


def _start_if_due(services: Services, task_type: str) -> Job | None:
    now = utcnow()
    with services.uow() as uow:
        policy = uow.retraining.get(task_type, for_update=True)
        if policy is None or not policy.on:
            return None
        accepted = accepted_examples(uow, task_type)
        round_ = open_round(uow, task_type)
        if round_ is None or not policy.due(accepted, now).due:
            return None
        try:
            job = _add_run(uow, policy, round_, accepted, now, by=BY_POLICY)
        except Conflict:  # a run of the policy is active: the next check after it ends starts one
            return None
        uow.commit()
    return jobs.queued(services, job)


def start_run_now(services: Services, task_type: str, *, by: str) -> Job:
    """A lead starts a run at once, whatever the count (the policy's settings, or the defaults when
    none is set); its count starts again. 409 naming ``task_type`` while a run is active or when
    the task type has no open adversarial round."""
    _check_task_type(services, task_type)
    now = utcnow()
    with services.uow() as uow:
        policy = uow.retraining.get(task_type, for_update=True) or RetrainingPolicy(task_type)
        round_ = open_round(uow, task_type)
        if round_ is None:
            raise Conflict(
                f"{task_type} has no open adversarial round: a run replaces an open round's model",
                field="task_type",
            )
        job = _add_run(uow, policy, round_, accepted_examples(uow, task_type), now, by=by)
        uow.commit()
    return jobs.queued(services, job)


def _add_run(
    uow: UnitOfWork, policy: RetrainingPolicy, round_: Round, accepted: int, now: datetime, *, by: str
) -> Job:
    """A run's job, stored with its trigger and the policy's new count (the caller commits)."""
    trigger = {
        "by": by,
        "accepted": accepted,
        "new_examples": policy.new_examples(accepted),
        "every": policy.every,
        "round": {"id": round_.id, "name": round_.name, "model": round_.model_hash},
    }
    job = jobs.add_job(
        uow,
        kind=JobKind.RETRAIN,
        key=job_key(policy.task_type),
        params={
            "task_type": policy.task_type,
            "round_id": round_.id,
            "policy": policy.settings(),
            "trigger": trigger,
        },
        by=by,
        field="task_type",
    )
    uow.retraining.save(policy.ran(accepted, now))
    uow.retraining.log(
        RetrainingEvent(
            policy.task_type, RetrainingStep.TRIGGERED, by=by, at=now, detail=trigger, job_id=job.id
        )
    )
    log.warning("retraining of %s started by %s (job %s): %s", policy.task_type, by, job.id, trigger)
    return job


def log_step(
    services: Services, task_type: str, step: RetrainingStep, detail: dict[str, Any], *, job_id: int | None
) -> None:
    """A step of a run, in the retraining audit log."""
    with services.uow() as uow:
        uow.retraining.log(
            RetrainingEvent(task_type, step, by=BY_POLICY, at=utcnow(), detail=detail, job_id=job_id)
        )
        uow.commit()
