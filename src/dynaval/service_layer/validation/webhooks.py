"""Label Studio's webhooks: a hint that a task changed, never a source of votes.

Label Studio Community shows a webhook's headers, our secret among them, to every user who can log
in, annotators included (see docs/trust.md). Whoever reads it can post any payload: another
annotator's name, a vote nobody cast, an update dated in the year 9999, the deletion of annotations
that do not exist yet. So nothing of a webhook's content is stored or counted. The service takes
from it only which of the round's tasks to read back, and reads them from Label Studio with its own
key (:mod:`dynaval.service_layer.validation.vote_reading`); votes and decisions come from that read alone.

The secret still keeps out everyone who cannot log in to Label Studio, and each webhook is checked
for shape, so a malformed one is refused and changes nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import DomainError, NotFound, WritersBusy
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork


class WebhookUnauthorized(DomainError):
    code = "unauthorized"


def check_webhook_secret(services: Services, presented: str | None) -> None:
    expected = services.settings.webhook_secret
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise WebhookUnauthorized("missing or wrong webhook secret", field="X-Dynaval-Webhook-Secret")


@dataclass(frozen=True)
class AnnotationChanged:
    """``ANNOTATION_CREATED`` or ``ANNOTATION_UPDATED``: the annotation's task changed."""

    action: str
    project_id: int
    task_id: int


@dataclass(frozen=True)
class AnnotationsDeleted:
    """``ANNOTATIONS_DELETED``: these annotations (by Label Studio id) are gone."""

    project_id: int
    annotation_ids: tuple[int, ...]
    action: str = "ANNOTATIONS_DELETED"


@dataclass(frozen=True)
class OtherAction:
    """Any other action: answered and ignored."""

    action: str


WebhookHint = AnnotationChanged | AnnotationsDeleted | OtherAction
"""What a webhook says, read from its body by the entry point's request model (which checks its
shape: ids are positive 64-bit integers, at most 5,000 deleted annotations) and nothing more."""


@dataclass
class WebhookResult:
    action: str
    handled: bool
    tasks_to_verify: int = 0
    """Tasks of the round now waiting to be read back from Label Studio because of this webhook."""

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "handled": self.handled, "tasks_to_verify": self.tasks_to_verify}


def ingest_webhook(services: Services, hint: WebhookHint) -> WebhookResult:
    """Take one Label Studio webhook as a hint: the tasks it concerns wait to be read back.

    Only ids are read from the payload (its project, and the annotation's task, or the deleted
    annotations' ids); the raw payload (it carries the project's token) is never stored. A task
    that is no candidate or gold item of the project's round is refused (404 naming
    ``annotation.task``); deleted annotation ids the service never stored for the round lead to no
    task and change nothing.

    The answer does not wait for another process's writes: where another process holds SQLite's
    one write lock (the worker applying a read-back), the tasks go to the task queue with the
    webhook's time, and a worker records them (:func:`take_hints`). Only if the queue cannot take
    them does the webhook wait to record them itself. (PostgreSQL locks rows, so there it records
    them at once.)
    """
    if isinstance(hint, OtherAction):
        return WebhookResult(action=hint.action, handled=False)
    round_id = _round_of_project(services, hint.project_id)
    at = utcnow()
    try:
        # One transaction, as long as no other writer holds the database.
        with services.uow(wait_for_writers=False) as uow:
            tasks = _tasks_named(uow, round_id, hint)
            uow.task_checks.request(round_id, tasks, at)
            uow.commit()
    except WritersBusy:
        with services.uow(read_only=True) as uow:
            tasks = _tasks_named(uow, round_id, hint)
        if tasks:
            if services.work.hint_soon(round_id, tasks, at):
                # The worker that records them asks for their read.
                return WebhookResult(action=hint.action, handled=True, tasks_to_verify=len(tasks))
            _request(services, round_id, tasks, at)
    if tasks:
        services.work.verify_soon(round_id)
    return WebhookResult(action=hint.action, handled=True, tasks_to_verify=len(tasks))


def _tasks_named(uow: UnitOfWork, round_id: int, hint: AnnotationChanged | AnnotationsDeleted) -> set[int]:
    """The round's tasks the webhook names; a task that is not the round's is refused."""
    if isinstance(hint, AnnotationChanged):
        if not uow.task_checks.is_task_of_round(round_id, hint.task_id):
            raise NotFound("the annotation's task is not a candidate of this round", field="annotation.task")
        return {hint.task_id}
    return uow.task_checks.tasks_of_annotations(round_id, hint.annotation_ids)


def take_hints(services: Services, hints: Iterable[tuple[int, Collection[int], datetime]]) -> None:
    """A worker records, in one transaction, the tasks that webhooks named (``(round, tasks, at)``
    each, queued because the database was busy then), and asks for their rounds' reads. A task
    named by several keeps the latest time: a read that started before it must not settle it. A
    task whose stored copy was read since (a read that started at or after that time, as a read
    settles the requests made before it) is not asked for again: a hint recorded late, behind a
    backlog, would otherwise have every such task read twice."""
    latest: dict[int, dict[int, datetime]] = {}
    for round_id, task_ids, at in hints:
        times = latest.setdefault(round_id, {})
        for task_id in task_ids:
            if task_id not in times or times[task_id] < at:
                times[task_id] = at
    asked: list[int] = []
    with services.uow() as uow:
        for round_id, times in latest.items():
            read = uow.task_checks.last_read(round_id, times)
            unread = {task: at for task, at in times.items() if task not in read or read[task] < at}
            if unread:
                uow.task_checks.request_each(round_id, unread)
                asked.append(round_id)
        uow.commit()
    for round_id in asked:
        services.work.verify_soon(round_id)


def _request(services: Services, round_id: int, task_ids: Collection[int], at: datetime) -> None:
    with services.uow() as uow:
        uow.task_checks.request(round_id, task_ids, at)
        uow.commit()


def _round_of_project(services: Services, project_id: int) -> int:
    round_id = services.webhook_rounds.get(project_id)
    if round_id is None:
        with services.uow(read_only=True) as uow:
            round_id = uow.task_checks.round_of_project(project_id)
        if round_id is None:
            raise NotFound("no round uses this Label Studio project", field="project.id")
        # A round's project never changes: read it once per process.
        services.webhook_rounds[project_id] = round_id
    return round_id
