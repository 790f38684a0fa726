"""Failure captures end to end: a capture round (no model), reporters posting captures singly and in
batches, the refusals, and blind validation in a real Label Studio deciding them by the rule.

The service runs on PostgreSQL (the unique index on a round's references is what makes two racing
reports of one reference safe) with a model folder that does not exist: a capture round must never
need one.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from label_studio_sdk import LabelStudio

from dynaval.adapters.db.orm import RoundRow
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict
from dynaval.domain.validation.capture import Capture, CaptureSource, reported_candidate
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.validation import captures
from tests.fixtures.service import (
    EXPORTER_TOKEN,
    LEAD_TOKEN,
    POSTGRES_ADMIN_URL,
    WRITER_TOKEN,
    LiveService,
    running_service,
)
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

REPORTER_NAME = "canary-bot"
REPORTER_TOKEN = "reporter-token-for-tests-0123456"
OTHER_REPORTER_NAME = "support-desk"
OTHER_REPORTER_TOKEN = "reporter-desk-token-for-tests-01"
BATCH_LIMIT = 3
POS, NEG, NEU = "positive", "negative", "neutral"
OBSERVED = "POSITIVE score=0.97 (prod says so)"
PROD_MODEL = "prod-sentiment-xl"


def capture(text: str, reported_label: str, **fields: Any) -> dict[str, Any]:
    return {
        "inputs": {"text": text},
        "observed_output": OBSERVED,
        "reported_label": reported_label,
        "source": "monitoring",
        "model_name": PROD_MODEL,
        "model_version": "2026.11.3",
        "observed_at": "2026-11-30T08:15:00+01:00",
        **fields,
    }


@pytest.fixture
def service(tmp_path: Path, label_studio_server: Any) -> Iterator[LiveService]:
    """The service on a fresh PostgreSQL database with two reporters and a model folder that does
    not exist (nothing may load a model for a capture round)."""
    name = f"dynaval_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with running_service(
            f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}",
            tmp_path / "data",
            label_studio_server,
            tmp_path / "no-model-here",
            reporter_tokens=[
                f"{REPORTER_NAME}={REPORTER_TOKEN}",
                f"{OTHER_REPORTER_NAME}={OTHER_REPORTER_TOKEN}",
            ],
            max_batch_size=BATCH_LIMIT,
        ) as live:
            yield live
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def capture_round(service: LiveService, name: str = "production failures") -> int:
    created = service.call("POST", "/api/rounds", json={"name": name, "task": "sentiment", "kind": "capture"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["kind"] == "capture" and body["model"] is None and body["model_hash"] is None
    assert body["labels"] == [POS, NEG, NEU]
    return int(body["id"])


def post(service: LiveService, round_id: int, body: Any, token: str = REPORTER_TOKEN) -> requests.Response:
    return service.call("POST", f"/api/rounds/{round_id}/captures", token=token, json=body)


def error_of(response: requests.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def collected(service: LiveService, round_id: int) -> int:
    summary = service.call("GET", f"/api/rounds/{round_id}")
    assert summary.status_code == 200, summary.text
    return int(summary.json()["counts"]["collected"])


def test_a_capture_round_takes_no_model(service: LiveService) -> None:
    refused = service.call(
        "POST", "/api/rounds", json={"name": "x", "task": "sentiment", "kind": "capture", "model": "default"}
    )
    error = error_of(refused, 422)
    assert error["field"] == "model" and "capture round" in error["message"]
    unknown = service.call("POST", "/api/rounds", json={"name": "x", "task": "sentiment", "kind": "replay"})
    assert error_of(unknown, 422)["field"] == "kind"
    # The model folder does not exist, yet the capture round is made: nothing loaded a model.
    round_id = capture_round(service)
    listed = service.call("GET", "/api/rounds", token=REPORTER_TOKEN)
    assert listed.status_code == 200
    assert [r["kind"] for r in listed.json()["rounds"] if r["id"] == round_id] == ["capture"]
    assert service.call("GET", f"/dashboard/rounds/{round_id}").status_code == 200  # a lead's page
    # It takes no writer's candidates, and no one asks its (absent) model anything.
    candidate = service.call(
        "POST",
        f"/api/rounds/{round_id}/candidates",
        token=WRITER_TOKEN,
        json={"text": "Lovely.", "writer_label": POS},
    )
    assert error_of(candidate, 409)["field"] == "round_id"
    assert "captures" in candidate.json()["error"]["message"]


def test_captures_are_refused_with_the_reason_named(service: LiveService) -> None:
    round_id = capture_round(service)
    good = capture("The checkout page froze twice.", NEG)

    # Who may report: reporters and leads only.
    for token in (WRITER_TOKEN, EXPORTER_TOKEN):
        assert error_of(post(service, round_id, good, token), 403)["field"] == "Authorization"
    assert error_of(post(service, round_id, good, "not-a-token-0123456789abcdef"), 401)

    # Bad fields: 422 naming the field (in a batch, the item's field); nothing stored.
    for body, field in (
        ({**good, "source": "twitter"}, "source"),
        ({**good, "observed_at": "2026-11-30T08:15:00"}, "observed_at"),
        ({**good, "observed_at": 1764488100}, "observed_at"),
        ({**good, "reported_label": "angry"}, "reported_label"),
        ({**good, "inputs": {"txt": "x"}}, "inputs.text"),
        ({**good, "observed_output": " \u200b "}, "observed_output"),
        ({**good, "reporter": "someone-else"}, "reporter"),
        ({k: v for k, v in good.items() if k != "model_version"}, "model_version"),
        ({"captures": [good, {**good, "source": "x"}]}, "captures[1].source"),
        ({"captures": [good, {**good, "reported_label": "angry"}]}, "captures[1].reported_label"),
    ):
        error = error_of(post(service, round_id, body), 422)
        assert error["field"] == field, (body, error)
        assert error["message"], error
    # Over the configured batch size: 413, nothing stored.
    over = post(service, round_id, {"captures": [good] * (BATCH_LIMIT + 1)})
    error = error_of(over, 413)
    assert error["field"] == "captures" and str(BATCH_LIMIT) in error["message"]
    assert collected(service, round_id) == 0

    # A reference names one capture per round.
    first = post(service, round_id, {**good, "reference": "INC-1"})
    assert first.status_code == 201, first.text
    earlier = first.json()["id"]
    again = post(service, round_id, {**good, "reference": "INC-1"}, OTHER_REPORTER_TOKEN)
    error = error_of(again, 409)
    assert error["field"] == "reference" and earlier in error["message"]
    # In a batch too, all or none: nothing of the batch is stored.
    batch = {"captures": [{**good, "reference": "INC-2"}, {**good, "reference": "INC-1"}]}
    error = error_of(post(service, round_id, batch), 409)
    assert error["field"] == "captures[1].reference" and earlier in error["message"]
    twice = {"captures": [{**good, "reference": "INC-3"}, {**good, "reference": "INC-3"}]}
    error = error_of(post(service, round_id, twice), 409)
    assert error["field"] == "captures[1].reference" and "captures[0]" in error["message"]
    assert collected(service, round_id) == 1
    # Another round may hold the same reference.
    other_round = capture_round(service, "another product")
    assert post(service, other_round, {**good, "reference": "INC-1"}).status_code == 201

    # Two reporters racing with one new reference: exactly one is stored.
    answers: list[requests.Response] = []

    def report(token: str) -> None:
        answers.append(post(service, round_id, {**good, "reference": "INC-RACE"}, token))

    threads = [threading.Thread(target=report, args=(t,)) for t in (REPORTER_TOKEN, OTHER_REPORTER_TOKEN) * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.status_code for a in answers) == [201, 409, 409, 409, 409, 409]
    stored = next(a.json()["id"] for a in answers if a.status_code == 201)
    assert all(stored in a.json()["error"]["message"] for a in answers if a.status_code == 409)
    assert collected(service, round_id) == 2
    # What decides a race that both requests' checks passed: the unique index refuses the second.
    with service.services.uow() as uow:
        twin = reported_candidate(
            candidate_id=str(uuid.uuid4()), round_id=round_id, inputs={"text": "Twin."},
            reported_label=NEG, reporter=REPORTER_NAME, at=utcnow(),
        )  # fmt: skip
        uow.candidates.add(twin)
        with pytest.raises(Conflict):
            uow.captures.add_many(
                [
                    Capture(
                        candidate_id=twin.id,
                        round_id=round_id,
                        source=CaptureSource.CANARY,
                        observed_output="x",
                        model_name="m",
                        model_version="1",
                        observed_at=utcnow(),
                        reporter=REPORTER_NAME,
                        reference="INC-RACE",
                    )
                ]
            )
    assert collected(service, round_id) == 2

    # An adversarial round takes no captures.
    with service.services.database.unit_of_work() as session:
        adversarial = RoundRow(
            name="writers' round",
            task_type="sentiment",
            model_dir="/nonexistent/model",
            model_name="tiny-model",
            model_hash="sha256:" + "ab12" * 16,
            labels=[POS, NEG, NEU],
            policy=DecisionPolicy().to_dict(),
        )
        session.add(adversarial)
        session.commit()
        session.refresh(adversarial)
    error = error_of(post(service, int(adversarial.id or 0), good), 409)
    assert error["field"] == "round_id" and "capture" in error["message"]
    assert error_of(post(service, 999_999, good), 404)["field"] == "round_id"


def test_captures_are_validated_blind_and_decided_by_the_rule(
    service: LiveService, label_studio_server: Any, label_studio_annotators: list[Any]
) -> None:
    ls = LabelStudio(base_url=label_studio_server.url, api_key=label_studio_server.api_key)
    annotators = dict(zip("ABCD", label_studio_annotators, strict=False))
    round_id = capture_round(service)

    # One capture by a reporter, a batch by a lead (who may report too).
    single = post(service, round_id, capture("The refund took forty days.", NEG, reference="TICKET-7"))
    assert single.status_code == 201, single.text
    assert single.json()["status"] == "queued"
    confirmed = single.json()["id"]
    batch = post(
        service,
        round_id,
        {
            "captures": [
                capture("The parcel arrived on a Sunday.", POS, source="customer"),
                capture("Our flight was moved by an hour.", NEU, source="review", reference="REV-2"),
            ]
        },
        LEAD_TOKEN,
    )
    assert batch.status_code == 201, batch.text
    disputed, split = batch.json()["ids"]
    texts = {
        confirmed: "The refund took forty days.",
        disputed: "The parcel arrived on a Sunday.",
        split: "Our flight was moved by an hour.",
    }

    def candidate(candidate_id: str, token: str = LEAD_TOKEN) -> dict[str, Any]:
        wait_verified(service.call, round_id)
        response = service.call("GET", f"/api/candidates/{candidate_id}", token=token)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    # The background worker pushes them into the round's Label Studio project, like fooled candidates.
    wait_for(
        "every capture in Label Studio",
        lambda: all(candidate(c)["status"] == "in_validation" for c in texts),
        timeout_s=60.0,
    )
    task_of = {c: int(candidate(c)["label_studio_task_id"]) for c in texts}
    for capture_id, task_id in task_of.items():
        task = ls.tasks.get(id=task_id)
        # Blind: the inputs and the id only. Neither the reported label, nor the observed output,
        # nor the production model, nor the reporter is anywhere in what Label Studio holds.
        assert task.data == {"candidate_id": capture_id, "text": texts[capture_id]}
        whole = json.dumps(task.model_dump(mode="json"))
        reported = candidate(capture_id)["writer_label"]
        assert f'"{reported}"' not in whole
        for hidden in (OBSERVED, PROD_MODEL, REPORTER_NAME, "TICKET-7", "monitoring"):
            assert hidden not in whole
    project = service.call("GET", f"/api/rounds/{round_id}").json()["label_studio_project_id"]
    assert sorted(t.id for t in ls.tasks.list(project=project)) == sorted(task_of.values())

    def vote(capture_id: str, who: str, label: str) -> None:
        label_studio_server.annotate(task_of[capture_id], annotators[who].id, label)

    # Two validators agree with the reported label: accepted. Two disagree: rejected. A split asks a
    # third validator (escalation), as for any candidate.
    vote(confirmed, "A", NEG)
    vote(confirmed, "B", NEG)
    vote(disputed, "A", NEG)
    vote(disputed, "B", NEG)
    vote(split, "A", NEU)
    vote(split, "B", POS)
    assert candidate(confirmed)["status"] == "accepted"
    rejected = candidate(disputed)
    assert rejected["status"] == "rejected" and rejected["decision"]["validators_label"] == NEG
    escalated = candidate(split)
    assert escalated["status"] == "escalated" and escalated["wanted_votes"] == 3

    def overlap_raised() -> bool:
        task = ls.tasks.get(id=task_of[split])
        return int(task.overlap) == 3 and not task.is_labeled

    wait_for("the split capture's third annotation asked for", overlap_raised, timeout_s=30.0)
    vote(split, "C", NEU)
    assert candidate(split)["status"] == "accepted"

    # GET /api/candidates/<id> shows a capture's status, votes and provenance.
    shown = candidate(confirmed, REPORTER_TOKEN)  # the reporter reads its own capture
    assert shown["status"] == "accepted" and len(shown["votes"]) == 2
    assert {v["label"] for v in shown["votes"]} == {NEG}
    assert shown["writer_label"] == NEG and shown["fooled"] is True and shown["model_prediction"] is None
    assert shown["capture"] == {
        "source": "monitoring",
        "reference": "TICKET-7",
        "observed_output": OBSERVED,
        "model_name": PROD_MODEL,
        "model_version": "2026.11.3",
        "observed_at": "2026-11-30T07:15:00+00:00",
        "reported_label": NEG,
    }
    assert [h["outcome"] for h in shown["history"]][-1] == "accepted"
    # ...and only its own: not the lead's batch, and a writer reads no capture.
    assert service.call("GET", f"/api/candidates/{disputed}", token=REPORTER_TOKEN).status_code == 403
    assert service.call("GET", f"/api/candidates/{confirmed}", token=WRITER_TOKEN).status_code == 403
    assert service.call("GET", f"/api/candidates/{confirmed}", token=OTHER_REPORTER_TOKEN).status_code == 403

    # The accepted captures are the regression suite's cases from production, tagged by source.
    accepted = captures.accepted_captures(service.services)
    assert [(a.candidate_id, a.round_id, a.reported_label, a.source.value) for a in accepted] == [
        (confirmed, round_id, NEG, "monitoring"),
        (split, round_id, NEU, "review"),
    ]
    assert accepted[0].inputs == {"text": texts[confirmed]}
    assert captures.accepted_captures(service.services, round_id=round_id + 1) == []

    # The round dataset carries each accepted capture's provenance.
    exported = service.call("GET", f"/api/rounds/{round_id}/dataset?format=jsonl", token=EXPORTER_TOKEN)
    assert exported.status_code == 200, exported.text
    records = {r["example_id"]: r for r in map(json.loads, exported.text.splitlines())}
    assert set(records) == {confirmed, split}
    assert records[confirmed]["capture"]["source"] == "monitoring"
    assert records[confirmed]["capture"]["observed_at"] == "2026-11-30T07:15:00+00:00"
    assert records[split]["capture"]["reference"] == "REV-2"
    assert records[split]["writer_label"] == NEU
    counts = service.call("GET", f"/api/rounds/{round_id}").json()["counts"]
    assert counts["collected"] == 3 and counts["by_status"] == {"accepted": 2, "rejected": 1}

    # Frozen, its decisions final, the round's accepted captures join the regression suite, tagged
    # with where they were found; the rejected one does not.
    assert regression_suite.sync_suite(service.services) == 0  # not before the freeze
    assert service.call("POST", f"/api/rounds/{round_id}/close").status_code == 200
    frozen = service.call("POST", f"/api/rounds/{round_id}/freeze", json={})
    assert frozen.status_code == 200, frozen.text
    assert regression_suite.sync_suite(service.services) == 2
    suite = {c.id: c for c in regression_suite.list_cases(service.services)}
    assert set(suite) == {confirmed, split}
    assert (suite[confirmed].split, suite[confirmed].source, suite[confirmed].label) == (
        "capture",
        "capture:monitoring",
        NEG,
    )
    assert suite[split].source == "capture:review" and suite[split].inputs == {"text": texts[split]}
