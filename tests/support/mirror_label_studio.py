"""A stand-in for Label Studio that mirrors a real project, for a twin of a service under test.

A twin is a second, fresh service (its own database) that should see the same round as the
service under test: the same Label Studio project id and the same task id for each candidate, so
that webhook payloads Label Studio sent for the real project apply to it verbatim. The twin creates
its round and candidates through its own HTTP API as usual; :class:`MirrorGateway` answers its
project creation with the real project's id and its imports with the real task ids (found by the
candidate's text). It holds no annotations: a twin learns votes from webhooks only and must never
reconcile.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dynaval.adapters.label_studio import ExportedTask
from dynaval.domain.task_type import TaskType


class MirrorGateway:
    """A :class:`~dynaval.adapters.label_studio.LabelStudioGateway` over an existing project's ids."""

    def __init__(self, *, project_id: int, task_ids_by_text: Mapping[str, int]) -> None:
        self.project_id = project_id
        self._task_ids = dict(task_ids_by_text)
        self.overlaps: dict[int, int] = {}

    def create_project(self, *, title: str, label_config: str, overlap: int) -> int:
        return self.project_id

    def register_webhook(self, *, project_id: int, url: str, secret: str) -> int:
        return 1  # nothing is registered: the test delivers the webhooks itself

    def import_tasks(self, *, project_id: int, tasks: Sequence[dict[str, Any]]) -> list[int]:
        assert project_id == self.project_id, "the twin imports into another project"
        return [self._task_ids[str(task["text"])] for task in tasks]

    def export_tasks(self, *, project_id: int, task_type: TaskType) -> Iterator[ExportedTask]:
        raise AssertionError("a twin learns votes from webhooks only: it must not reconcile")

    def set_task_overlap(self, *, task_id: int, overlap: int, is_labeled: bool) -> None:
        self.overlaps[task_id] = overlap

    def get_task_overlap(self, *, task_id: int) -> int:
        return self.overlaps.get(task_id, 0)

    def find_tasks(self, *, project_id: int, candidate_ids: Sequence[str]) -> dict[str, int]:
        return {}

    def task_url(self, project_id: int, task_id: int) -> str:
        return f"mirror://projects/{project_id}/tasks/{task_id}"
