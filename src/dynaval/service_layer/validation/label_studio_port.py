"""Label Studio as the validation room's use cases see it: the calls they make, and what a task and
its annotations look like once read back. The adapter (:mod:`dynaval.adapters.label_studio`) makes
them with label-studio-sdk; tests hand in a copy of Label Studio held in memory."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from dynaval.domain.task_type import TaskType

# Tasks read back per export request when only some tasks are wanted. Label Studio's Django refuses
# a query string of more than 1,000 fields (400), and a smaller read keeps each answer quick.
READ_BATCH_SIZE = 200


@dataclass(frozen=True)
class ParsedAnnotation:
    annotation_id: int
    task_id: int
    annotator_id: str
    label: str | None
    flagged: bool
    reason: str | None
    was_cancelled: bool
    lead_time_s: float | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ExportedTask:
    task_id: int
    candidate_id: str | None
    annotations: list[ParsedAnnotation]
    data: dict[str, Any] = field(default_factory=dict)
    """The task's data as Label Studio holds it (an image task's signed URL among it)."""


class LabelStudioGateway(Protocol):
    """The port the use cases depend on; its adapter is
    :class:`~dynaval.adapters.label_studio.SdkLabelStudioGateway`."""

    def create_project(self, *, title: str, label_config: str, overlap: int) -> int: ...

    def register_webhook(self, *, project_id: int, url: str, secret: str) -> int: ...

    def import_tasks(self, *, project_id: int, tasks: Sequence[dict[str, Any]]) -> list[int]: ...

    def update_task_data(self, *, task_id: int, data: Mapping[str, Any]) -> None:
        """Replace a task's data (an image's signed URL renewed before it expires)."""

    def export_tasks(self, *, project_id: int, task_type: TaskType) -> Iterator[ExportedTask]: ...

    def read_tasks(
        self, *, project_id: int, task_ids: Sequence[int], task_type: TaskType
    ) -> list[ExportedTask]: ...

    def set_task_overlap(self, *, task_id: int, overlap: int, is_labeled: bool) -> None: ...

    def get_task_overlap(self, *, task_id: int) -> int: ...

    def find_tasks(self, *, project_id: int, candidate_ids: Sequence[str]) -> dict[str, int]: ...

    def task_url(self, project_id: int, task_id: int) -> str: ...

    def user_ids_by_email(self) -> dict[str, int]: ...
