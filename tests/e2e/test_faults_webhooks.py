"""Webhooks lost, repeated, reordered and raced: the stored votes and decisions still come out right.

Three scenarios against the session's real Label Studio; each records its figures in the fault
report (``tests/support/fault_report.py``; ``scripts/fault_report`` prints them as one table):

1. A fault-injecting proxy between Label Studio and the service refuses a seeded 30% of the
   webhooks (closed connection or 503). After reconcile the stored annotations equal Label
   Studio's, and every decision equals that of a clean twin: a second, fresh service that got
   every webhook of the round, in order.
2. A recording proxy keeps every webhook of a round. Replayed shuffled, each one to three times (a
   deletion before the creation of its annotation included), they leave the state that one
   delivery of each, in order, leaves.
3. gunicorn with four workers on a fresh PostgreSQL database takes webhooks from eight concurrent
   clients: many annotators voting, changing and re-voting on the same three candidates. No update
   is lost, and every decision is the rule applied to the stored votes.

A round votes through Label Studio's API as several annotator users: first votes, disagreements and
their third votes, a changed vote, a deleted one, a cancelled annotation, a second annotation by the
same annotator, flags, a fourth vote. The tiny test model always answers "neutral", so a writer's
positive or negative label fools it and every candidate goes to Label Studio.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
import requests
from sqlmodel import col, select

from dynaval.adapters.database import Database
from dynaval.adapters.label_studio import LabelStudioGateway
from dynaval.adapters.orm import AnnotationRow, CandidateRow, DecisionRow, RoundRow, as_utc
from dynaval.bootstrap import bootstrap
from dynaval.devtools.label_studio_server import Annotator, LabelStudioServer
from dynaval.domain.decision import decide
from dynaval.domain.policy import DecisionPolicy
from dynaval.domain.votes import AnnotationRecord, current_ballots
from dynaval.entrypoints.app import create_app
from dynaval.settings import Settings
from tests.fixtures.service import (
    LEAD_TOKEN,
    PSEUDONYM_SECRET,
    SIGNING_SECRET,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    LiveService,
    free_port,
    make_settings,
)
from tests.support.fault_report import record_scenario
from tests.support.gunicorn_service import GunicornService
from tests.support.mirror_label_studio import MirrorGateway
from tests.support.waiting import wait_for
from tests.support.webhook_proxy import (
    CLOSED,
    FORWARDED,
    REFUSED_503,
    Delivery,
    WebhookProxy,
    capture_payloads,
    replay,
)

pytestmark = pytest.mark.labelstudio

SEED = 20261203
DROP_RATE = 0.3
# The proxy's seed: with the round's seeded plan its draws lose 24 of the 71 webhooks, one update and
# one deletion among them, so reconcile has every kind of gap to fill.
DROP_SEED = SEED + 7
POS, NEG, NEU = "positive", "negative", "neutral"
WEBHOOK_PATH = "/webhooks/label-studio"
CREATED, UPDATED, DELETED = "ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED"

K = TypeVar("K")


# ---------------------------------------------------------------------------------------- the round


class Step(NamedTuple):
    """One annotator's action on one task. ``label``: W the writer's, O the other sentiment, N neutral."""

    op: str  # vote, cancel, flag, update, delete
    who: str  # A, B, C or D
    label: str | None = None


# kind: (how many candidates, the steps on each, the status every webhook in order leads to)
PLAN: dict[str, tuple[int, tuple[Step, ...], str]] = {
    "accept": (4, (Step("vote", "A", "W"), Step("vote", "B", "W")), "accepted"),
    "reject": (3, (Step("vote", "A", "O"), Step("vote", "B", "O")), "rejected"),
    "escalate_accept": (
        3,
        (Step("vote", "A", "W"), Step("vote", "B", "O"), Step("vote", "C", "W")),
        "accepted",
    ),
    "escalate_reject": (
        3,
        (Step("vote", "A", "W"), Step("vote", "B", "O"), Step("vote", "C", "O")),
        "rejected",
    ),
    "escalate_split": (
        1,
        (Step("vote", "A", "W"), Step("vote", "B", "O"), Step("vote", "C", "N")),
        "rejected",
    ),
    "changed_vote": (
        2,
        (Step("vote", "A", "W"), Step("vote", "B", "W"), Step("update", "B", "O"), Step("vote", "C", "O")),
        "rejected",
    ),
    "deleted_vote": (
        2,
        (Step("vote", "A", "W"), Step("vote", "B", "O"), Step("delete", "B"), Step("vote", "D", "W")),
        "accepted",
    ),
    "cancelled": (2, (Step("cancel", "A", "W"), Step("vote", "B", "W"), Step("vote", "C", "W")), "accepted"),
    "duplicate": (2, (Step("vote", "A", "O"), Step("vote", "A", "W"), Step("vote", "B", "W")), "accepted"),
    "flag": (2, (Step("flag", "A", "W"), Step("flag", "B", None)), "flagged"),
    "fourth_vote": (
        1,
        (Step("vote", "A", "W"), Step("vote", "B", "O"), Step("vote", "C", "O"), Step("vote", "D", "W")),
        "rejected",
    ),
}
_WORD_LINES = (
    "room quiet staff kind breakfast cold view harbour noisy lift slow check rainy evening",
    "film plot ending actors music long short funny sad price service battery screen update",
)
WORDS = tuple(" ".join(_WORD_LINES).split())


@dataclass
class Case:
    kind: str
    text: str
    writer_label: str
    steps: tuple[Step, ...]
    task_id: int = 0
    annotations: dict[str, int] = field(default_factory=dict)  # annotator letter -> latest annotation id

    @property
    def expected_status(self) -> str:
        return PLAN[self.kind][2]

    def label(self, code: str | None) -> str | None:
        other = NEG if self.writer_label == POS else POS
        return {None: None, "W": self.writer_label, "O": other, "N": NEU}[code]


def build_cases(rng: random.Random) -> list[Case]:
    """About 25 candidates with distinct texts, the writer's label drawn per candidate."""
    cases = []
    for kind, (count, steps, _status) in PLAN.items():
        for _ in range(count):
            text = f"Review {len(cases) + 1}: " + " ".join(rng.sample(WORDS, 9)) + "."
            cases.append(Case(kind=kind, text=text, writer_label=rng.choice([POS, NEG]), steps=steps))
    return cases


def run_votes(
    server: LabelStudioServer, annotators: Sequence[Annotator], cases: Sequence[Case], rng: random.Random
) -> dict[str, int]:
    """Every case's steps through Label Studio's API, cases interleaved at random (each in its order).

    Label Studio sends each webhook inside the request that causes it. Returns the actions done.
    """
    by_letter = dict(zip("ABCD", annotators, strict=False))
    pending = {i: deque(case.steps) for i, case in enumerate(cases)}
    done = {"created": 0, "updated": 0, "deleted": 0, "cancelled": 0}
    while pending:
        index = rng.choice(sorted(pending))
        case, step = cases[index], pending[index].popleft()
        if not pending[index]:
            del pending[index]
        who = by_letter[step.who]
        if step.op == "update":
            server.update_annotation(case.annotations[step.who], case.label(step.label))
            done["updated"] += 1
        elif step.op == "delete":
            server.delete_annotation(case.annotations.pop(step.who))
            done["deleted"] += 1
        else:
            flag = f"flagged by {step.who}: not a real review" if step.op == "flag" else None
            cancelled = step.op == "cancel"
            annotation_id = server.annotate(
                case.task_id, who.id, case.label(step.label), flag_reason=flag, cancelled=cancelled
            )
            case.annotations[step.who] = annotation_id
            done["created"] += 1
            done["cancelled"] += int(cancelled)
    return done


# ---------------------------------------------------------------------------------------- services


def service_settings(
    *,
    data_dir: Path,
    database_url: str,
    label_studio: LabelStudioServer | None,
    public_url: str,
    model_dir: Path,
) -> Settings:
    return make_settings(
        database_url=database_url,
        data_dir=data_dir,
        label_studio_url=label_studio.url if label_studio else "http://127.0.0.1:9",
        label_studio_api_key=label_studio.api_key if label_studio else "unused-label-studio-key",
        public_url=public_url,
        model_dir=model_dir,
        rate_limit="",  # these tests poll and replay as fast as they can; the limiter is tested elsewhere
    )


@contextlib.contextmanager
def serve(
    settings: Settings, *, port: int | None = None, label_studio: LabelStudioGateway | None = None
) -> Iterator[LiveService]:
    """The app, with its in-process background work, on a werkzeug server in a thread (as the
    ``live_service`` fixture, but with these settings and optionally another Label Studio)."""
    services = bootstrap(settings, label_studio=label_studio)
    live = LiveService(
        app=create_app(services, start_background=True), services=services, port=port or free_port()
    )
    live.start_listening()
    try:
        yield live
    finally:
        live.close()


def open_round(
    call: Callable[..., requests.Response],
    cases: Sequence[Case],
    name: str,
    policy: dict[str, Any] | None = None,
) -> tuple[int, int]:
    """A lead creates a round, writers post the cases; returns (round id, project id) once every
    candidate is in Label Studio. ``call(method, path, token=..., json=...)`` reaches the service."""
    body: dict[str, Any] = {"name": name, "task": "sentiment", "model": "default"}
    if policy:
        body["policy"] = policy
    created = call("POST", "/api/rounds", json=body)
    assert created.status_code == 201, created.text
    round_id, project_id = int(created.json()["id"]), int(created.json()["label_studio_project_id"])
    for case in cases:
        payload = {"text": case.text, "writer_label": case.writer_label}
        posted = call("POST", f"/api/rounds/{round_id}/candidates", token=WRITER_TOKEN, json=payload)
        assert posted.status_code == 201, posted.text
        assert posted.json()["status"] in ("queued", "in_validation")  # fooled; pushed at once or soon

    def all_pushed() -> bool:
        summary = call("GET", f"/api/rounds/{round_id}")
        assert summary.status_code == 200, summary.text
        return int(summary.json()["counts"]["by_status"].get("in_validation", 0)) == len(cases)

    wait_for(f"the {len(cases)} candidates of round {round_id} in Label Studio", all_pushed)
    return round_id, project_id


def task_ids_by_text(database: Database, round_id: int) -> dict[str, int]:
    with database.unit_of_work() as session:
        rows = session.exec(select(CandidateRow).where(CandidateRow.round_id == round_id)).all()
        return {str(r.inputs["text"]): int(r.label_studio_task_id or 0) for r in rows}


@contextlib.contextmanager
def clean_twin(
    tmp_path: Path, model_dir: Path, project_id: int, cases: Sequence[Case], name: str
) -> Iterator[tuple[LiveService, int]]:
    """A second, fresh service and database with the same round: the same Label Studio project id
    and task ids (a :class:`MirrorGateway` hands them out), so the recorded payloads apply verbatim.
    It learns votes from the webhooks the test delivers, and nothing else."""
    mirror = MirrorGateway(project_id=project_id, task_ids_by_text={c.text: c.task_id for c in cases})
    settings = service_settings(
        data_dir=tmp_path / "twin",
        database_url=f"sqlite:///{tmp_path / 'twin' / 'dynaval.sqlite3'}",
        label_studio=None,
        public_url="http://127.0.0.1:9",
        model_dir=model_dir,
    )
    with serve(settings, label_studio=mirror) as twin:
        round_id, twin_project = open_round(twin.call, cases, name)
        assert twin_project == project_id
        assert task_ids_by_text(twin.services.database, round_id) == {c.text: c.task_id for c in cases}
        yield twin, round_id


# ---------------------------------------------------------------------------------------- state

# (task id, annotator, label, flagged, flag reason, cancelled)
AnnotationState = tuple[int, str, str | None, bool, str | None, bool]
# (status, stored decision with its ballots, wanted votes)
DecisionState = tuple[str, dict[str, Any] | None, int]


def stored_annotations(database: Database, round_id: int) -> dict[int, AnnotationState]:
    with database.unit_of_work() as session:
        rows = session.exec(
            select(AnnotationRow, CandidateRow.label_studio_task_id)
            .join(CandidateRow, col(CandidateRow.id) == AnnotationRow.candidate_id)
            .where(AnnotationRow.round_id == round_id)
        ).all()
        return {
            a.id: (int(task_id or 0), a.annotator_id, a.label, a.flagged, a.flag_reason, a.was_cancelled)
            for a, task_id in rows
        }


def stored_update_times(database: Database, round_id: int) -> dict[int, datetime]:
    with database.unit_of_work() as session:
        rows = session.exec(select(AnnotationRow).where(AnnotationRow.round_id == round_id)).all()
        return {a.id: as_utc(a.updated_at) for a in rows}


def stored_decisions(database: Database, round_id: int) -> dict[int, DecisionState]:
    """Each candidate's status, decision and wanted votes, by Label Studio task id."""
    with database.unit_of_work() as session:
        rows = session.exec(select(CandidateRow).where(CandidateRow.round_id == round_id)).all()
        return {int(r.label_studio_task_id or 0): (r.status, r.decision, r.wanted_votes) for r in rows}


def label_studio_export(server: LabelStudioServer, project_id: int) -> list[dict[str, Any]]:
    """Every task of the project with every annotation, cancelled ones included (the task
    annotations endpoint leaves those out), from one JSON export."""
    chunks = server.client.projects.exports.download_sync(
        project_id, export_type="JSON", download_all_tasks=True
    )
    tasks = json.loads(b"".join(chunks))
    assert isinstance(tasks, list)
    return tasks


def label_studio_annotations(server: LabelStudioServer, project_id: int) -> dict[int, AnnotationState]:
    """Every annotation of the project as Label Studio exports it, read with the labelling config's
    control names (not with the service's parser)."""
    task_type = server.task_type
    found: dict[int, AnnotationState] = {}
    for task in label_studio_export(server, project_id):
        for annotation in task.get("annotations") or []:
            label: str | None = None
            flagged = False
            reason: str | None = None
            for region in annotation.get("result") or []:
                value = region.get("value") or {}
                if region.get("from_name") == task_type.label_control:
                    label = (value.get("choices") or [None])[0]
                elif region.get("from_name") == task_type.flag_control:
                    flagged = bool(value.get("choices"))
                elif region.get("from_name") == task_type.reason_control:
                    reason = " ".join(value.get("text") or []) or None
            completed_by = annotation.get("completed_by")
            annotator = completed_by.get("id") if isinstance(completed_by, dict) else completed_by
            found[int(annotation["id"])] = (
                int(task["id"]),
                str(annotator),
                label,
                flagged,
                reason if flagged else None,
                bool(annotation.get("was_cancelled")),
            )
    return found


def label_studio_task_ids(server: LabelStudioServer, project_id: int) -> set[int]:
    return {int(task["id"]) for task in label_studio_export(server, project_id)}


def differing(left: Mapping[K, object], right: Mapping[K, object]) -> list[K]:
    """Keys whose values differ, or that only one side has."""
    return [key for key in {*left, *right} if left.get(key, "missing") != right.get(key, "missing")]


def annotation_ids_of(delivery: Delivery) -> list[int]:
    payload = delivery.payload
    if delivery.action == DELETED:
        return [int(a["id"]) for a in payload.get("annotations") or []]
    return [int(payload["annotation"]["id"])]


def check_clean_statuses(decisions: Mapping[int, DecisionState], cases: Sequence[Case]) -> None:
    """The clean run must be meaningful: each case ends where the plan says."""
    for case in cases:
        assert decisions[case.task_id][0] == case.expected_status, case.kind


# ---------------------------------------------------------------------------------------- 1. dropped


def test_reconcile_after_30_percent_of_webhooks_dropped_matches_a_clean_run(
    database_url: str,
    tmp_path: Path,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    tiny_model_dir: Path,
) -> None:
    backend = "postgres" if database_url.startswith("postgresql") else "sqlite"
    rng = random.Random(SEED)
    cases = build_cases(rng)
    port = free_port()
    with WebhookProxy(
        target=f"http://127.0.0.1:{port}{WEBHOOK_PATH}", drop_rate=DROP_RATE, seed=DROP_SEED
    ) as proxy:
        settings = service_settings(
            data_dir=tmp_path / "service",
            database_url=database_url,
            label_studio=label_studio_server,
            public_url=proxy.url,  # the round registers its webhook here: Label Studio talks to the proxy
            model_dir=tiny_model_dir,
        )
        with serve(settings, port=port) as service:
            database = service.services.database
            round_id, project_id = open_round(service.call, cases, f"webhooks dropped ({backend})")
            by_text = task_ids_by_text(database, round_id)
            for case in cases:
                case.task_id = by_text[case.text]
            actions = run_votes(label_studio_server, label_studio_annotators, cases, rng)
            deliveries = proxy.deliveries
            before_sync = stored_annotations(database, round_id)
            synced = service.call("POST", f"/api/rounds/{round_id}/sync")
            assert synced.status_code == 200, synced.text
            stored = stored_annotations(database, round_id)
            decisions = stored_decisions(database, round_id)
            again = service.call("POST", f"/api/rounds/{round_id}/sync")
            assert again.status_code == 200, again.text
    task_ids = [case.task_id for case in cases]
    in_label_studio = label_studio_annotations(label_studio_server, project_id)
    tasks_found = label_studio_task_ids(label_studio_server, project_id)

    # The clean run: the same round on a fresh service and database, every webhook delivered once, in order.
    with clean_twin(tmp_path, tiny_model_dir, project_id, cases, f"clean run ({backend})") as (
        twin,
        twin_round,
    ):
        replayed = replay(twin.url + WEBHOOK_PATH, deliveries)
        clean_annotations = stored_annotations(twin.services.database, twin_round)
        clean_decisions = stored_decisions(twin.services.database, twin_round)

    dropped = [d for d in deliveries if d.dropped]
    differing_decisions = differing(decisions, clean_decisions)
    record_scenario(
        f"webhooks dropped {DROP_RATE:.0%}, then reconcile ({backend})",
        webhooks_sent=len(deliveries),
        webhooks_dropped=len(dropped),
        dropped_closed=sum(1 for d in dropped if d.fate == CLOSED),
        dropped_503=sum(1 for d in dropped if d.fate == REFUSED_503),
        dropped_created=sum(1 for d in dropped if d.action == CREATED),
        dropped_updated=sum(1 for d in dropped if d.action == UPDATED),
        dropped_deleted=sum(1 for d in dropped if d.action == DELETED),
        duplicates_sent=0,
        votes_expected=len(in_label_studio),
        votes_stored_before_sync=len(in_label_studio) - len(differing(before_sync, in_label_studio)),
        votes_stored=len(in_label_studio) - len(differing(stored, in_label_studio)),
        tasks_expected=len(cases),
        tasks_found=len(tasks_found & set(task_ids)),
        sync_added_or_updated=int(synced.json()["added_or_updated"]),
        sync_deleted=int(synced.json()["deleted"]),
        sync_decisions_changed=int(synced.json()["decisions_changed"]),
        decisions_differing=len(differing_decisions),
    )

    # The faults happened: some deliveries were refused, the rest reached the service and were applied.
    assert actions == {"created": 67, "updated": 2, "deleted": 2, "cancelled": 2}
    assert len(deliveries) == 71
    assert proxy.count(FORWARDED) == len(deliveries) - len(dropped)
    assert {d.action for d in dropped} == {CREATED, UPDATED, DELETED}
    assert all(d.status == 200 for d in deliveries if d.fate == FORWARDED)
    assert differing(before_sync, in_label_studio), "the dropped webhooks should have left gaps to reconcile"
    # Reconcile made the stored annotations equal Label Studio's, ids and all.
    assert tasks_found == set(task_ids)
    assert stored == in_label_studio
    assert {k: again.json()[k] for k in ("added_or_updated", "deleted", "decisions_changed")} == {
        "added_or_updated": 0,
        "deleted": 0,
        "decisions_changed": 0,
    }
    # The clean twin got every webhook and ended where the plan says; the faulty run decided the same.
    assert replayed == [200] * len(deliveries)
    assert clean_annotations == in_label_studio
    check_clean_statuses(clean_decisions, cases)
    assert differing_decisions == []


# ---------------------------------------------------------------------------------------- 2. replayed


def shuffled_with_duplicates(deliveries: Sequence[Delivery], rng: random.Random) -> list[Delivery]:
    """Each delivery one to three times, all shuffled; the first deletion then overtakes the first
    creation of its annotation, whatever the shuffle did."""
    copies = [d for d in deliveries for _ in range(rng.randint(1, 3))]
    rng.shuffle(copies)
    deletion = next(d for d in deliveries if d.action == DELETED)
    (deleted_id,) = annotation_ids_of(deletion)
    first_deletion = copies.index(deletion)
    first_creation = next(
        i for i, d in enumerate(copies) if d.action == CREATED and annotation_ids_of(d) == [deleted_id]
    )
    if first_deletion > first_creation:
        copies.insert(first_creation, copies.pop(first_deletion))
    return copies


def deletions_before_creation(sequence: Sequence[Delivery]) -> int:
    """Deleted annotations whose deletion arrives before any creation of them."""
    first_seen: dict[int, str] = {}
    for delivery in sequence:
        if delivery.action in (CREATED, DELETED):
            for annotation_id in annotation_ids_of(delivery):
                first_seen.setdefault(annotation_id, delivery.action)
    return sum(1 for action in first_seen.values() if action == DELETED)


def test_webhooks_replayed_shuffled_with_duplicates_leave_the_state_of_one_delivery_in_order(
    database_url: str,
    tmp_path: Path,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    tiny_model_dir: Path,
) -> None:
    backend = "postgres" if database_url.startswith("postgresql") else "sqlite"
    rng = random.Random(SEED + 1)
    cases = build_cases(rng)
    with WebhookProxy(target=None) as recorder:
        settings = service_settings(
            data_dir=tmp_path / "service",
            database_url=database_url,
            label_studio=label_studio_server,
            public_url=recorder.url,  # Label Studio's webhooks are kept, not delivered
            model_dir=tiny_model_dir,
        )
        with serve(settings) as service:
            database = service.services.database
            round_id, project_id = open_round(service.call, cases, f"webhooks replayed ({backend})")
            by_text = task_ids_by_text(database, round_id)
            for case in cases:
                case.task_id = by_text[case.text]
            run_votes(label_studio_server, label_studio_annotators, cases, rng)
            captured = recorder.deliveries
            assert stored_annotations(database, round_id) == {}  # nothing reached the service yet

            # Reference: a fresh twin gets each webhook once, in the order Label Studio sent them.
            with clean_twin(tmp_path, tiny_model_dir, project_id, cases, f"in order ({backend})") as (
                twin,
                twin_round,
            ):
                in_order = replay(twin.url + WEBHOOK_PATH, captured)
                twin_database = twin.services.database
                reference_annotations = stored_annotations(twin_database, twin_round)
                reference_times = stored_update_times(twin_database, twin_round)
                reference_decisions = stored_decisions(twin_database, twin_round)

            sequence = shuffled_with_duplicates(captured, rng)
            statuses = replay(service.url + WEBHOOK_PATH, sequence)
            annotations = stored_annotations(database, round_id)
            update_times = stored_update_times(database, round_id)
            decisions = stored_decisions(database, round_id)
    in_label_studio = label_studio_annotations(label_studio_server, project_id)
    tasks_found = label_studio_task_ids(label_studio_server, project_id)
    deleted_ids = {i for d in captured if d.action == DELETED for i in annotation_ids_of(d)}
    differing_decisions = differing(decisions, reference_decisions)

    record_scenario(
        f"webhooks replayed 1-3 times, shuffled ({backend})",
        webhooks_sent=len(captured),
        webhooks_dropped=0,
        duplicates_sent=len(sequence) - len(captured),
        deliveries_replayed=len(sequence),
        deletions_before_creation=deletions_before_creation(sequence),
        deleted_votes_resurrected=len(deleted_ids & set(annotations)),
        votes_expected=len(in_label_studio),
        votes_stored=len(in_label_studio) - len(differing(annotations, in_label_studio)),
        votes_differing_from_in_order=len(differing(annotations, reference_annotations)),
        tasks_expected=len(cases),
        tasks_found=len(tasks_found & {c.task_id for c in cases}),
        decisions_differing=len(differing_decisions),
    )

    assert len(captured) == 71 and {d.action for d in captured} == {CREATED, UPDATED, DELETED}
    assert in_order == [200] * len(captured)
    assert statuses == [200] * len(sequence)
    assert len(sequence) > len(captured)  # some were delivered more than once
    assert deletions_before_creation(sequence) >= 1
    # Delivered once in order, the webhooks alone give Label Studio's annotations and the planned outcomes.
    assert reference_annotations == in_label_studio
    check_clean_statuses(reference_decisions, cases)
    # Shuffled and repeated, they give the same: no deleted vote came back, no older copy won.
    assert deleted_ids and not deleted_ids & set(annotations)
    assert annotations == reference_annotations
    assert update_times == reference_times
    assert differing_decisions == []


# ---------------------------------------------------------------------------------------- 3. concurrent

CONCURRENT_CANDIDATES = 3
SYNTHETIC_ANNOTATORS = 8  # on top of the session's four real annotator users
CONCURRENT_WEBHOOKS = 600
DUPLICATE_SHARE = 0.1  # of the webhooks, sent a second time a little later
CLIENTS = 8
WORKERS = 4
SYNTHETIC_ID_BASE = 50_000_000  # far above any annotation id this Label Studio hands out


@dataclass(frozen=True)
class Sent:
    """One synthetic annotation version, sent as a webhook."""

    action: str
    annotation_id: int
    task_id: int
    annotator: int
    label: str
    created_at: datetime
    updated_at: datetime


def make_versions(
    rng: random.Random, tasks: Mapping[int, str], annotators: Sequence[int], n: int
) -> list[Sent]:
    """``n`` annotation versions over ``tasks`` (task id -> writer label), in time order: each
    annotator's first vote on each task, then changes of earlier annotations (55 %, half of them
    of one of the task's three latest) and new annotations by an annotator who already voted
    (45 %)."""
    clock = datetime.now(UTC).replace(microsecond=0)
    next_id = SYNTHETIC_ID_BASE + rng.randrange(1_000_000) * 1000
    made: dict[int, list[Sent]] = {task_id: [] for task_id in tasks}
    versions: list[Sent] = []

    def label_for(task_id: int) -> str:
        writer = tasks[task_id]
        return writer if rng.random() < 0.55 else rng.choice([x for x in (POS, NEG, NEU) if x != writer])

    def new(task_id: int, annotator: int) -> Sent:
        nonlocal next_id, clock
        next_id += 1
        clock += timedelta(microseconds=997)
        sent = Sent(CREATED, next_id, task_id, annotator, label_for(task_id), clock, clock)
        made[task_id].append(sent)
        return sent

    for annotator in annotators:
        for task_id in tasks:
            versions.append(new(task_id, annotator))
    while len(versions) < n:
        task_id = rng.choice(list(tasks))
        if rng.random() < 0.55:
            # Half the changes are quick second thoughts on one of the task's latest annotations:
            # versions of one annotation close together race each other across the clients.
            recent = made[task_id][-3:] if rng.random() < 0.5 else made[task_id]
            earlier = rng.choice(recent)
            clock += timedelta(microseconds=997)
            versions.append(
                Sent(
                    UPDATED,
                    earlier.annotation_id,
                    task_id,
                    earlier.annotator,
                    label_for(task_id),
                    earlier.created_at,
                    clock,
                )
            )
        else:
            versions.append(new(task_id, rng.choice(annotators)))
    return versions


def webhook_body(
    captured: Mapping[str, Any], project_id: int, sent: Sent, text_of: Mapping[int, str]
) -> bytes:
    """A real captured payload of the same action, carrying this version (as the benchmark builds them)."""
    payload = copy.deepcopy(dict(captured[sent.action]))
    payload["project"]["id"] = project_id
    annotation = payload["annotation"]
    annotation.update(
        id=sent.annotation_id,
        task=sent.task_id,
        project=project_id,
        completed_by=sent.annotator,
        created_at=sent.created_at.isoformat().replace("+00:00", "Z"),
        updated_at=sent.updated_at.isoformat().replace("+00:00", "Z"),
        was_cancelled=False,
    )
    if "updated_by" in annotation:
        annotation["updated_by"] = sent.annotator
    if "unique_id" in annotation:
        annotation["unique_id"] = str(uuid.uuid4())
    for region in annotation.get("result") or []:
        if region.get("from_name") == "label":
            region["value"] = {"choices": [sent.label]}
    task = payload.get("task")
    if isinstance(task, dict):
        task.update(id=sent.task_id, project=project_id)
        task["data"] = {"candidate_id": "unused", "text": text_of[sent.task_id]}
    return json.dumps(payload).encode()


@dataclass
class LoadResult:
    statuses: list[int]
    errors: list[str]
    max_in_flight: int
    seconds: float


def send_concurrently(url: str, bodies: Sequence[bytes], clients: int) -> LoadResult:
    """POST every body once from ``clients`` threads with keep-alive sessions, in list order overall."""
    headers = {"Content-Type": "application/json", "X-Dynaval-Webhook-Secret": WEBHOOK_SECRET}
    queue = iter(range(len(bodies)))
    lock = threading.Lock()
    statuses = [0] * len(bodies)
    errors: list[str] = []
    in_flight = [0, 0]  # now, most seen
    start = threading.Barrier(clients)

    def client() -> None:
        with requests.Session() as session:
            session.headers.update(headers)
            start.wait()
            while True:
                with lock:
                    index = next(queue, None)
                    if index is None:
                        return
                    in_flight[0] += 1
                    in_flight[1] = max(in_flight)
                try:
                    response = session.post(url, data=bodies[index], timeout=60)
                    statuses[index] = response.status_code
                    if response.status_code != 200:
                        errors.append(f"{response.status_code}: {response.text[:200]}")
                except requests.RequestException as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                finally:
                    with lock:
                        in_flight[0] -= 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return LoadResult(statuses, errors, in_flight[1], time.monotonic() - began)


def expected_decision(
    records: Sequence[AnnotationRecord], writer_label: str, policy: dict[str, Any]
) -> dict[str, Any]:
    """The rule applied to stored votes, in the shape a candidate stores its decision."""
    ballots = current_ballots(records)
    decision = decide(ballots, writer_label, DecisionPolicy(**policy))
    ballot_dicts = [
        {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
        for b in ballots
    ]
    return {**decision.to_dict(), "ballots": ballot_dicts}


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_concurrent_webhooks_on_four_gunicorn_workers_lose_no_update(
    database_url: str,
    tmp_path: Path,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    tiny_model_dir: Path,
) -> None:
    rng = random.Random(SEED + 2)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DYNAVAL_")},
        "DYNAVAL_WORKERS": str(WORKERS),
        "DYNAVAL_THREADS": "4",
        "DYNAVAL_LOG_LEVEL": "warning",
        "DYNAVAL_DATA_DIR": str(tmp_path / "data"),
        "DYNAVAL_DATABASE_URL": database_url,
        "DYNAVAL_LABEL_STUDIO_URL": label_studio_server.url,
        "DYNAVAL_LABEL_STUDIO_API_KEY": label_studio_server.api_key,
        "DYNAVAL_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "DYNAVAL_WRITER_TOKENS": WRITER_TOKEN,
        "DYNAVAL_LEAD_TOKENS": LEAD_TOKEN,
        "DYNAVAL_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "DYNAVAL_PSEUDONYM_SECRET": PSEUDONYM_SECRET,
        "DYNAVAL_SIGNING_SECRET": SIGNING_SECRET,
        "DYNAVAL_DEFAULT_MODEL_DIR": str(tiny_model_dir),
        "DYNAVAL_RECONCILE_INTERVAL_S": "0",
        "DYNAVAL_RATE_LIMIT": "",
        "OMP_NUM_THREADS": "1",
    }
    cases = [
        Case(
            kind="concurrent",
            text=f"Concurrent review {i}: the staff were kind.",
            writer_label=label,
            steps=(),
        )
        for i, label in enumerate([POS, NEG, POS][:CONCURRENT_CANDIDATES])
    ]
    database = Database(database_url)
    try:
        with GunicornService(env, port, tmp_path / "gunicorn.log") as service, requests.Session() as http:

            def call(method: str, path: str, *, token: str = LEAD_TOKEN, **kwargs: Any) -> requests.Response:
                headers = {"Authorization": f"Bearer {token}"}
                return http.request(method, service.url + path, headers=headers, timeout=60, **kwargs)

            policy = {"min_votes": 3, "max_votes": 7}
            round_id, project_id = open_round(call, cases, "concurrent webhooks", policy)
            workers = service.worker_pids()
            by_text = task_ids_by_text(database, round_id)
            tasks = {by_text[c.text]: c.writer_label for c in cases}
            captured = capture_payloads(label_studio_server, label_studio_annotators[0].id)
            annotators = [a.id for a in label_studio_annotators] + [
                300_000 + i for i in range(SYNTHETIC_ANNOTATORS)
            ]
            versions = make_versions(rng, tasks, annotators, CONCURRENT_WEBHOOKS)
            text_of = {task_id: text for text, task_id in by_text.items()}
            bodies = [webhook_body(captured, project_id, v, text_of) for v in versions]
            # Some deliveries come twice, the copy a few places later (a proxy's or a sender's retry).
            for index in sorted(
                rng.sample(range(len(versions)), int(len(versions) * DUPLICATE_SHARE)), reverse=True
            ):
                bodies.insert(min(len(bodies), index + rng.randint(1, 40)), bodies[index])
            load = send_concurrently(service.url + WEBHOOK_PATH, bodies, CLIENTS)
            gunicorn_log = service.log_tail()
        tasks_found = label_studio_task_ids(label_studio_server, project_id)

        # Every annotation, as its latest version says.
        latest: dict[int, Sent] = {}
        for sent in versions:
            if sent.annotation_id not in latest or sent.updated_at > latest[sent.annotation_id].updated_at:
                latest[sent.annotation_id] = sent
        expected = {
            i: (s.task_id, str(s.annotator), s.label, as_utc(s.updated_at)) for i, s in latest.items()
        }
        with database.unit_of_work() as session:
            round_row = session.get(RoundRow, round_id)
            assert round_row is not None
            rows = session.exec(
                select(AnnotationRow, CandidateRow.label_studio_task_id)
                .join(CandidateRow, col(CandidateRow.id) == AnnotationRow.candidate_id)
                .where(AnnotationRow.round_id == round_id)
            ).all()
            stored = {a.id: (int(t or 0), a.annotator_id, a.label, as_utc(a.updated_at)) for a, t in rows}
            rule_mismatches, history_mismatches, version_mismatches = [], [], []
            candidates = session.exec(select(CandidateRow).where(CandidateRow.round_id == round_id)).all()
            for candidate in candidates:
                records = [
                    AnnotationRecord(
                        annotation_id=a.id,
                        annotator=a.annotator_id,
                        label=a.label,
                        flagged=a.flagged,
                        reason=a.flag_reason,
                        was_cancelled=a.was_cancelled,
                        updated_at=as_utc(a.updated_at),
                    )
                    for a, _ in rows
                    if a.candidate_id == candidate.id
                ]
                want = expected_decision(records, candidate.writer_label, round_row.policy)
                if candidate.decision != want or candidate.status != want["outcome"]:
                    rule_mismatches.append(candidate.id)
                history = session.exec(
                    select(DecisionRow)
                    .where(DecisionRow.candidate_id == candidate.id)
                    .order_by(col(DecisionRow.id))
                ).all()
                last = history[-1] if history else None
                if (
                    last is None
                    or last.outcome != candidate.status
                    or last.ballots != want["ballots"]
                    or last.figures != {k: v for k, v in want.items() if k != "ballots"}
                ):
                    history_mismatches.append(candidate.id)
                if candidate.version != len(history):
                    version_mismatches.append(candidate.id)
            decisions_recorded = session.exec(
                select(DecisionRow).join(CandidateRow).where(CandidateRow.round_id == round_id)
            ).all()
    finally:
        database.dispose()

    lost = [i for i in expected if stored.get(i) != expected[i]]
    record_scenario(
        f"concurrent webhooks, gunicorn {WORKERS} workers (postgres)",
        webhooks_sent=len(versions),
        webhooks_dropped=0,
        duplicates_sent=len(bodies) - len(versions),
        clients=CLIENTS,
        workers=len(workers),
        max_in_flight=load.max_in_flight,
        webhooks_per_s=round(len(bodies) / load.seconds, 1),
        errors=len(load.errors),
        annotators=len(annotators),
        updates_sent=sum(1 for v in versions if v.action == UPDATED),
        votes_expected=len(expected),
        votes_stored=len(expected) - len(lost),
        tasks_expected=len(cases),
        tasks_found=len(tasks_found & set(tasks)),
        decisions_recorded=len(decisions_recorded),
        decisions_differing=len(rule_mismatches),
        history_mismatches=len(history_mismatches),
        version_mismatches=len(version_mismatches),
    )

    assert len(workers) == WORKERS, gunicorn_log
    assert load.errors == [], load.errors[:5]
    assert load.statuses == [200] * len(bodies)
    assert load.max_in_flight > 1
    assert tasks_found == set(tasks)
    assert lost == []
    assert set(stored) == set(expected)  # nothing else either
    assert rule_mismatches == []
    assert history_mismatches == []
    assert version_mismatches == []
