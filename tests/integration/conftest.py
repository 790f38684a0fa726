"""Fixtures of the integration tests that run the service's use cases without Label Studio."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from flask import Flask

from dynaval.adapters.task_queue import QueuedWork
from dynaval.bootstrap import bootstrap
from dynaval.entrypoints.app import create_app
from dynaval.service_layer.services import Services
from tests.fixtures.service import make_settings
from tests.support.label_studio_copy import LabelStudioCopy

PROJECT = 4242


@pytest.fixture
def services(database_url: str, tmp_path: Path) -> Iterator[Services]:
    """The service's parts on SQLite and on PostgreSQL, with a Label Studio that is never called."""
    settings = make_settings(
        database_url=database_url,
        data_dir=tmp_path,
        label_studio_url="http://127.0.0.1:9",  # never called on this path
        label_studio_api_key="unused-label-studio-key",
        public_url="http://127.0.0.1:9",
        model_dir=tmp_path,
    )
    built = bootstrap(settings)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def app(services: Services) -> Flask:
    """The Flask app around ``services``, without the background worker."""
    return create_app(services, start_background=False)


@dataclass
class RecordedWork:
    """The work queue port, recording what the use cases ask for."""

    escalations: list[int] = field(default_factory=list)
    verifications: list[int] = field(default_factory=list)
    hints: list[tuple[int, list[int]]] = field(default_factory=list)
    """The hints offered to the queue (none taken: the caller records them)."""

    def push_soon(self, round_id: int) -> None:
        pass

    def escalate_soon(self, round_id: int) -> None:
        self.escalations.append(round_id)

    def verify_soon(self, round_id: int) -> None:
        self.verifications.append(round_id)

    def hint_soon(self, round_id: int, task_ids: Collection[int], at: datetime) -> bool:
        self.hints.append((round_id, sorted(task_ids)))
        return False  # no worker here: the webhook records its tasks itself

    def run_job_soon(self, job_id: int) -> None:
        pass


@pytest.fixture
def label_studio(services: Services) -> Iterator[LabelStudioCopy]:
    """A fake of our Label Studio port holding project PROJECT; the work queue records requests."""
    copy = LabelStudioCopy(project_id=PROJECT)
    services.label_studio = copy  # type: ignore[assignment]
    services.work = RecordedWork()
    yield copy


@pytest.fixture
def queued(services: Services) -> LabelStudioCopy:
    """A Label Studio copy, with the composition root's real task queue and hint inbox (huey on
    SQLite in the test's folder) and no consumer: what is queued stays there until the test runs
    it."""
    copy = LabelStudioCopy(project_id=PROJECT)
    services.label_studio = copy  # type: ignore[assignment]
    assert isinstance(services.work, QueuedWork)
    return copy
