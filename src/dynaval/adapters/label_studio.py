"""The Label Studio adapter: every call goes through label-studio-sdk 2.x.

It turns SDK and network errors into :class:`LabelStudioUnavailable` and parses annotations into
:class:`ParsedAnnotation` so that no other module knows Label Studio's JSON shapes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from dynaval.domain.errors import Unavailable
from dynaval.domain.task_type import TaskType
from dynaval.service_layer.validation.label_studio_port import (
    READ_BATCH_SIZE,
    ExportedTask,
    LabelStudioGateway,
    ParsedAnnotation,
)

__all__ = [
    "READ_BATCH_SIZE",
    "ExportedTask",
    "LabelStudioGateway",
    "LabelStudioUnavailable",
    "ParsedAnnotation",
    "SdkLabelStudioGateway",
    "parse_annotation",
]

WEBHOOK_SECRET_HEADER = "X-Dynaval-Webhook-Secret"
WEBHOOK_ACTIONS = ("ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED")
CANDIDATE_ID_FIELD = "candidate_id"
# Candidate ids looked up per tasks-list request (one OR filter each): about 2 s for 100 on 2 cores.
FIND_BATCH_SIZE = 100
# The bulk JSON export is one synchronous request (about 1.5 ms a task on 2 loaded cores): it gets
# at least this timeout whatever the client's default.
EXPORT_MIN_TIMEOUT_S = 600.0


class LabelStudioUnavailable(Unavailable):
    code = "label_studio_unavailable"


class AnnotationFormatError(ValueError):
    """An annotation whose shape we cannot read."""


def _parse_time(value: object) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # Stored as UTC: SQLite keeps the wall-clock digits only, and the webhook upsert compares them.
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _id(value: object, what: str) -> int:
    """A Label Studio id: an integer that fits the database's 64-bit columns (``{"id": n}`` too)."""
    if isinstance(value, Mapping):
        value = value.get("id")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise AnnotationFormatError(f"annotation {what} must be a positive 64-bit integer id")
    return value


def _clean_text(value: object) -> str:
    """Text as a database column takes it: no NUL (PostgreSQL refuses it), no unpaired surrogate."""
    return str(value).replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def parse_annotation(
    raw: Mapping[str, Any], task_type: TaskType, *, task_id: int | None = None
) -> ParsedAnnotation:
    """Read label, flag and reason of one annotation (webhook or export shape).

    Whatever the shape, the only exception is :class:`AnnotationFormatError`: ids must be integers
    that fit 64 bits, ``result`` a list of regions, times ISO 8601; the reason is cleaned of
    characters no database stores.
    """
    if "id" not in raw:
        raise AnnotationFormatError("annotation has no id")
    annotation_id = _id(raw["id"], "id")
    task_value = _id(raw.get("task", task_id), "task")
    if raw.get("completed_by") is None:
        raise AnnotationFormatError("annotation has no completed_by")
    annotator_id = str(_id(raw.get("completed_by"), "completed_by"))
    result = raw.get("result") or []
    if not isinstance(result, list):
        raise AnnotationFormatError("annotation result is not a list")
    label: str | None = None
    flagged = False
    reason: str | None = None
    for region in result:
        value = region.get("value") if isinstance(region, Mapping) else None
        if not isinstance(value, Mapping):
            continue  # not a region this task type reads
        name = region.get("from_name")
        if name == task_type.label_control:
            choices = value.get("choices")
            if isinstance(choices, list) and choices and choices[0] in task_type.labels:
                label = str(choices[0])
        elif name == task_type.flag_control:
            flagged = bool(value.get("choices"))
        elif name == task_type.reason_control:
            texts = value.get("text")
            texts = texts if isinstance(texts, list) else [texts] if isinstance(texts, str) else []
            reason = _clean_text(" ".join(str(t) for t in texts)).strip()[:2000] or None
    lead_time = raw.get("lead_time")
    try:
        created_at = _parse_time(raw.get("created_at"))
        updated_at = _parse_time(raw.get("updated_at"))
    except (ValueError, OverflowError) as exc:
        raise AnnotationFormatError(f"unreadable annotation time: {exc}") from exc
    return ParsedAnnotation(
        annotation_id=annotation_id,
        task_id=task_value,
        annotator_id=annotator_id,
        label=label,
        flagged=flagged,
        reason=reason if flagged else None,
        was_cancelled=bool(raw.get("was_cancelled", False)),
        lead_time_s=_seconds(lead_time),
        created_at=created_at,
        updated_at=updated_at,
    )


def _seconds(value: object) -> float | None:
    """A finite number of seconds, or None (NaN, infinities and huge integers are not times)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _candidate_id(data: object) -> str | None:
    if not isinstance(data, Mapping):
        return None
    value = data.get(CANDIDATE_ID_FIELD)
    return str(value) if value is not None else None


class SdkLabelStudioGateway:
    """:class:`LabelStudioGateway` over label-studio-sdk's ``LabelStudio`` client."""

    def __init__(self, *, base_url: str, api_key: str, timeout_s: float = 30.0) -> None:
        from label_studio_sdk import LabelStudio

        self._client = LabelStudio(base_url=base_url, api_key=api_key, timeout=timeout_s)
        self._timeout_s = timeout_s
        self.base_url = base_url.rstrip("/")

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from label_studio_sdk.core.api_error import ApiError
        from label_studio_sdk.core.parse_error import ParsingError

        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            raise LabelStudioUnavailable(f"Label Studio refused to {what} (HTTP {exc.status_code})") from exc
        except ParsingError as exc:
            raise LabelStudioUnavailable(f"Label Studio's answer to {what} had an unexpected shape") from exc
        except (httpx.HTTPError, OSError) as exc:
            raise LabelStudioUnavailable(
                f"Label Studio could not be reached to {what}: {type(exc).__name__}"
            ) from exc

    def create_project(self, *, title: str, label_config: str, overlap: int) -> int:
        project = self._call(
            "create a project",
            self._client.projects.create,
            title=title,
            label_config=label_config,
            maximum_annotations=overlap,
            show_overlap_first=True,
            overlap_cohort_percentage=100,
        )
        return int(project.id)

    def register_webhook(self, *, project_id: int, url: str, secret: str) -> int:
        hook = self._call(
            "register the webhook",
            self._client.webhooks.create,
            url=url,
            project=project_id,
            send_payload=True,
            send_for_all_actions=False,
            headers={WEBHOOK_SECRET_HEADER: secret},
            actions=list(WEBHOOK_ACTIONS),
        )
        return int(hook.id)

    def import_tasks(self, *, project_id: int, tasks: Sequence[dict[str, Any]]) -> list[int]:
        response = self._call(
            "import tasks",
            self._client.projects.import_tasks,
            id=project_id,
            request=list(tasks),
            return_task_ids=True,
        )
        ids = [int(i) for i in (response.task_ids or [])]
        if len(ids) != len(tasks):
            raise LabelStudioUnavailable(f"Label Studio returned {len(ids)} task ids for {len(tasks)} tasks")
        return ids

    def update_task_data(self, *, task_id: int, data: Mapping[str, Any]) -> None:
        self._call("update a task's data", self._client.tasks.update, id=task_id, data=dict(data))

    def export_tasks(self, *, project_id: int, task_type: TaskType) -> Iterator[ExportedTask]:
        """Every task of the project, unannotated ones included, each with all its annotations
        (cancelled ones included: ``was_cancelled`` tells them apart).

        One ``GET /api/projects/<id>/export?export_type=JSON&download_all_tasks=true``: the JSON
        format keeps every annotation of a task (``JSON_MIN`` keeps one) and ``completed_by`` there
        is the user id. The whole export is read before the first task is yielded, so a failure
        raises :class:`LabelStudioUnavailable` before anything is processed.
        """
        yield from self._export(project_id, task_type, what="export the project")

    def read_tasks(
        self, *, project_id: int, task_ids: Sequence[int], task_type: TaskType
    ) -> list[ExportedTask]:
        """The project's tasks among ``task_ids`` as Label Studio holds them now, each with all its
        annotations (cancelled ones included), read with the service's own key.

        The same export as :meth:`export_tasks`, restricted to the given tasks (``ids[]``), in
        requests of at most :data:`READ_BATCH_SIZE` tasks. A task Label Studio no longer has (or
        that is not in the project) is absent from the answer.
        """
        wanted = list(dict.fromkeys(int(t) for t in task_ids))
        read: list[ExportedTask] = []
        for start in range(0, len(wanted), READ_BATCH_SIZE):
            batch = wanted[start : start + READ_BATCH_SIZE]
            read.extend(self._export(project_id, task_type, what="read tasks back", task_ids=batch))
        return read

    def _export(
        self, project_id: int, task_type: TaskType, *, what: str, task_ids: Sequence[int] | None = None
    ) -> list[ExportedTask]:
        timeout = max(self._timeout_s, EXPORT_MIN_TIMEOUT_S)
        options: dict[str, Any] = {"timeout_in_seconds": int(timeout)}
        if task_ids is not None:
            # The SDK sends its own ``ids`` parameter, which Label Studio ignores: it reads ``ids[]``.
            options["additional_query_parameters"] = {"ids[]": [str(t) for t in task_ids]}
        chunks = self._call(
            what,
            lambda: b"".join(
                self._client.projects.exports.download_sync(
                    project_id,
                    export_type="JSON",
                    download_all_tasks=True,
                    request_options=options,
                )
            ),
        )
        try:
            tasks = json.loads(chunks)
        except ValueError as exc:
            raise LabelStudioUnavailable("Label Studio's export was not JSON") from exc
        if not isinstance(tasks, list):
            raise LabelStudioUnavailable("Label Studio's export was not a list of tasks")
        try:
            return [
                ExportedTask(
                    task_id=int(task["id"]),
                    candidate_id=_candidate_id(task.get("data")),
                    annotations=[
                        parse_annotation(a, task_type, task_id=int(task["id"]))
                        for a in task.get("annotations") or []
                    ],
                    data=dict(task.get("data") or {}),
                )
                for task in tasks
            ]
        except (AnnotationFormatError, KeyError, TypeError, ValueError) as exc:
            raise LabelStudioUnavailable(f"Label Studio's export had an unexpected shape: {exc}") from exc

    def find_tasks(self, *, project_id: int, candidate_ids: Sequence[str]) -> dict[str, int]:
        """Map candidate ids to the ids of the project's tasks whose ``data.candidate_id`` they are.

        Candidates without a task are absent from the result. Used before importing again after a
        failed push, so that a candidate is never imported twice. If a candidate has several tasks
        anyway, the lowest task id wins.
        """
        wanted = list(dict.fromkeys(str(c) for c in candidate_ids))
        found: dict[str, int] = {}
        for start in range(0, len(wanted), FIND_BATCH_SIZE):
            batch = wanted[start : start + FIND_BATCH_SIZE]
            # Never an empty batch: an empty filter list would match every task of the project.
            query = json.dumps(
                {
                    "filters": {
                        "conjunction": "or",
                        "items": [
                            {
                                "filter": f"filter:tasks:data.{CANDIDATE_ID_FIELD}",
                                "operator": "equal",
                                "type": "String",
                                "value": candidate_id,
                            }
                            for candidate_id in batch
                        ],
                    }
                }
            )
            tasks = self._call(
                "look tasks up by candidate id",
                lambda q=query: list(
                    self._client.tasks.list(project=project_id, query=q, fields="task_only", page_size=1000)
                ),
            )
            in_batch = set(batch)
            for task in tasks:
                candidate_id = _candidate_id(task.data)
                if candidate_id in in_batch and task.id is not None:
                    task_id = int(task.id)
                    found[candidate_id] = min(task_id, found.get(candidate_id, task_id))
        return found

    def get_task_overlap(self, *, task_id: int) -> int:
        task = self._call("read a task", self._client.tasks.get, id=task_id)
        return int(task.overlap)

    def user_ids_by_email(self) -> dict[str, int]:
        """Every Label Studio user's id, by email (users without one are left out)."""
        users = self._call("list users", self._client.users.list)
        return {str(u.email): int(u.id) for u in users if getattr(u, "email", None) and u.id is not None}

    def task_url(self, project_id: int, task_id: int) -> str:
        """Where a person opens the task in Label Studio (its data manager, task open)."""
        return f"{self.base_url}/projects/{int(project_id)}/data?task={int(task_id)}"

    def set_task_overlap(self, *, task_id: int, overlap: int, is_labeled: bool) -> None:
        # Raising overlap alone leaves the task marked labelled and Label Studio's queue skips it.
        self._call(
            "raise a task's overlap",
            self._client.tasks.update,
            id=task_id,
            overlap=overlap,
            is_labeled=is_labeled,
        )
