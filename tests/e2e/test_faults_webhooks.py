"""Webhooks lost, repeated, reordered and raced: the stored votes and decisions still come out right.

A webhook is only a hint that a task changed; the service reads the task back from Label Studio
with its own key. Three scenarios against the session's real Label Studio; each records its figures
in the fault report (``tests/support/fault_report.py``; ``scripts/fault_report`` prints them):

1. A fault-injecting proxy between Label Studio and the service refuses a seeded 30% of the
   webhooks (closed connection or 503). After reconcile the stored annotations equal Label
   Studio's, and every decision is the rule applied to them and the outcome the plan says.
2. A recording proxy keeps every webhook of a round. Replayed shuffled, each one to three times (a
   deletion before the creation of its annotation included), they leave the stored annotations
   equal to Label Studio's: no deleted vote comes back.
3. gunicorn with four workers on a fresh PostgreSQL database: annotators vote, change, re-vote,
   cancel and delete on the same three candidates in Label Studio while eight clients send a storm
   of webhooks (copies, forgeries, deletions) about those tasks. Every read applies whole, none is
   overtaken by an older one: the stored annotations equal Label Studio's and every decision is the
   rule applied to them.

A round votes through Label Studio's API as several annotator users: first votes, disagreements and
their third votes, a changed vote, a deleted one, a cancelled annotation, a second annotation by the
same annotator, flags, a fourth vote. The tiny test model always answers "neutral", so a writer's
positive or negative label fools it and every candidate goes to Label Studio.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import requests
from sqlmodel import select

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import CandidateRow, DecisionRow
from dynaval.adapters.label_studio import LabelStudioGateway
from dynaval.bootstrap import bootstrap
from dynaval.entrypoints.app import create_app
from dynaval.settings import Settings
from tests.fixtures.service import (
    LEAD_TOKEN,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    LiveService,
    deployed_environment,
    free_port,
    make_settings,
)
from tests.support.fault_report import record_scenario
from tests.support.gunicorn_service import GunicornService
from tests.support.label_studio_server import Annotator, LabelStudioServer
from tests.support.label_studio_truth import (
    decision_mismatches,
    differing,
    label_studio_annotations,
    label_studio_task_ids,
    stored_annotations,
)
from tests.support.waiting import wait_for, wait_verified
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
        # These tests poll and replay as fast as they can; the limiter is tested elsewhere.
        rate_limit="",
        anonymous_rate_limit="",
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


def wait_settled(service: LiveService, round_id: int) -> None:
    wait_verified(service.call, round_id)


def check_planned_statuses(database: Database, round_id: int, cases: Sequence[Case]) -> None:
    """The run must be meaningful: each case ends where the plan says."""
    with database.unit_of_work() as session:
        rows = session.exec(select(CandidateRow).where(CandidateRow.round_id == round_id)).all()
        status_of_task = {int(r.label_studio_task_id or 0): r.status for r in rows}
    for case in cases:
        assert status_of_task[case.task_id] == case.expected_status, case.kind


def annotation_ids_of(delivery: Delivery) -> list[int]:
    payload = delivery.payload
    if delivery.action == DELETED:
        return [int(a["id"]) for a in payload.get("annotations") or []]
    return [int(payload["annotation"]["id"])]


# ---------------------------------------------------------------------------------------- 1. dropped


def test_reconcile_after_30_percent_of_webhooks_dropped_leaves_label_studios_votes(
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
            wait_settled(service, round_id)
            before_sync = stored_annotations(database, round_id)
            in_label_studio = label_studio_annotations(label_studio_server, project_id)
            synced = service.call("POST", f"/api/rounds/{round_id}/sync")
            assert synced.status_code == 200, synced.text
            stored = stored_annotations(database, round_id)
            mismatches = decision_mismatches(database, round_id)
            again = service.call("POST", f"/api/rounds/{round_id}/sync")
            assert again.status_code == 200, again.text
            check_planned_statuses(database, round_id, cases)
    task_ids = [case.task_id for case in cases]
    tasks_found = label_studio_task_ids(label_studio_server, project_id)

    dropped = [d for d in deliveries if d.dropped]
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
        decisions_differing=len(mismatches["rule"]),
    )

    # The faults happened: some deliveries were refused, the rest reached the service.
    assert actions == {"created": 67, "updated": 2, "deleted": 2, "cancelled": 2}
    assert len(deliveries) == 71
    assert proxy.count(FORWARDED) == len(deliveries) - len(dropped)
    assert {d.action for d in dropped} == {CREATED, UPDATED, DELETED}
    assert all(d.status == 200 for d in deliveries if d.fate == FORWARDED)
    assert differing(before_sync, in_label_studio), "the dropped webhooks should have left gaps to reconcile"
    # Reconcile made the stored annotations equal Label Studio's, ids and all, and each decision is
    # the rule applied to them (and what the plan says, checked above).
    assert tasks_found == set(task_ids)
    assert stored == in_label_studio
    assert mismatches == {"rule": [], "history": [], "version": []}
    assert {k: again.json()[k] for k in ("added_or_updated", "deleted", "decisions_changed")} == {
        "added_or_updated": 0,
        "deleted": 0,
        "decisions_changed": 0,
    }


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


def test_webhooks_replayed_shuffled_with_duplicates_leave_label_studios_votes(
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

            sequence = shuffled_with_duplicates(captured, rng)
            statuses = replay(service.url + WEBHOOK_PATH, sequence)
            wait_settled(service, round_id)
            annotations = stored_annotations(database, round_id)
            mismatches = decision_mismatches(database, round_id)
            check_planned_statuses(database, round_id, cases)
    in_label_studio = label_studio_annotations(label_studio_server, project_id)
    tasks_found = label_studio_task_ids(label_studio_server, project_id)
    deleted_ids = {i for d in captured if d.action == DELETED for i in annotation_ids_of(d)}

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
        tasks_expected=len(cases),
        tasks_found=len(tasks_found & {c.task_id for c in cases}),
        decisions_differing=len(mismatches["rule"]),
    )

    assert len(captured) == 71 and {d.action for d in captured} == {CREATED, UPDATED, DELETED}
    assert statuses == [200] * len(sequence)
    assert len(sequence) > len(captured)  # some were delivered more than once
    assert deletions_before_creation(sequence) >= 1
    # Shuffled and repeated, the webhooks lead to Label Studio's annotations: no deleted vote came
    # back, no older copy won, and each decision is the rule applied to them.
    assert deleted_ids and not deleted_ids & set(annotations)
    assert annotations == in_label_studio
    assert mismatches == {"rule": [], "history": [], "version": []}


# ---------------------------------------------------------------------------------------- 3. concurrent

CONCURRENT_CANDIDATES = 3
LABEL_STUDIO_ACTIONS = 60  # real votes, changes, re-votes, cancellations and deletions
MIN_HINTS = 600  # webhooks the clients send at least, while the annotators work and after
MAX_HINTS = 3000
CLIENTS = 8
WORKERS = 4


def annotate_concurrently(
    server: LabelStudioServer,
    voters: Sequence[Annotator],
    tasks: Mapping[int, str],
    rng: random.Random,
    n: int,
) -> list[str]:
    """``n`` real actions in Label Studio on ``tasks`` (task id -> writer label): each voter's first
    vote on each task first, then new annotations by voters who already voted (a second annotation
    by one user), changes, cancellations and deletions. Label Studio sends each one's webhook."""
    done: list[str] = []
    mine: dict[int, list[int]] = {task_id: [] for task_id in tasks}

    def label_for(task_id: int) -> str:
        writer = tasks[task_id]
        return writer if rng.random() < 0.55 else rng.choice([x for x in (POS, NEG, NEU) if x != writer])

    for voter in voters:
        for task_id in tasks:
            mine[task_id].append(server.annotate(task_id, voter.id, label_for(task_id)))
            done.append("created")
    while len(done) < n:
        task_id = rng.choice(list(tasks))
        roll = rng.random()
        if roll < 0.4 and mine[task_id]:
            server.update_annotation(rng.choice(mine[task_id]), label_for(task_id))
            done.append("updated")
        elif roll < 0.5 and len(mine[task_id]) > 2:
            server.delete_annotation(mine[task_id].pop(rng.randrange(len(mine[task_id]))))
            done.append("deleted")
        elif roll < 0.6:
            server.annotate(task_id, rng.choice(voters).id, None, cancelled=True)
            done.append("cancelled")
        else:
            mine[task_id].append(server.annotate(task_id, rng.choice(voters).id, label_for(task_id)))
            done.append("created")
    return done


def hint_bodies(
    captured: Mapping[str, Any], project_id: int, tasks: Sequence[int], rng: random.Random, n: int
) -> list[bytes]:
    """``n`` webhook bodies about the tasks, in the shape Label Studio sends: copies of real
    payloads naming the task, half of them with forged content (another annotator, another label,
    a date in 9999), and deletions of ids that may or may not exist. The content must not matter."""
    bodies = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.1:
            ids = [rng.randrange(1, 1_000_000) for _ in range(rng.randint(1, 5))]
            body: dict[str, Any] = {
                "action": DELETED,
                "project": {"id": project_id},
                "annotations": [{"id": i} for i in ids],
            }
        else:
            body = copy.deepcopy(dict(captured[CREATED if roll < 0.55 else UPDATED]))
            task_id = rng.choice(tasks)
            body["project"]["id"] = project_id
            annotation = body["annotation"]
            annotation.update(id=rng.randrange(1, 1_000_000), task=task_id, project=project_id)
            if rng.random() < 0.5:  # forged content
                annotation.update(completed_by=rng.randrange(1, 10_000), updated_at="9999-12-31T23:59:59Z")
                for region in annotation.get("result") or []:
                    if region.get("from_name") == "label":
                        region["value"] = {"choices": [rng.choice([POS, NEG, NEU])]}
            if isinstance(body.get("task"), dict):
                body["task"].update(id=task_id, project=project_id)
        bodies.append(json.dumps(body).encode())
    return bodies


@dataclass
class LoadResult:
    sent: int
    statuses: dict[int, int]
    errors: list[str]
    max_in_flight: int
    seconds: float


def send_while(
    url: str, bodies: Sequence[bytes], clients: int, busy: threading.Event, minimum: int
) -> LoadResult:
    """POST the bodies in turn from ``clients`` keep-alive threads, at least ``minimum`` of them and
    on while ``busy`` is set, at most all of them."""
    headers = {"Content-Type": "application/json", "X-Dynaval-Webhook-Secret": WEBHOOK_SECRET}
    queue = iter(range(len(bodies)))
    lock = threading.Lock()
    statuses: dict[int, int] = {}
    errors: list[str] = []
    in_flight = [0, 0, 0]  # now, most seen, sent
    start = threading.Barrier(clients)

    def client() -> None:
        with requests.Session() as session:
            session.headers.update(headers)
            start.wait()
            while True:
                with lock:
                    if in_flight[2] >= minimum and not busy.is_set():
                        return
                    index = next(queue, None)
                    if index is None:
                        return
                    in_flight[0] += 1
                    in_flight[1] = max(in_flight[:2])
                    in_flight[2] += 1
                try:
                    response = session.post(url, data=bodies[index], timeout=60)
                    with lock:
                        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
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
        thread.join(timeout=600)
    return LoadResult(in_flight[2], statuses, errors, in_flight[1], time.monotonic() - began)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_concurrent_votes_and_a_webhook_storm_on_four_gunicorn_workers_lose_no_update(
    database_url: str,
    tmp_path: Path,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
    tiny_model_dir: Path,
) -> None:
    rng = random.Random(SEED + 2)
    port = free_port()
    env = deployed_environment(
        tmp_path,
        port,
        DYNAVAL_WORKERS=str(WORKERS),
        DYNAVAL_THREADS="4",
        DYNAVAL_LOG_LEVEL="warning",
        DYNAVAL_DATABASE_URL=database_url,
        DYNAVAL_LABEL_STUDIO_URL=label_studio_server.url,
        DYNAVAL_LABEL_STUDIO_API_KEY=label_studio_server.api_key,
        DYNAVAL_DEFAULT_MODEL_DIR=str(tiny_model_dir),
        DYNAVAL_RECONCILE_INTERVAL_S="0",
        DYNAVAL_RATE_LIMIT="",
        DYNAVAL_ANONYMOUS_RATE_LIMIT="",
        DYNAVAL_EMBEDDED_WORKER="true",  # the service's default: its own queue worker
        OMP_NUM_THREADS="1",
    )
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
            bodies = hint_bodies(captured, project_id, sorted(tasks), rng, MAX_HINTS)
            busy = threading.Event()
            busy.set()
            actions: list[str] = []

            def annotators_at_work() -> None:
                try:
                    actions.extend(
                        annotate_concurrently(
                            label_studio_server, label_studio_annotators, tasks, rng, LABEL_STUDIO_ACTIONS
                        )
                    )
                finally:
                    busy.clear()

            worker = threading.Thread(target=annotators_at_work, daemon=True)
            worker.start()
            load = send_while(service.url + WEBHOOK_PATH, bodies, CLIENTS, busy, MIN_HINTS)
            worker.join(timeout=600)
            wait_verified(call, round_id, timeout_s=120)
            gunicorn_log = service.log_tail()
        in_label_studio = label_studio_annotations(label_studio_server, project_id)
        tasks_found = label_studio_task_ids(label_studio_server, project_id)
        stored = stored_annotations(database, round_id)
        mismatches = decision_mismatches(database, round_id)
        with database.unit_of_work() as session:
            decisions_recorded = len(
                session.exec(
                    select(DecisionRow).join(CandidateRow).where(CandidateRow.round_id == round_id)
                ).all()
            )
    finally:
        database.dispose()

    record_scenario(
        f"votes in Label Studio during a webhook storm, gunicorn {WORKERS} workers (postgres)",
        webhooks_sent=load.sent,
        webhooks_dropped=0,
        clients=CLIENTS,
        workers=len(workers),
        max_in_flight=load.max_in_flight,
        webhooks_per_s=round(load.sent / load.seconds, 1),
        errors=len(load.errors),
        label_studio_actions=len(actions),
        votes_expected=len(in_label_studio),
        votes_stored=len(in_label_studio) - len(differing(stored, in_label_studio)),
        tasks_expected=len(cases),
        tasks_found=len(tasks_found & set(tasks)),
        decisions_recorded=decisions_recorded,
        decisions_differing=len(mismatches["rule"]),
        history_mismatches=len(mismatches["history"]),
        version_mismatches=len(mismatches["version"]),
    )

    assert len(workers) == WORKERS, gunicorn_log
    assert len(actions) == LABEL_STUDIO_ACTIONS and {"created", "updated", "deleted", "cancelled"} <= set(
        actions
    )
    assert load.errors == [], load.errors[:5]
    assert load.sent >= MIN_HINTS and load.statuses == {200: load.sent}
    assert load.max_in_flight > 1
    assert tasks_found == set(tasks)
    assert stored == in_label_studio
    assert mismatches == {"rule": [], "history": [], "version": []}
