"""A fake of our Label Studio port for the use-case tests: the annotations "Label Studio holds".

Tests put annotations in (in Label Studio's own JSON shape, read by the real
:func:`~dynaval.adapters.label_studio.parse_annotation`), send webhooks as hints, and let the
service read the tasks back through :meth:`read_tasks` and :meth:`export_tasks`, as it reads the
real Label Studio. The end-to-end tests do the same against a real Label Studio.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dynaval.adapters.label_studio import ExportedTask, LabelStudioUnavailable, parse_annotation
from dynaval.domain.task_type import TaskType

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def annotation_json(
    annotation_id: int,
    task_id: int,
    annotator: int,
    label: str | None,
    *,
    updated: datetime = T0,
    flag_reason: str | None = None,
    was_cancelled: bool = False,
    lead_time: float | None = 4.5,
) -> dict[str, Any]:
    """One annotation as Label Studio exports it (and as a webhook carries it)."""
    result: list[dict[str, Any]] = []
    if label is not None:
        result.append(
            {"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": [label]}}
        )
    if flag_reason is not None:
        result.append(
            {"from_name": "flag", "to_name": "text", "type": "choices", "value": {"choices": ["flag"]}}
        )
        result.append(
            {
                "from_name": "flag_reason",
                "to_name": "text",
                "type": "textarea",
                "value": {"text": [flag_reason]},
            }
        )
    return {
        "id": annotation_id,
        "task": task_id,
        "completed_by": annotator,
        "result": result,
        "was_cancelled": was_cancelled,
        "lead_time": lead_time,
        "created_at": T0.isoformat(),
        "updated_at": updated.isoformat(),
    }


def webhook(action: str, project_id: int, annotation: dict[str, Any]) -> dict[str, Any]:
    """A created or updated annotation's webhook, in Label Studio's shape."""
    return {
        "action": action,
        "project": {"id": project_id, "token": "project-token-never-stored"},
        "task": {"id": annotation["task"]},
        "annotation": annotation,
    }


def deletion_webhook(project_id: int, annotation_ids: Sequence[int]) -> dict[str, Any]:
    return {
        "action": "ANNOTATIONS_DELETED",
        "project": {"id": project_id},
        "annotations": [{"id": i} for i in annotation_ids],
    }


@dataclass
class LabelStudioCopy:
    """Label Studio's side of one project: task id → its annotations (JSON), and the reads made."""

    project_id: int
    tasks: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    candidate_ids: dict[int, str] = field(default_factory=dict)
    reads: list[list[int]] = field(default_factory=list)
    exports: int = 0
    down: bool = False
    during_read: Callable[[], None] | None = None
    """Called once a read has started, before it answers (what happens in Label Studio meanwhile)."""

    def put(self, annotation: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an annotation (by id) on its task."""
        kept = [a for a in self.tasks.setdefault(annotation["task"], []) if a["id"] != annotation["id"]]
        self.tasks[annotation["task"]] = [*kept, annotation]
        return annotation

    def delete(self, annotation_id: int) -> None:
        for task_id, held in self.tasks.items():
            self.tasks[task_id] = [a for a in held if a["id"] != annotation_id]

    def _task(self, task_id: int, task_type: TaskType) -> ExportedTask:
        return ExportedTask(
            task_id=task_id,
            candidate_id=self.candidate_ids.get(task_id),
            annotations=[
                parse_annotation(a, task_type, task_id=task_id) for a in self.tasks.get(task_id, [])
            ],
        )

    def _answer(self, tasks: list[ExportedTask]) -> list[ExportedTask]:
        """The copy as read; what ``during_read`` changes happens after it was read."""
        if self.down:
            raise LabelStudioUnavailable("Label Studio could not be reached to read tasks back: ConnectError")
        if self.during_read is not None:
            happening, self.during_read = self.during_read, None
            happening()
        return tasks

    def read_tasks(
        self, *, project_id: int, task_ids: Sequence[int], task_type: TaskType
    ) -> list[ExportedTask]:
        assert project_id == self.project_id
        self.reads.append(list(task_ids))
        return self._answer([self._task(t, task_type) for t in task_ids if t in self.tasks])

    def export_tasks(self, *, project_id: int, task_type: TaskType) -> Iterator[ExportedTask]:
        assert project_id == self.project_id
        self.exports += 1
        return iter(self._answer([self._task(t, task_type) for t in sorted(self.tasks)]))
