"""SdkLabelStudioGateway against a real Label Studio 1.23.2 (started once by the test session).

The ``label_studio_server`` and ``label_studio_annotators`` fixtures come from
tests/fixtures/label_studio.py, registered in tests/conftest.py.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dynaval.adapters.label_config import parse_task_type
from dynaval.adapters.label_studio import (
    WEBHOOK_ACTIONS,
    WEBHOOK_SECRET_HEADER,
    LabelStudioUnavailable,
    SdkLabelStudioGateway,
    parse_annotation,
)
from dynaval.domain.task_type import TaskType
from tests.support.label_studio_server import Annotator, LabelStudioServer

pytestmark = pytest.mark.labelstudio

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def task_type() -> TaskType:
    return parse_task_type("sentiment", (REPO / "label_config" / "sentiment.xml").read_text(encoding="utf-8"))


@pytest.fixture
def gateway(label_studio_server: LabelStudioServer) -> SdkLabelStudioGateway:
    return SdkLabelStudioGateway(base_url=label_studio_server.url, api_key=label_studio_server.api_key)


def _tasks(n: int) -> list[dict[str, Any]]:
    run = uuid.uuid4().hex[:8]
    return [{"text": f"example {i} of run {run}", "candidate_id": f"cand-{run}-{i}"} for i in range(n)]


def test_create_project_with_overlap_and_register_webhook(
    gateway: SdkLabelStudioGateway, label_studio_server: LabelStudioServer, task_type: TaskType
) -> None:
    project_id = gateway.create_project(
        title="adapter project", label_config=task_type.label_config, overlap=2
    )

    project = label_studio_server.client.projects.get(id=project_id)
    assert project.maximum_annotations == 2
    secret = uuid.uuid4().hex
    hook_id = gateway.register_webhook(project_id=project_id, url="http://127.0.0.1:9/hook", secret=secret)

    hooks = label_studio_server.client.webhooks.list(project=str(project_id))
    ours = [h for h in hooks if h.id == hook_id]
    assert len(ours) == 1
    assert ours[0].headers == {WEBHOOK_SECRET_HEADER: secret}
    assert ours[0].send_payload is True
    assert set(ours[0].actions or []) == set(WEBHOOK_ACTIONS)


def test_import_then_find_tasks_by_candidate_id(gateway: SdkLabelStudioGateway, task_type: TaskType) -> None:
    project_id = gateway.create_project(title="find tasks", label_config=task_type.label_config, overlap=2)
    tasks = _tasks(3)

    ids = gateway.import_tasks(project_id=project_id, tasks=tasks)

    assert len(ids) == 3
    by_candidate = {t["candidate_id"]: i for t, i in zip(tasks, ids, strict=True)}
    assert ids == sorted(ids)
    assert gateway.find_tasks(project_id=project_id, candidate_ids=list(by_candidate)) == by_candidate
    first = tasks[0]["candidate_id"]
    assert gateway.find_tasks(project_id=project_id, candidate_ids=[first, "no-such-candidate"]) == {
        first: by_candidate[first]
    }
    assert gateway.find_tasks(project_id=project_id, candidate_ids=["no-such-candidate"]) == {}
    assert gateway.find_tasks(project_id=project_id, candidate_ids=[]) == {}
    # A prefix is not a match, and another project's tasks are not found.
    assert gateway.find_tasks(project_id=project_id, candidate_ids=[first[:-1]]) == {}
    other = gateway.create_project(title="other project", label_config=task_type.label_config, overlap=2)
    assert gateway.find_tasks(project_id=other, candidate_ids=[first]) == {}


def test_import_returns_ids_in_input_order(
    gateway: SdkLabelStudioGateway, label_studio_server: LabelStudioServer, task_type: TaskType
) -> None:
    project_id = gateway.create_project(title="import order", label_config=task_type.label_config, overlap=2)
    tasks = _tasks(5)

    ids = gateway.import_tasks(project_id=project_id, tasks=tasks)

    for task, task_id in zip(tasks, ids, strict=True):
        assert label_studio_server.client.tasks.get(id=task_id).data["candidate_id"] == task["candidate_id"]


def test_export_returns_every_task_with_every_annotation(
    gateway: SdkLabelStudioGateway,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    task_type: TaskType,
) -> None:
    project_id = gateway.create_project(title="export", label_config=task_type.label_config, overlap=2)
    tasks = _tasks(3)
    first, second, unannotated = gateway.import_tasks(project_id=project_id, tasks=tasks)
    a, b, c = label_studio_annotators[:3]
    positive = label_studio_server.annotate(first, a.id, "positive", lead_time_s=4.5)
    flagged = label_studio_server.annotate(first, b.id, "negative", flag_reason="not English")
    skipped = label_studio_server.annotate(first, c.id, None, cancelled=True)
    neutral = label_studio_server.annotate(second, c.id, "neutral")

    exported = {t.task_id: t for t in gateway.export_tasks(project_id=project_id, task_type=task_type)}

    assert set(exported) == {first, second, unannotated}
    assert exported[unannotated].annotations == []
    assert exported[unannotated].candidate_id == tasks[2]["candidate_id"]
    assert exported[first].candidate_id == tasks[0]["candidate_id"]
    by_id = {p.annotation_id: p for p in exported[first].annotations}
    assert set(by_id) == {positive, flagged, skipped}
    assert (by_id[positive].annotator_id, by_id[positive].label, by_id[positive].flagged) == (
        str(a.id),
        "positive",
        False,
    )
    assert by_id[positive].lead_time_s == pytest.approx(4.5)
    assert by_id[positive].was_cancelled is False
    assert (by_id[flagged].annotator_id, by_id[flagged].label) == (str(b.id), "negative")
    assert (by_id[flagged].flagged, by_id[flagged].reason) == (True, "not English")
    assert (by_id[skipped].annotator_id, by_id[skipped].was_cancelled, by_id[skipped].label) == (
        str(c.id),
        True,
        None,
    )
    assert all(p.task_id == first for p in by_id.values())
    [only] = exported[second].annotations
    assert (only.annotation_id, only.annotator_id, only.label) == (neutral, str(c.id), "neutral")
    assert only.updated_at.tzinfo is not None


def test_export_sees_updates_and_deletions(
    gateway: SdkLabelStudioGateway,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    task_type: TaskType,
) -> None:
    project_id = gateway.create_project(
        title="export changes", label_config=task_type.label_config, overlap=2
    )
    [task_id] = gateway.import_tasks(project_id=project_id, tasks=_tasks(1))
    a, b = label_studio_annotators[:2]
    changed = label_studio_server.annotate(task_id, a.id, "positive")
    deleted = label_studio_server.annotate(task_id, b.id, "negative")

    label_studio_server.update_annotation(changed, "neutral", flag_reason="sarcasm?")
    label_studio_server.delete_annotation(deleted)

    [task] = gateway.export_tasks(project_id=project_id, task_type=task_type)
    [annotation] = task.annotations
    assert (annotation.annotation_id, annotation.label, annotation.flagged, annotation.reason) == (
        changed,
        "neutral",
        True,
        "sarcasm?",
    )


def test_read_tasks_reads_only_the_tasks_asked_for_in_batches(
    gateway: SdkLabelStudioGateway,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    task_type: TaskType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The verification read: Label Studio's current copy of some tasks, cancelled annotations
    included, unannotated ones present, deleted annotations absent, an unknown task absent."""
    project_id = gateway.create_project(title="read back", label_config=task_type.label_config, overlap=2)
    tasks = _tasks(5)
    task_ids = gateway.import_tasks(project_id=project_id, tasks=tasks)
    a, b = label_studio_annotators[:2]
    kept = label_studio_server.annotate(task_ids[0], a.id, "positive")
    skipped = label_studio_server.annotate(task_ids[0], b.id, None, cancelled=True)
    gone = label_studio_server.annotate(task_ids[1], a.id, "negative")
    label_studio_server.delete_annotation(gone)
    label_studio_server.annotate(task_ids[3], b.id, "neutral")  # a task not asked for
    # Two reads of two tasks each, whatever the number asked for.
    monkeypatch.setattr("dynaval.adapters.label_studio.READ_BATCH_SIZE", 2)
    unknown = max(task_ids) + 10_000

    read = gateway.read_tasks(
        project_id=project_id, task_ids=[task_ids[0], task_ids[1], task_ids[2], unknown], task_type=task_type
    )

    by_task = {t.task_id: t for t in read}
    assert set(by_task) == {task_ids[0], task_ids[1], task_ids[2]}
    assert {p.annotation_id: p.was_cancelled for p in by_task[task_ids[0]].annotations} == {
        kept: False,
        skipped: True,
    }
    assert by_task[task_ids[1]].annotations == []
    assert by_task[task_ids[2]].candidate_id == tasks[2]["candidate_id"]


def test_set_task_overlap_reopens_the_task(
    gateway: SdkLabelStudioGateway,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    task_type: TaskType,
) -> None:
    project_id = gateway.create_project(title="escalation", label_config=task_type.label_config, overlap=2)
    [task_id] = gateway.import_tasks(project_id=project_id, tasks=_tasks(1))
    assert gateway.get_task_overlap(task_id=task_id) == 2
    a, b = label_studio_annotators[:2]
    label_studio_server.annotate(task_id, a.id, "positive")
    label_studio_server.annotate(task_id, b.id, "negative")
    assert label_studio_server.client.tasks.get(id=task_id).is_labeled is True

    gateway.set_task_overlap(task_id=task_id, overlap=3, is_labeled=False)

    assert gateway.get_task_overlap(task_id=task_id) == 3
    assert label_studio_server.client.tasks.get(id=task_id).is_labeled is False


def test_task_url_points_at_the_task(
    gateway: SdkLabelStudioGateway, label_studio_server: LabelStudioServer
) -> None:
    assert gateway.task_url(7, 42) == f"{label_studio_server.url}/projects/7/data?task=42"


def test_wrong_api_key_raises_unavailable(
    label_studio_server: LabelStudioServer, task_type: TaskType
) -> None:
    bad = SdkLabelStudioGateway(base_url=label_studio_server.url, api_key="not-the-right-token")

    with pytest.raises(LabelStudioUnavailable, match="HTTP 401"):
        bad.create_project(title="nope", label_config=task_type.label_config, overlap=2)
    with pytest.raises(LabelStudioUnavailable):
        list(bad.export_tasks(project_id=1, task_type=task_type))
    with pytest.raises(LabelStudioUnavailable):
        bad.find_tasks(project_id=1, candidate_ids=["x"])
    with pytest.raises(LabelStudioUnavailable):
        bad.set_task_overlap(task_id=1, overlap=3, is_labeled=False)


def test_unreachable_server_raises_unavailable(task_type: TaskType) -> None:
    down = SdkLabelStudioGateway(base_url="http://127.0.0.1:9", api_key="whatever-token", timeout_s=2.0)

    with pytest.raises(LabelStudioUnavailable, match="could not be reached"):
        down.create_project(title="nope", label_config=task_type.label_config, overlap=2)
    with pytest.raises(LabelStudioUnavailable):
        list(down.export_tasks(project_id=1, task_type=task_type))


def test_annotators_are_distinct_users_of_the_admins_organisation(
    label_studio_server: LabelStudioServer, label_studio_annotators: list[Annotator]
) -> None:
    ids = {a.id for a in label_studio_annotators}
    assert len(ids) == len(label_studio_annotators) == 4
    assert label_studio_server.admin_user_id not in ids
    members = {u.id for u in label_studio_server.client.users.list()}
    assert ids <= members


@dataclass
class _Receiver:
    """A loopback webhook receiver that records what Label Studio posts."""

    received: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/webhook"

    def wait_for(self, action: str, timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for _, body in self.received:
                if body.get("action") == action:
                    return body
            time.sleep(0.05)
        raise AssertionError(f"no {action} webhook; got {[b.get('action') for _, b in self.received]}")


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    state = _Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            state.received.append((dict(self.headers), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    state.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=state.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.server.shutdown()
        state.server.server_close()


def test_created_updated_deleted_annotations_fire_webhooks(
    gateway: SdkLabelStudioGateway,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    receiver: _Receiver,
    task_type: TaskType,
) -> None:
    project_id = gateway.create_project(title="webhooks", label_config=task_type.label_config, overlap=2)
    gateway.register_webhook(project_id=project_id, url=receiver.url, secret="s3cret-for-this-test")
    [task_id] = gateway.import_tasks(project_id=project_id, tasks=_tasks(1))
    annotator = label_studio_annotators[0]

    annotation_id = label_studio_server.annotate(task_id, annotator.id, "positive")
    created = receiver.wait_for("ANNOTATION_CREATED")
    label_studio_server.update_annotation(annotation_id, "negative", flag_reason="typo")
    updated = receiver.wait_for("ANNOTATION_UPDATED")
    label_studio_server.delete_annotation(annotation_id)
    deleted = receiver.wait_for("ANNOTATIONS_DELETED")

    assert all(h.get(WEBHOOK_SECRET_HEADER) == "s3cret-for-this-test" for h, _ in receiver.received)
    assert created["annotation"]["completed_by"] == annotator.id
    assert created["task"]["id"] == task_id
    parsed = parse_annotation(created["annotation"], task_type)
    assert (parsed.annotation_id, parsed.task_id, parsed.annotator_id, parsed.label) == (
        annotation_id,
        task_id,
        str(annotator.id),
        "positive",
    )
    parsed_update = parse_annotation(updated["annotation"], task_type)
    assert (parsed_update.label, parsed_update.flagged, parsed_update.reason) == ("negative", True, "typo")
    assert parsed_update.updated_at > parsed.updated_at
    assert updated["annotation"]["updated_at"].endswith("Z")
    assert deleted["annotations"] == [{"id": annotation_id}]
