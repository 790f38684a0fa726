"""Label Studio's webhooks: a hint that a task changed, never a source of votes.

Label Studio Community shows a webhook's headers, our secret among them, to every user who can log
in, annotators included (see docs/trust.md). Whoever reads it can post any payload: another
annotator's name, a vote nobody cast, an update dated in the year 9999, the deletion of annotations
that do not exist yet. So nothing of a webhook's content is stored or counted. The service takes
from it only which of the round's tasks to read back, and reads them from Label Studio with its own
key (:mod:`dynaval.service_layer.verification`); votes and decisions come from that read alone.

The secret still keeps out everyone who cannot log in to Label Studio, and each webhook is checked
for shape, so a malformed one is refused and changes nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from dynaval.adapters.label_studio import WEBHOOK_ACTIONS
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import DomainError, InvalidInput, NotFound, TooLarge
from dynaval.service_layer.services import Services

MAX_DELETED_IDS = 5000
"""Annotation ids one deletion webhook may name: Label Studio's own batch (``WEBHOOK_BATCH_SIZE``)."""


class WebhookUnauthorized(DomainError):
    code = "unauthorized"


def check_webhook_secret(services: Services, presented: str | None) -> None:
    expected = services.settings.webhook_secret
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise WebhookUnauthorized("missing or wrong webhook secret", field="X-Dynaval-Webhook-Secret")


def _is_id(value: object) -> TypeGuard[int]:
    """A Label Studio id: a positive integer that fits the database's 64-bit columns."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


@dataclass
class WebhookResult:
    action: str
    handled: bool
    tasks_to_verify: int = 0
    """Tasks of the round now waiting to be read back from Label Studio because of this webhook."""

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "handled": self.handled, "tasks_to_verify": self.tasks_to_verify}


def ingest_webhook(services: Services, payload: object) -> WebhookResult:
    """Take one Label Studio webhook as a hint: the tasks it concerns wait to be read back.

    Only ids are read from the payload (its project, and the annotation's task, or the deleted
    annotations' ids); the raw payload (it carries the project's token) is never stored. A task
    that is no candidate or gold item of the project's round is refused (404 naming
    ``annotation.task``); deleted annotation ids the service never stored for the round lead to no
    task and change nothing.
    """
    if not isinstance(payload, Mapping):
        raise InvalidInput("webhook body must be a JSON object", field="body")
    action = payload.get("action")
    if not isinstance(action, str):
        raise InvalidInput("webhook has no action", field="action")
    if action not in WEBHOOK_ACTIONS:
        return WebhookResult(action=action, handled=False)
    project = payload.get("project")
    project_id = project.get("id") if isinstance(project, Mapping) else None
    if not _is_id(project_id):
        raise InvalidInput("webhook has no project id (a positive integer)", field="project.id")
    if action == "ANNOTATIONS_DELETED":
        deleted_ids = _deleted_annotation_ids(payload.get("annotations"))
        task_id = None
    else:
        task_id = _annotation_task(payload.get("annotation"))
    round_id = _round_of_project(services, project_id)
    with services.uow() as uow:
        if task_id is not None:
            if not uow.task_checks.is_task_of_round(round_id, task_id):
                raise NotFound(
                    "the annotation's task is not a candidate of this round", field="annotation.task"
                )
            tasks = {task_id}
        else:
            tasks = uow.task_checks.tasks_of_annotations(round_id, deleted_ids)
        uow.task_checks.request(round_id, tasks, utcnow())
        uow.commit()
    if tasks:
        services.work.verify_soon(round_id)
    return WebhookResult(action=action, handled=True, tasks_to_verify=len(tasks))


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


def _annotation_task(raw: object) -> int:
    """The task id of a created or updated annotation (``task`` is an id, or ``{"id": ...}``)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("webhook has no annotation object", field="annotation")
    task = raw.get("task")
    if isinstance(task, Mapping):
        task = task.get("id")
    if not _is_id(task):
        raise InvalidInput(
            "the annotation's task must be a positive 64-bit integer id", field="annotation.task"
        )
    return task


def _deleted_annotation_ids(raw: object) -> list[int]:
    if not isinstance(raw, list) or not all(isinstance(a, Mapping) and _is_id(a.get("id")) for a in raw):
        raise InvalidInput(
            "annotations must be a list of objects with a positive integer id", field="annotations"
        )
    if len(raw) > MAX_DELETED_IDS:
        raise TooLarge(
            f"a deletion webhook names at most {MAX_DELETED_IDS} annotations; this one names {len(raw)}",
            field="annotations",
        )
    return [int(a["id"]) for a in raw]
